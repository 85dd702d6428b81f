"""The built-in problem set: 48 short LeetCode-style problems written for this project.

Pure data, turned into `Problem`s by `problems._builtin_problem`. Each test is
(argument-list source, expected-value source); both are Python expressions
evaluated with `problems.DEFAULT_SETUP_CODE` in scope. Statements are short
because a tiny model reads them, several problems are one-liners so it can
solve some, and every expected value is a plain int/bool/str/None/list/dict.
"""

BUILTIN_PROBLEMS = [
    # ---------------------------------------------------------------- easy
    {
        "id": "b01",
        "title": "Sum of Evens",
        "difficulty": "easy",
        "statement": (
            "Given a list of integers nums, return the sum of the even numbers in it.\n\n"
            "Example: nums = [1, 2, 4] -> 6"
        ),
        "method": "sumEvens",
        "starter_code": (
            "class Solution:\n"
            "    def sumEvens(self, nums: List[int]) -> int:\n"
            "        # Add your code here"
        ),
        "canonical_solution": (
            "class Solution:\n"
            "    def sumEvens(self, nums: List[int]) -> int:\n"
            "        return sum(x for x in nums if x % 2 == 0)"
        ),
        "tests": [
            ("[1, 2, 4]", "6"),
            ("[]", "0"),
            ("[1, 3, 5]", "0"),
            ("[-2, -3, 4]", "2"),
            ("[0]", "0"),
            ("[10, 20, 30, 7]", "60"),
            ("[2, 2, 2, 2]", "8"),
        ],
    },
    {
        "id": "b02",
        "title": "Largest Value",
        "difficulty": "easy",
        "statement": (
            "Given a non-empty list of integers nums, return its largest value.\n\n"
            "Example: nums = [3, 1, 2] -> 3"
        ),
        "method": "maxValue",
        "starter_code": (
            "class Solution:\n"
            "    def maxValue(self, nums: List[int]) -> int:\n"
            "        # Add your code here"
        ),
        "canonical_solution": (
            "class Solution:\n"
            "    def maxValue(self, nums: List[int]) -> int:\n"
            "        return max(nums)"
        ),
        "tests": [
            ("[3, 1, 2]", "3"),
            ("[5]", "5"),
            ("[-4, -2, -9]", "-2"),
            ("[7, 7, 7]", "7"),
            ("[0, -1, 100, 99]", "100"),
            ("[1, 2, 3, 4, 5, 6]", "6"),
        ],
    },
    {
        "id": "b03",
        "title": "Reverse a String",
        "difficulty": "easy",
        "statement": (
            "Given a string s, return the string with its characters in reverse order.\n\n"
            "Example: s = 'hello' -> 'olleh'"
        ),
        "method": "reverseString",
        "starter_code": (
            "class Solution:\n"
            "    def reverseString(self, s: str) -> str:\n"
            "        # Add your code here"
        ),
        "canonical_solution": (
            "class Solution:\n"
            "    def reverseString(self, s: str) -> str:\n"
            "        return s[::-1]"
        ),
        "tests": [
            ("'hello'", "'olleh'"),
            ("''", "''"),
            ("'a'", "'a'"),
            ("'ab cd'", "'dc ba'"),
            ("'racecar'", "'racecar'"),
            ("'Python3!'", "'!3nohtyP'"),
        ],
    },
    {
        "id": "b04",
        "title": "Count Vowels",
        "difficulty": "easy",
        "statement": (
            "Given a string s, return how many of its characters are vowels "
            "(a, e, i, o, u, in lower or upper case). The letter y is not a vowel.\n\n"
            "Example: s = 'hello' -> 2"
        ),
        "method": "countVowels",
        "starter_code": (
            "class Solution:\n"
            "    def countVowels(self, s: str) -> int:\n"
            "        # Add your code here"
        ),
        "canonical_solution": (
            "class Solution:\n"
            "    def countVowels(self, s: str) -> int:\n"
            "        return sum(1 for c in s if c in 'aeiouAEIOU')"
        ),
        "tests": [
            ("'hello'", "2"),
            ("''", "0"),
            ("'rhythm'", "0"),
            ("'AEIOU'", "5"),
            ("'Programming Is Fun'", "5"),
            ("'queue'", "4"),
            ("'y'", "0"),
        ],
    },
    {
        "id": "b05",
        "title": "Exact Palindrome",
        "difficulty": "easy",
        "statement": (
            "Given a string s, return True if it reads the same forwards and backwards, "
            "comparing every character exactly (case and spaces count), else False. "
            "The empty string is a palindrome.\n\n"
            "Example: s = 'abba' -> True"
        ),
        "method": "isPalindrome",
        "starter_code": (
            "class Solution:\n"
            "    def isPalindrome(self, s: str) -> bool:\n"
            "        # Add your code here"
        ),
        "canonical_solution": (
            "class Solution:\n"
            "    def isPalindrome(self, s: str) -> bool:\n"
            "        return s == s[::-1]"
        ),
        "tests": [
            ("'racecar'", "True"),
            ("'abca'", "False"),
            ("''", "True"),
            ("'a'", "True"),
            ("'Aa'", "False"),
            ("'abba'", "True"),
            ("'ab ba'", "True"),
        ],
    },
    {
        "id": "b06",
        "title": "FizzBuzz Word",
        "difficulty": "easy",
        "statement": (
            "Given a positive integer n, return 'FizzBuzz' if n is divisible by both 3 and 5, "
            "'Fizz' if only by 3, 'Buzz' if only by 5, and otherwise n written as a string.\n\n"
            "Example: n = 10 -> 'Buzz'"
        ),
        "method": "fizzBuzz",
        "starter_code": (
            "class Solution:\n"
            "    def fizzBuzz(self, n: int) -> str:\n"
            "        # Add your code here"
        ),
        "canonical_solution": (
            "class Solution:\n"
            "    def fizzBuzz(self, n: int) -> str:\n"
            "        if n % 15 == 0:\n"
            "            return 'FizzBuzz'\n"
            "        if n % 3 == 0:\n"
            "            return 'Fizz'\n"
            "        if n % 5 == 0:\n"
            "            return 'Buzz'\n"
            "        return str(n)"
        ),
        "tests": [
            ("3", "'Fizz'"),
            ("5", "'Buzz'"),
            ("15", "'FizzBuzz'"),
            ("7", "'7'"),
            ("1", "'1'"),
            ("30", "'FizzBuzz'"),
            ("9", "'Fizz'"),
            ("20", "'Buzz'"),
        ],
    },
    {
        "id": "b07",
        "title": "Count a Target",
        "difficulty": "easy",
        "statement": (
            "Given a list of integers nums and an integer target, return how many times "
            "target appears in nums.\n\n"
            "Example: nums = [1, 2, 1, 3], target = 1 -> 2"
        ),
        "method": "countTarget",
        "starter_code": (
            "class Solution:\n"
            "    def countTarget(self, nums: List[int], target: int) -> int:\n"
            "        # Add your code here"
        ),
        "canonical_solution": (
            "class Solution:\n"
            "    def countTarget(self, nums: List[int], target: int) -> int:\n"
            "        return nums.count(target)"
        ),
        "tests": [
            ("[1, 2, 1, 3], 1", "2"),
            ("[], 5", "0"),
            ("[4, 4, 4], 4", "3"),
            ("[1, 2, 3], 7", "0"),
            ("[-1, 1, -1], -1", "2"),
            ("[0, 0, 1], 0", "2"),
        ],
    },
    {
        "id": "b08",
        "title": "Factorial",
        "difficulty": "easy",
        "statement": (
            "Given a non-negative integer n, return n! = 1 * 2 * ... * n. By definition 0! = 1.\n\n"
            "Example: n = 5 -> 120"
        ),
        "method": "factorial",
        "starter_code": (
            "class Solution:\n"
            "    def factorial(self, n: int) -> int:\n"
            "        # Add your code here"
        ),
        "canonical_solution": (
            "class Solution:\n"
            "    def factorial(self, n: int) -> int:\n"
            "        result = 1\n"
            "        for k in range(2, n + 1):\n"
            "            result *= k\n"
            "        return result"
        ),
        "tests": [
            ("0", "1"),
            ("1", "1"),
            ("3", "6"),
            ("5", "120"),
            ("10", "3628800"),
            ("20", "2432902008176640000"),
        ],
    },
    {
        "id": "b09",
        "title": "Digit Sum",
        "difficulty": "easy",
        "statement": (
            "Given a non-negative integer n, return the sum of its decimal digits.\n\n"
            "Example: n = 123 -> 6"
        ),
        "method": "digitSum",
        "starter_code": (
            "class Solution:\n"
            "    def digitSum(self, n: int) -> int:\n"
            "        # Add your code here"
        ),
        "canonical_solution": (
            "class Solution:\n"
            "    def digitSum(self, n: int) -> int:\n"
            "        return sum(int(d) for d in str(n))"
        ),
        "tests": [
            ("123", "6"),
            ("0", "0"),
            ("9", "9"),
            ("1000", "1"),
            ("99999", "45"),
            ("505", "10"),
        ],
    },
    {
        "id": "b10",
        "title": "Second Largest Distinct",
        "difficulty": "easy",
        "statement": (
            "Given a list of integers nums, return the second largest distinct value in it. "
            "If nums has fewer than two distinct values, return None.\n\n"
            "Example: nums = [5, 5, 4] -> 4"
        ),
        "method": "secondLargest",
        "starter_code": (
            "class Solution:\n"
            "    def secondLargest(self, nums: List[int]) -> Optional[int]:\n"
            "        # Add your code here"
        ),
        "canonical_solution": (
            "class Solution:\n"
            "    def secondLargest(self, nums: List[int]) -> Optional[int]:\n"
            "        values = sorted(set(nums))\n"
            "        return values[-2] if len(values) >= 2 else None"
        ),
        "tests": [
            ("[3, 1, 2]", "2"),
            ("[5, 5, 4]", "4"),
            ("[7]", "None"),
            ("[]", "None"),
            ("[2, 2, 2]", "None"),
            ("[-1, -5, -3]", "-3"),
            ("[10, 9, 10, 8]", "9"),
        ],
    },
    {
        "id": "b11",
        "title": "Remove Duplicates, Keep Order",
        "difficulty": "easy",
        "statement": (
            "Given a list of integers nums, return a new list with only the first occurrence "
            "of each value, keeping the original order.\n\n"
            "Example: nums = [1, 2, 1, 3, 2] -> [1, 2, 3]"
        ),
        "method": "removeDuplicates",
        "starter_code": (
            "class Solution:\n"
            "    def removeDuplicates(self, nums: List[int]) -> List[int]:\n"
            "        # Add your code here"
        ),
        "canonical_solution": (
            "class Solution:\n"
            "    def removeDuplicates(self, nums: List[int]) -> List[int]:\n"
            "        return list(dict.fromkeys(nums))"
        ),
        "tests": [
            ("[1, 2, 1, 3, 2]", "[1, 2, 3]"),
            ("[]", "[]"),
            ("[5, 5, 5]", "[5]"),
            ("[3, 2, 1]", "[3, 2, 1]"),
            ("[0, -1, 0, -1, 2]", "[0, -1, 2]"),
            ("[4]", "[4]"),
        ],
    },
    {
        "id": "b12",
        "title": "Capitalize Words",
        "difficulty": "easy",
        "statement": (
            "Given a string s of words separated by single spaces, return it with the first "
            "character of each word in upper case and the rest of the word in lower case.\n\n"
            "Example: s = 'pYTHON is FUN' -> 'Python Is Fun'"
        ),
        "method": "capitalizeWords",
        "starter_code": (
            "class Solution:\n"
            "    def capitalizeWords(self, s: str) -> str:\n"
            "        # Add your code here"
        ),
        "canonical_solution": (
            "class Solution:\n"
            "    def capitalizeWords(self, s: str) -> str:\n"
            "        return ' '.join(w[:1].upper() + w[1:].lower() for w in s.split(' '))"
        ),
        "tests": [
            ("'hello world'", "'Hello World'"),
            ("''", "''"),
            ("'a'", "'A'"),
            ("'pYTHON is FUN'", "'Python Is Fun'"),
            # str.title() would give '123Abc': only the first character is upper-cased
            ("'123abc def'", "'123abc Def'"),
            ("'x y z'", "'X Y Z'"),
        ],
    },
    {
        "id": "b13",
        "title": "Running Sum",
        "difficulty": "easy",
        "statement": (
            "Given a list of integers nums, return a list of the same length whose i-th element "
            "is nums[0] + nums[1] + ... + nums[i].\n\n"
            "Example: nums = [1, 2, 3] -> [1, 3, 6]"
        ),
        "method": "runningSum",
        "starter_code": (
            "class Solution:\n"
            "    def runningSum(self, nums: List[int]) -> List[int]:\n"
            "        # Add your code here"
        ),
        "canonical_solution": (
            "class Solution:\n"
            "    def runningSum(self, nums: List[int]) -> List[int]:\n"
            "        out, total = [], 0\n"
            "        for x in nums:\n"
            "            total += x\n"
            "            out.append(total)\n"
            "        return out"
        ),
        "tests": [
            ("[1, 2, 3]", "[1, 3, 6]"),
            ("[]", "[]"),
            ("[5]", "[5]"),
            ("[1, -1, 1, -1]", "[1, 0, 1, 0]"),
            ("[0, 0, 0]", "[0, 0, 0]"),
            ("[10, 20, 30, 40]", "[10, 30, 60, 100]"),
        ],
    },
    {
        "id": "b14",
        "title": "Count Words",
        "difficulty": "easy",
        "statement": (
            "Given a string s, return the number of words in it. A word is a maximal run of "
            "non-space characters; words may be separated by several spaces and s may start or "
            "end with spaces.\n\n"
            "Example: s = '  one   two ' -> 2"
        ),
        "method": "countWords",
        "starter_code": (
            "class Solution:\n"
            "    def countWords(self, s: str) -> int:\n"
            "        # Add your code here"
        ),
        "canonical_solution": (
            "class Solution:\n"
            "    def countWords(self, s: str) -> int:\n"
            "        return len(s.split())"
        ),
        "tests": [
            ("'hello world'", "2"),
            ("''", "0"),
            ("'   '", "0"),
            ("'  one   two three '", "3"),
            ("'word'", "1"),
            ("'a b c d e'", "5"),
        ],
    },
    {
        "id": "b15",
        "title": "Anagram Check",
        "difficulty": "easy",
        "statement": (
            "Given two strings s and t, return True if t uses exactly the same characters as s, "
            "each the same number of times (case matters), else False.\n\n"
            "Example: s = 'listen', t = 'silent' -> True"
        ),
        "method": "isAnagram",
        "starter_code": (
            "class Solution:\n"
            "    def isAnagram(self, s: str, t: str) -> bool:\n"
            "        # Add your code here"
        ),
        "canonical_solution": (
            "class Solution:\n"
            "    def isAnagram(self, s: str, t: str) -> bool:\n"
            "        return sorted(s) == sorted(t)"
        ),
        "tests": [
            ("'listen', 'silent'", "True"),
            ("'rat', 'car'", "False"),
            ("'', ''", "True"),
            ("'a', 'aa'", "False"),
            ("'aab', 'abb'", "False"),
            ("'Dormitory', 'dirtyroom'", "False"),
            ("'abc', 'cab'", "True"),
        ],
    },
    {
        "id": "b16",
        "title": "Index of the Minimum",
        "difficulty": "easy",
        "statement": (
            "Given a non-empty list of integers nums, return the index of its smallest value. "
            "If the smallest value appears more than once, return the first index.\n\n"
            "Example: nums = [2, 1, 1] -> 1"
        ),
        "method": "indexOfMin",
        "starter_code": (
            "class Solution:\n"
            "    def indexOfMin(self, nums: List[int]) -> int:\n"
            "        # Add your code here"
        ),
        "canonical_solution": (
            "class Solution:\n"
            "    def indexOfMin(self, nums: List[int]) -> int:\n"
            "        return nums.index(min(nums))"
        ),
        "tests": [
            ("[3, 1, 2]", "1"),
            ("[5]", "0"),
            ("[2, 1, 1]", "1"),
            ("[-3, 0, -3]", "0"),
            ("[9, 8, 7, 6]", "3"),
            ("[4, 4, 4]", "0"),
        ],
    },
    {
        "id": "b17",
        "title": "Power of Two",
        "difficulty": "easy",
        "statement": (
            "Given an integer n, return True if n equals 2**k for some integer k >= 0 "
            "(so 1, 2, 4, 8, ...), else False.\n\n"
            "Example: n = 16 -> True"
        ),
        "method": "isPowerOfTwo",
        "starter_code": (
            "class Solution:\n"
            "    def isPowerOfTwo(self, n: int) -> bool:\n"
            "        # Add your code here"
        ),
        "canonical_solution": (
            "class Solution:\n"
            "    def isPowerOfTwo(self, n: int) -> bool:\n"
            "        # a power of two has exactly one bit set, so clearing the lowest set bit leaves 0\n"
            "        return n > 0 and n & (n - 1) == 0"
        ),
        "tests": [
            ("1", "True"),
            ("16", "True"),
            ("0", "False"),
            ("-8", "False"),
            ("6", "False"),
            ("1024", "True"),
            ("1023", "False"),
        ],
    },
    {
        "id": "b18",
        "title": "Count Set Bits",
        "difficulty": "easy",
        "statement": (
            "Given a non-negative integer n, return how many 1 bits its binary representation has.\n\n"
            "Example: n = 7 (binary 111) -> 3"
        ),
        "method": "countBits",
        "starter_code": (
            "class Solution:\n"
            "    def countBits(self, n: int) -> int:\n"
            "        # Add your code here"
        ),
        "canonical_solution": (
            "class Solution:\n"
            "    def countBits(self, n: int) -> int:\n"
            "        return bin(n).count('1')"
        ),
        "tests": [
            ("0", "0"),
            ("1", "1"),
            ("7", "3"),
            ("8", "1"),
            ("10", "2"),
            ("255", "8"),
            ("1023", "10"),
        ],
    },
    {
        "id": "b19",
        "title": "Character Frequencies",
        "difficulty": "easy",
        "statement": (
            "Given a string s, return a dict mapping each character that occurs in s to the "
            "number of times it occurs (case matters; spaces count too).\n\n"
            "Example: s = 'aab' -> {'a': 2, 'b': 1}"
        ),
        "method": "charCount",
        "starter_code": (
            "class Solution:\n"
            "    def charCount(self, s: str) -> Dict[str, int]:\n"
            "        # Add your code here"
        ),
        "canonical_solution": (
            "class Solution:\n"
            "    def charCount(self, s: str) -> Dict[str, int]:\n"
            "        counts = {}\n"
            "        for c in s:\n"
            "            counts[c] = counts.get(c, 0) + 1\n"
            "        return counts"
        ),
        "tests": [
            ("'hello'", "{'h': 1, 'e': 1, 'l': 2, 'o': 1}"),
            ("''", "{}"),
            ("'aaa'", "{'a': 3}"),
            ("'abAB'", "{'a': 1, 'b': 1, 'A': 1, 'B': 1}"),
            ("'a a'", "{'a': 2, ' ': 1}"),
            ("'112'", "{'1': 2, '2': 1}"),
        ],
    },
    {
        "id": "b20",
        "title": "Merge Two Sorted Lists",
        "difficulty": "easy",
        "statement": (
            "Given two lists of integers a and b, each sorted ascending, return one list with "
            "all their elements (duplicates kept) sorted ascending.\n\n"
            "Example: a = [1, 3, 5], b = [2, 4, 6] -> [1, 2, 3, 4, 5, 6]"
        ),
        "method": "mergeSorted",
        "starter_code": (
            "class Solution:\n"
            "    def mergeSorted(self, a: List[int], b: List[int]) -> List[int]:\n"
            "        # Add your code here"
        ),
        "canonical_solution": (
            "class Solution:\n"
            "    def mergeSorted(self, a: List[int], b: List[int]) -> List[int]:\n"
            "        out, i, j = [], 0, 0\n"
            "        while i < len(a) and j < len(b):\n"
            "            if a[i] <= b[j]:\n"
            "                out.append(a[i])\n"
            "                i += 1\n"
            "            else:\n"
            "                out.append(b[j])\n"
            "                j += 1\n"
            "        return out + a[i:] + b[j:]"
        ),
        "tests": [
            ("[1, 3, 5], [2, 4, 6]", "[1, 2, 3, 4, 5, 6]"),
            ("[], []", "[]"),
            ("[1, 2], []", "[1, 2]"),
            ("[], [3]", "[3]"),
            ("[1, 1, 2], [1, 3]", "[1, 1, 1, 2, 3]"),
            ("[-5, 0], [-10, 10]", "[-10, -5, 0, 10]"),
        ],
    },
    {
        "id": "b21",
        "title": "Rotate Right",
        "difficulty": "easy",
        "statement": (
            "Given a list nums and an integer k >= 0, return a new list with the elements "
            "rotated k positions to the right (the last element moves to the front, k times). "
            "k may be larger than the length.\n\n"
            "Example: nums = [1, 2, 3, 4, 5], k = 2 -> [4, 5, 1, 2, 3]"
        ),
        "method": "rotateRight",
        "starter_code": (
            "class Solution:\n"
            "    def rotateRight(self, nums: List[int], k: int) -> List[int]:\n"
            "        # Add your code here"
        ),
        "canonical_solution": (
            "class Solution:\n"
            "    def rotateRight(self, nums: List[int], k: int) -> List[int]:\n"
            "        if not nums:\n"
            "            return []\n"
            "        cut = len(nums) - k % len(nums)\n"
            "        return nums[cut:] + nums[:cut]"
        ),
        "tests": [
            ("[1, 2, 3, 4, 5], 2", "[4, 5, 1, 2, 3]"),
            ("[1, 2, 3], 0", "[1, 2, 3]"),
            ("[], 3", "[]"),
            ("[1, 2, 3], 3", "[1, 2, 3]"),
            ("[1, 2, 3], 4", "[3, 1, 2]"),
            ("[7], 100", "[7]"),
        ],
    },
    {
        "id": "b22",
        "title": "Is Sorted",
        "difficulty": "easy",
        "statement": (
            "Given a list of integers nums, return True if it is sorted in non-decreasing order "
            "(each element <= the next), else False. Empty and one-element lists are sorted.\n\n"
            "Example: nums = [1, 2, 2, 3] -> True"
        ),
        "method": "isSorted",
        "starter_code": (
            "class Solution:\n"
            "    def isSorted(self, nums: List[int]) -> bool:\n"
            "        # Add your code here"
        ),
        "canonical_solution": (
            "class Solution:\n"
            "    def isSorted(self, nums: List[int]) -> bool:\n"
            "        return all(nums[i] <= nums[i + 1] for i in range(len(nums) - 1))"
        ),
        "tests": [
            ("[1, 2, 2, 3]", "True"),
            ("[]", "True"),
            ("[5]", "True"),
            ("[3, 2]", "False"),
            ("[1, 3, 2, 4]", "False"),
            ("[-2, -1, 0]", "True"),
            ("[1, 1, 1, 0]", "False"),
        ],
    },
    {
        "id": "b23",
        "title": "Greatest Common Divisor",
        "difficulty": "easy",
        "statement": (
            "Given two non-negative integers a and b, not both zero, return their greatest "
            "common divisor.\n\n"
            "Example: a = 12, b = 18 -> 6"
        ),
        "method": "gcdOf",
        "starter_code": (
            "class Solution:\n"
            "    def gcdOf(self, a: int, b: int) -> int:\n"
            "        # Add your code here"
        ),
        "canonical_solution": (
            "class Solution:\n"
            "    def gcdOf(self, a: int, b: int) -> int:\n"
            "        while b:\n"
            "            a, b = b, a % b\n"
            "        return a"
        ),
        "tests": [
            ("12, 18", "6"),
            ("7, 13", "1"),
            ("0, 5", "5"),
            ("5, 0", "5"),
            ("100, 10", "10"),
            ("48, 180", "12"),
            ("17, 17", "17"),
        ],
    },
    {
        "id": "b24",
        "title": "Missing Number",
        "difficulty": "easy",
        "statement": (
            "A list nums holds n distinct integers taken from 0, 1, ..., n, so exactly one of "
            "those n + 1 numbers is missing. Return the missing number.\n\n"
            "Example: nums = [3, 0, 1] -> 2"
        ),
        "method": "missingNumber",
        "starter_code": (
            "class Solution:\n"
            "    def missingNumber(self, nums: List[int]) -> int:\n"
            "        # Add your code here"
        ),
        "canonical_solution": (
            "class Solution:\n"
            "    def missingNumber(self, nums: List[int]) -> int:\n"
            "        n = len(nums)\n"
            "        return n * (n + 1) // 2 - sum(nums)"
        ),
        "tests": [
            ("[3, 0, 1]", "2"),
            ("[0]", "1"),
            ("[1]", "0"),
            ("[]", "0"),
            ("[0, 1, 2, 3, 5]", "4"),
            ("[9, 6, 4, 2, 3, 5, 7, 0, 1]", "8"),
        ],
    },
    {
        "id": "b25",
        "title": "The Unpaired Number",
        "difficulty": "easy",
        "statement": (
            "In the list nums every value appears exactly twice except one value, which appears "
            "once. Return that value.\n\n"
            "Example: nums = [4, 1, 2, 1, 2] -> 4"
        ),
        "method": "singleNumber",
        "starter_code": (
            "class Solution:\n"
            "    def singleNumber(self, nums: List[int]) -> int:\n"
            "        # Add your code here"
        ),
        "canonical_solution": (
            "class Solution:\n"
            "    def singleNumber(self, nums: List[int]) -> int:\n"
            "        # x ^ x == 0, so every pair cancels and the unpaired value is left\n"
            "        result = 0\n"
            "        for x in nums:\n"
            "            result ^= x\n"
            "        return result"
        ),
        "tests": [
            ("[2, 2, 1]", "1"),
            ("[4, 1, 2, 1, 2]", "4"),
            ("[7]", "7"),
            ("[-3, 5, 5]", "-3"),
            ("[0, 9, 9]", "0"),
            ("[10, 20, 30, 20, 10]", "30"),
        ],
    },
    {
        "id": "b26",
        "title": "Transpose a Matrix",
        "difficulty": "easy",
        "statement": (
            "Given a rectangular matrix (a list of equal-length rows), return its transpose: "
            "row i of the result is column i of the input. An empty matrix gives [].\n\n"
            "Example: matrix = [[1, 2, 3], [4, 5, 6]] -> [[1, 4], [2, 5], [3, 6]]"
        ),
        "method": "transpose",
        "starter_code": (
            "class Solution:\n"
            "    def transpose(self, matrix: List[List[int]]) -> List[List[int]]:\n"
            "        # Add your code here"
        ),
        "canonical_solution": (
            "class Solution:\n"
            "    def transpose(self, matrix: List[List[int]]) -> List[List[int]]:\n"
            "        return [list(col) for col in zip(*matrix)]"
        ),
        "tests": [
            ("[[1, 2], [3, 4]]", "[[1, 3], [2, 4]]"),
            ("[[1, 2, 3]]", "[[1], [2], [3]]"),
            ("[[1], [2], [3]]", "[[1, 2, 3]]"),
            ("[[5]]", "[[5]]"),
            ("[[1, 2, 3], [4, 5, 6]]", "[[1, 4], [2, 5], [3, 6]]"),
            ("[]", "[]"),
        ],
    },
    {
        "id": "b27",
        "title": "Diagonal Sum",
        "difficulty": "easy",
        "statement": (
            "Given a non-empty n x n matrix of integers, return the sum of the elements on its "
            "main diagonal and its anti-diagonal. When n is odd the centre element lies on both "
            "and is counted once.\n\n"
            "Example: matrix = [[1, 2], [3, 4]] -> 10"
        ),
        "method": "diagonalSum",
        "starter_code": (
            "class Solution:\n"
            "    def diagonalSum(self, matrix: List[List[int]]) -> int:\n"
            "        # Add your code here"
        ),
        "canonical_solution": (
            "class Solution:\n"
            "    def diagonalSum(self, matrix: List[List[int]]) -> int:\n"
            "        n = len(matrix)\n"
            "        total = sum(matrix[i][i] + matrix[i][n - 1 - i] for i in range(n))\n"
            "        if n % 2:\n"
            "            total -= matrix[n // 2][n // 2]\n"
            "        return total"
        ),
        "tests": [
            ("[[1, 2, 3], [4, 5, 6], [7, 8, 9]]", "25"),
            ("[[5]]", "5"),
            ("[[1, 2], [3, 4]]", "10"),
            ("[[1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1]]", "8"),
            ("[[-1, 0], [0, -1]]", "-2"),
            ("[[2, 0, 0], [0, 2, 0], [0, 0, 2]]", "6"),
        ],
    },
    {
        "id": "b28",
        "title": "First Unique Character",
        "difficulty": "easy",
        "statement": (
            "Given a string s, return the index of the first character that occurs exactly once "
            "in s, or -1 if there is none.\n\n"
            "Example: s = 'swiss' -> 1"
        ),
        "method": "firstUniqueChar",
        "starter_code": (
            "class Solution:\n"
            "    def firstUniqueChar(self, s: str) -> int:\n"
            "        # Add your code here"
        ),
        "canonical_solution": (
            "class Solution:\n"
            "    def firstUniqueChar(self, s: str) -> int:\n"
            "        counts = {}\n"
            "        for c in s:\n"
            "            counts[c] = counts.get(c, 0) + 1\n"
            "        for i, c in enumerate(s):\n"
            "            if counts[c] == 1:\n"
            "                return i\n"
            "        return -1"
        ),
        "tests": [
            ("'swiss'", "1"),
            ("'aabb'", "-1"),
            ("''", "-1"),
            ("'z'", "0"),
            ("'abcabd'", "2"),
            ("'xxyzz'", "2"),
            ("'banana'", "0"),
        ],
    },
    {
        "id": "b29",
        "title": "Balanced Brackets",
        "difficulty": "easy",
        "statement": (
            "Given a string s made only of the characters ()[]{}, return True if every opening "
            "bracket is closed by the same type of bracket in the right order, else False. "
            "The empty string is balanced.\n\n"
            "Example: s = '([]{})' -> True"
        ),
        "method": "isBalanced",
        "starter_code": (
            "class Solution:\n"
            "    def isBalanced(self, s: str) -> bool:\n"
            "        # Add your code here"
        ),
        "canonical_solution": (
            "class Solution:\n"
            "    def isBalanced(self, s: str) -> bool:\n"
            "        pairs = {')': '(', ']': '[', '}': '{'}\n"
            "        stack = []\n"
            "        for c in s:\n"
            "            if c in pairs:\n"
            "                if not stack or stack.pop() != pairs[c]:\n"
            "                    return False\n"
            "            else:\n"
            "                stack.append(c)\n"
            "        return not stack"
        ),
        "tests": [
            ("'()'", "True"),
            ("'([]{})'", "True"),
            ("''", "True"),
            ("'(]'", "False"),
            ("'(('", "False"),
            ("'([)]'", "False"),
            ("'{[()()]}'", "True"),
            ("')('", "False"),
        ],
    },
    {
        "id": "b30",
        "title": "To Binary",
        "difficulty": "easy",
        "statement": (
            "Given a non-negative integer n, return its binary representation as a string of "
            "0s and 1s without leading zeros (n = 0 gives '0').\n\n"
            "Example: n = 5 -> '101'"
        ),
        "method": "toBinary",
        "starter_code": (
            "class Solution:\n"
            "    def toBinary(self, n: int) -> str:\n"
            "        # Add your code here"
        ),
        "canonical_solution": (
            "class Solution:\n"
            "    def toBinary(self, n: int) -> str:\n"
            "        return bin(n)[2:]"
        ),
        "tests": [
            ("0", "'0'"),
            ("1", "'1'"),
            ("5", "'101'"),
            ("8", "'1000'"),
            ("10", "'1010'"),
            ("255", "'11111111'"),
        ],
    },
    # -------------------------------------------------------------- medium
    {
        "id": "b31",
        "title": "Pair With Target Sum",
        "difficulty": "medium",
        "statement": (
            "Given a list nums of distinct integers sorted ascending and an integer target, "
            "return [i, j] with i < j and nums[i] + nums[j] == target. At most one such pair "
            "exists; return [] if there is none.\n\n"
            "Example: nums = [1, 3, 5, 8], target = 9 -> [0, 3]"
        ),
        "method": "pairWithSum",
        "starter_code": (
            "class Solution:\n"
            "    def pairWithSum(self, nums: List[int], target: int) -> List[int]:\n"
            "        # Add your code here"
        ),
        "canonical_solution": (
            "class Solution:\n"
            "    def pairWithSum(self, nums: List[int], target: int) -> List[int]:\n"
            "        i, j = 0, len(nums) - 1\n"
            "        while i < j:\n"
            "            total = nums[i] + nums[j]\n"
            "            if total == target:\n"
            "                return [i, j]\n"
            "            if total < target:\n"
            "                i += 1\n"
            "            else:\n"
            "                j -= 1\n"
            "        return []"
        ),
        "tests": [
            ("[1, 3, 5, 8], 9", "[0, 3]"),
            ("[2, 5, 9, 14], 14", "[1, 2]"),
            ("[], 3", "[]"),
            ("[5], 10", "[]"),
            ("[1, 2, 3], 10", "[]"),
            ("[-4, -1, 2, 8], 1", "[1, 2]"),
            ("[0, 10], 10", "[0, 1]"),
        ],
    },
    {
        "id": "b32",
        "title": "Longest Run Without Repeats",
        "difficulty": "medium",
        "statement": (
            "Given a string s, return the length of the longest contiguous substring of s in "
            "which no character appears twice.\n\n"
            "Example: s = 'abcad' -> 4 ('bcad')"
        ),
        "method": "longestUniqueRun",
        "starter_code": (
            "class Solution:\n"
            "    def longestUniqueRun(self, s: str) -> int:\n"
            "        # Add your code here"
        ),
        "canonical_solution": (
            "class Solution:\n"
            "    def longestUniqueRun(self, s: str) -> int:\n"
            "        last, start, best = {}, 0, 0\n"
            "        for i, c in enumerate(s):\n"
            "            if last.get(c, -1) >= start:\n"
            "                start = last[c] + 1\n"
            "            last[c] = i\n"
            "            best = max(best, i - start + 1)\n"
            "        return best"
        ),
        "tests": [
            ("'abcad'", "4"),
            ("''", "0"),
            ("'aaaa'", "1"),
            ("'abcdef'", "6"),
            ("'abba'", "2"),
            ("'xyxzy'", "3"),
            ("'pqrsqp'", "4"),
        ],
    },
    {
        "id": "b33",
        "title": "Merge Intervals",
        "difficulty": "medium",
        "statement": (
            "Given a list of intervals [start, end] (start <= end) in any order, merge every "
            "group that overlaps or touches ([1, 3] and [3, 5] become [1, 5]). Return the merged "
            "intervals sorted by start.\n\n"
            "Example: intervals = [[1, 3], [8, 10], [2, 6]] -> [[1, 6], [8, 10]]"
        ),
        "method": "mergeIntervals",
        "starter_code": (
            "class Solution:\n"
            "    def mergeIntervals(self, intervals: List[List[int]]) -> List[List[int]]:\n"
            "        # Add your code here"
        ),
        "canonical_solution": (
            "class Solution:\n"
            "    def mergeIntervals(self, intervals: List[List[int]]) -> List[List[int]]:\n"
            "        merged = []\n"
            "        for start, end in sorted(intervals):\n"
            "            if merged and start <= merged[-1][1]:\n"
            "                merged[-1][1] = max(merged[-1][1], end)\n"
            "            else:\n"
            "                merged.append([start, end])\n"
            "        return merged"
        ),
        "tests": [
            ("[[1, 3], [2, 6], [8, 10]]", "[[1, 6], [8, 10]]"),
            ("[]", "[]"),
            ("[[1, 4], [4, 5]]", "[[1, 5]]"),
            ("[[5, 6], [1, 2]]", "[[1, 2], [5, 6]]"),
            ("[[1, 10], [2, 3], [4, 5]]", "[[1, 10]]"),
            ("[[3, 3]]", "[[3, 3]]"),
            ("[[6, 8], [1, 3], [2, 4], [9, 9]]", "[[1, 4], [6, 8], [9, 9]]"),
        ],
    },
    {
        "id": "b34",
        "title": "Best Contiguous Sum",
        "difficulty": "medium",
        "statement": (
            "Given a non-empty list of integers nums, return the largest sum of a non-empty "
            "contiguous sub-list.\n\n"
            "Example: nums = [-1, 4, -1, 4, -10, 6] -> 7"
        ),
        "method": "maxSubarraySum",
        "starter_code": (
            "class Solution:\n"
            "    def maxSubarraySum(self, nums: List[int]) -> int:\n"
            "        # Add your code here"
        ),
        "canonical_solution": (
            "class Solution:\n"
            "    def maxSubarraySum(self, nums: List[int]) -> int:\n"
            "        best = current = nums[0]\n"
            "        for x in nums[1:]:\n"
            "            # either extend the run ending at the previous element or start afresh\n"
            "            current = max(x, current + x)\n"
            "            best = max(best, current)\n"
            "        return best"
        ),
        "tests": [
            ("[2, -1, 3, -5, 4]", "4"),
            ("[-3, -1, -2]", "-1"),
            ("[5]", "5"),
            ("[1, 2, 3]", "6"),
            ("[3, -4, 5, -1, 2, -6, 1]", "6"),
            ("[0, 0, 0]", "0"),
            ("[-1, 4, -1, 4, -10, 6]", "7"),
        ],
    },
    {
        "id": "b35",
        "title": "Ways Up the Stairs",
        "difficulty": "medium",
        "statement": (
            "You climb a staircase of n steps, taking 1 or 2 steps at a time. Return the number "
            "of distinct step sequences that reach the top exactly. For n = 0 there is one way "
            "(do nothing).\n\n"
            "Example: n = 3 -> 3 (1+1+1, 1+2, 2+1)"
        ),
        "method": "countWays",
        "starter_code": (
            "class Solution:\n"
            "    def countWays(self, n: int) -> int:\n"
            "        # Add your code here"
        ),
        "canonical_solution": (
            "class Solution:\n"
            "    def countWays(self, n: int) -> int:\n"
            "        a, b = 1, 1  # ways to reach steps i and i + 1\n"
            "        for _ in range(n):\n"
            "            a, b = b, a + b\n"
            "        return a"
        ),
        "tests": [
            ("0", "1"),
            ("1", "1"),
            ("2", "2"),
            ("3", "3"),
            ("5", "8"),
            ("10", "89"),
            ("40", "165580141"),
        ],
    },
    {
        "id": "b36",
        "title": "Fewest Coins",
        "difficulty": "medium",
        "statement": (
            "Given a list of positive coin values (unlimited coins of each) and an integer "
            "amount >= 0, return the fewest coins whose values add up to amount, or -1 if it "
            "cannot be done. amount = 0 needs 0 coins.\n\n"
            "Example: coins = [1, 3, 4], amount = 6 -> 2 (3 + 3)"
        ),
        "method": "minCoins",
        "starter_code": (
            "class Solution:\n"
            "    def minCoins(self, coins: List[int], amount: int) -> int:\n"
            "        # Add your code here"
        ),
        "canonical_solution": (
            "class Solution:\n"
            "    def minCoins(self, coins: List[int], amount: int) -> int:\n"
            "        INF = amount + 1  # more coins than any real answer can need\n"
            "        best = [0] + [INF] * amount\n"
            "        for a in range(1, amount + 1):\n"
            "            for c in coins:\n"
            "                if c <= a and best[a - c] + 1 < best[a]:\n"
            "                    best[a] = best[a - c] + 1\n"
            "        return best[amount] if best[amount] < INF else -1"
        ),
        "tests": [
            # greedy (4 + 1 + 1) is wrong here
            ("[1, 3, 4], 6", "2"),
            ("[2], 3", "-1"),
            ("[7], 0", "0"),
            ("[1], 5", "5"),
            ("[2, 5, 10], 27", "4"),
            ("[5, 10], 3", "-1"),
            ("[3, 7], 20", "4"),
        ],
    },
    {
        "id": "b37",
        "title": "Evaluate Postfix",
        "difficulty": "medium",
        "statement": (
            "Given a list of string tokens forming a valid postfix (reverse Polish) expression "
            "with integers and the operators '+', '-', '*', return its integer value. For "
            "'a b -' the result is a - b.\n\n"
            "Example: tokens = ['2', '3', '4', '*', '+'] -> 14"
        ),
        "method": "evalPostfix",
        "starter_code": (
            "class Solution:\n"
            "    def evalPostfix(self, tokens: List[str]) -> int:\n"
            "        # Add your code here"
        ),
        "canonical_solution": (
            "class Solution:\n"
            "    def evalPostfix(self, tokens: List[str]) -> int:\n"
            "        stack = []\n"
            "        for tok in tokens:\n"
            "            if tok in ('+', '-', '*'):\n"
            "                b, a = stack.pop(), stack.pop()\n"
            "                stack.append(a + b if tok == '+' else a - b if tok == '-' else a * b)\n"
            "            else:\n"
            "                stack.append(int(tok))\n"
            "        return stack[-1]"
        ),
        "tests": [
            ("['2', '3', '+']", "5"),
            ("['4', '2', '-']", "2"),
            ("['5']", "5"),
            ("['2', '3', '4', '*', '+']", "14"),
            ("['1', '2', '+', '3', '*']", "9"),
            ("['-3', '4', '*']", "-12"),
            ("['10', '2', '3', '-', '-']", "11"),
        ],
    },
    {
        "id": "b38",
        "title": "Spiral Walk",
        "difficulty": "medium",
        "statement": (
            "Given a rectangular matrix, return its elements in clockwise spiral order: along "
            "the top row left to right, down the right column, back along the bottom row, up the "
            "left column, then the same for the inner part.\n\n"
            "Example: matrix = [[1, 2], [3, 4], [5, 6]] -> [1, 2, 4, 6, 5, 3]"
        ),
        "method": "spiralOrder",
        "starter_code": (
            "class Solution:\n"
            "    def spiralOrder(self, matrix: List[List[int]]) -> List[int]:\n"
            "        # Add your code here"
        ),
        "canonical_solution": (
            "class Solution:\n"
            "    def spiralOrder(self, matrix: List[List[int]]) -> List[int]:\n"
            "        out, rows = [], [list(r) for r in matrix]\n"
            "        while rows:\n"
            "            out += rows.pop(0)\n"
            "            # turn the rest counter-clockwise so its right column becomes the top row\n"
            "            rows = [list(r) for r in zip(*rows)][::-1]\n"
            "        return out"
        ),
        "tests": [
            ("[[1, 2, 3], [4, 5, 6], [7, 8, 9]]", "[1, 2, 3, 6, 9, 8, 7, 4, 5]"),
            ("[]", "[]"),
            ("[[1]]", "[1]"),
            ("[[1, 2, 3, 4]]", "[1, 2, 3, 4]"),
            ("[[1], [2], [3]]", "[1, 2, 3]"),
            ("[[1, 2], [3, 4], [5, 6]]", "[1, 2, 4, 6, 5, 3]"),
            ("[[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]]", "[1, 2, 3, 4, 8, 12, 11, 10, 9, 5, 6, 7]"),
        ],
    },
    {
        "id": "b39",
        "title": "Group Anagrams",
        "difficulty": "medium",
        "statement": (
            "Given a list of words, group together the words that are anagrams of each other "
            "(duplicates stay). Sort the words inside each group ascending, then sort the groups "
            "by their first word, and return the list of groups.\n\n"
            "Example: words = ['top', 'pots', 'opt', 'stop'] -> [['opt', 'top'], ['pots', 'stop']]"
        ),
        "method": "groupAnagrams",
        "starter_code": (
            "class Solution:\n"
            "    def groupAnagrams(self, words: List[str]) -> List[List[str]]:\n"
            "        # Add your code here"
        ),
        "canonical_solution": (
            "class Solution:\n"
            "    def groupAnagrams(self, words: List[str]) -> List[List[str]]:\n"
            "        groups = {}\n"
            "        for w in words:\n"
            "            groups.setdefault(''.join(sorted(w)), []).append(w)\n"
            "        return sorted(sorted(g) for g in groups.values())"
        ),
        "tests": [
            ("['pots', 'stop', 'top', 'tops', 'opt', 'spot']", "[['opt', 'top'], ['pots', 'spot', 'stop', 'tops']]"),
            ("[]", "[]"),
            ("['a']", "[['a']]"),
            ("['ab', 'ba', 'ab']", "[['ab', 'ab', 'ba']]"),
            ("['x', 'y', 'z']", "[['x'], ['y'], ['z']]"),
            ("['listen', 'silent', 'enlist', 'google']", "[['enlist', 'listen', 'silent'], ['google']]"),
            ("['', 'b', '']", "[['', ''], ['b']]"),
        ],
    },
    {
        "id": "b40",
        "title": "Most Frequent Values",
        "difficulty": "medium",
        "statement": (
            "Given a list of integers nums and an integer k (0 <= k <= number of distinct "
            "values), return the k most frequent values, ordered by count descending; values with "
            "equal counts go smaller value first.\n\n"
            "Example: nums = [4, 4, 4, 6, 6, 9], k = 2 -> [4, 6]"
        ),
        "method": "topKFrequent",
        "starter_code": (
            "class Solution:\n"
            "    def topKFrequent(self, nums: List[int], k: int) -> List[int]:\n"
            "        # Add your code here"
        ),
        "canonical_solution": (
            "class Solution:\n"
            "    def topKFrequent(self, nums: List[int], k: int) -> List[int]:\n"
            "        counts = {}\n"
            "        for x in nums:\n"
            "            counts[x] = counts.get(x, 0) + 1\n"
            "        return sorted(counts, key=lambda v: (-counts[v], v))[:k]"
        ),
        "tests": [
            ("[4, 4, 4, 6, 6, 9], 2", "[4, 6]"),
            ("[5], 1", "[5]"),
            ("[3, 1, 2, 1, 2, 3], 2", "[1, 2]"),
            ("[7, 7, 8, 8, 8, 9], 3", "[8, 7, 9]"),
            ("[-1, -1, 2], 1", "[-1]"),
            ("[1, 2, 3, 4], 0", "[]"),
        ],
    },
    {
        "id": "b41",
        "title": "Next Greater Value",
        "difficulty": "medium",
        "statement": (
            "Given a list of integers nums, return a list where position i holds the first value "
            "to the right of nums[i] that is strictly greater than nums[i], or -1 if there is "
            "none.\n\n"
            "Example: nums = [3, 1, 2, 5, 4] -> [5, 2, 5, -1, -1]"
        ),
        "method": "nextGreater",
        "starter_code": (
            "class Solution:\n"
            "    def nextGreater(self, nums: List[int]) -> List[int]:\n"
            "        # Add your code here"
        ),
        "canonical_solution": (
            "class Solution:\n"
            "    def nextGreater(self, nums: List[int]) -> List[int]:\n"
            "        out = [-1] * len(nums)\n"
            "        waiting = []  # indices still looking for a greater value, values non-increasing\n"
            "        for i, x in enumerate(nums):\n"
            "            while waiting and nums[waiting[-1]] < x:\n"
            "                out[waiting.pop()] = x\n"
            "            waiting.append(i)\n"
            "        return out"
        ),
        "tests": [
            ("[2, 1, 3]", "[3, 3, -1]"),
            ("[]", "[]"),
            ("[5]", "[-1]"),
            ("[1, 2, 3, 4]", "[2, 3, 4, -1]"),
            ("[4, 3, 2, 1]", "[-1, -1, -1, -1]"),
            ("[2, 2, 3]", "[3, 3, -1]"),
            ("[3, 1, 2, 5, 4]", "[5, 2, 5, -1, -1]"),
        ],
    },
    {
        "id": "b42",
        "title": "Longest Common Subsequence",
        "difficulty": "medium",
        "statement": (
            "Given two strings a and b, return the length of their longest common subsequence: "
            "the longest string that can be obtained from both by deleting characters without "
            "reordering the rest.\n\n"
            "Example: a = 'kitten', b = 'sitting' -> 4 ('ittn')"
        ),
        "method": "lcsLength",
        "starter_code": (
            "class Solution:\n"
            "    def lcsLength(self, a: str, b: str) -> int:\n"
            "        # Add your code here"
        ),
        "canonical_solution": (
            "class Solution:\n"
            "    def lcsLength(self, a: str, b: str) -> int:\n"
            "        prev = [0] * (len(b) + 1)\n"
            "        for ca in a:\n"
            "            cur = [0]\n"
            "            for j, cb in enumerate(b):\n"
            "                cur.append(prev[j] + 1 if ca == cb else max(prev[j + 1], cur[j]))\n"
            "            prev = cur\n"
            "        return prev[-1]"
        ),
        "tests": [
            ("'kitten', 'sitting'", "4"),
            ("'', 'abc'", "0"),
            ("'abc', 'abc'", "3"),
            ("'abc', 'def'", "0"),
            ("'axbycz', 'abc'", "3"),
            ("'aaaa', 'aa'", "2"),
            ("'abcd', 'dcba'", "1"),
        ],
    },
    {
        "id": "b43",
        "title": "Count Islands",
        "difficulty": "medium",
        "statement": (
            "Given a grid (list of rows) of 0s and 1s, return the number of islands. An island is "
            "a group of 1s connected up, down, left or right (not diagonally).\n\n"
            "Example: grid = [[1, 1, 0], [0, 1, 0], [0, 0, 1]] -> 2"
        ),
        "method": "countIslands",
        "starter_code": (
            "class Solution:\n"
            "    def countIslands(self, grid: List[List[int]]) -> int:\n"
            "        # Add your code here"
        ),
        "canonical_solution": (
            "class Solution:\n"
            "    def countIslands(self, grid: List[List[int]]) -> int:\n"
            "        seen, islands = set(), 0\n"
            "        for r, row in enumerate(grid):\n"
            "            for c, cell in enumerate(row):\n"
            "                if cell != 1 or (r, c) in seen:\n"
            "                    continue\n"
            "                islands += 1\n"
            "                seen.add((r, c))\n"
            "                stack = [(r, c)]\n"
            "                while stack:\n"
            "                    i, j = stack.pop()\n"
            "                    for y, x in ((i + 1, j), (i - 1, j), (i, j + 1), (i, j - 1)):\n"
            "                        if 0 <= y < len(grid) and 0 <= x < len(grid[y]) and grid[y][x] == 1 and (y, x) not in seen:\n"
            "                            seen.add((y, x))\n"
            "                            stack.append((y, x))\n"
            "        return islands"
        ),
        "tests": [
            ("[[1, 1, 0], [0, 1, 0], [0, 0, 1]]", "2"),
            ("[]", "0"),
            ("[[0, 0], [0, 0]]", "0"),
            ("[[1]]", "1"),
            ("[[1, 0, 1], [0, 1, 0], [1, 0, 1]]", "5"),
            ("[[1, 1, 1], [1, 0, 1], [1, 1, 1]]", "1"),
            ("[[1, 0, 1, 0, 1]]", "3"),
        ],
    },
    {
        "id": "b44",
        "title": "Product of the Others",
        "difficulty": "medium",
        "statement": (
            "Given a list of integers nums, return a list where position i holds the product of "
            "all elements of nums except nums[i]. The product of no numbers is 1.\n\n"
            "Example: nums = [2, 3, 4] -> [12, 8, 6]"
        ),
        "method": "productExceptSelf",
        "starter_code": (
            "class Solution:\n"
            "    def productExceptSelf(self, nums: List[int]) -> List[int]:\n"
            "        # Add your code here"
        ),
        "canonical_solution": (
            "class Solution:\n"
            "    def productExceptSelf(self, nums: List[int]) -> List[int]:\n"
            "        # prefix products from the left times suffix products from the right (no division: zeros are fine)\n"
            "        out, left = [], 1\n"
            "        for x in nums:\n"
            "            out.append(left)\n"
            "            left *= x\n"
            "        right = 1\n"
            "        for i in range(len(nums) - 1, -1, -1):\n"
            "            out[i] *= right\n"
            "            right *= nums[i]\n"
            "        return out"
        ),
        "tests": [
            ("[2, 3, 4]", "[12, 8, 6]"),
            ("[5, 0, 2]", "[0, 10, 0]"),
            ("[0, 0, 3]", "[0, 0, 0]"),
            ("[7]", "[1]"),
            ("[-1, 2, -3]", "[-6, 3, -2]"),
            ("[1, 1, 1, 1]", "[1, 1, 1, 1]"),
            ("[]", "[]"),
        ],
    },
    {
        "id": "b45",
        "title": "Meeting Rooms Needed",
        "difficulty": "medium",
        "statement": (
            "Given meetings as [start, end] with start < end, return the fewest rooms needed so "
            "that meetings in the same room never overlap. A meeting ending at time t and one "
            "starting at t can share a room.\n\n"
            "Example: meetings = [[1, 5], [2, 6], [8, 9]] -> 2"
        ),
        "method": "minRooms",
        "starter_code": (
            "class Solution:\n"
            "    def minRooms(self, meetings: List[List[int]]) -> int:\n"
            "        # Add your code here"
        ),
        "canonical_solution": (
            "class Solution:\n"
            "    def minRooms(self, meetings: List[List[int]]) -> int:\n"
            "        import heapq\n"
            "        ends = []  # end times of the meetings currently holding a room\n"
            "        for start, end in sorted(meetings):\n"
            "            if ends and ends[0] <= start:\n"
            "                heapq.heapreplace(ends, end)\n"
            "            else:\n"
            "                heapq.heappush(ends, end)\n"
            "        return len(ends)"
        ),
        "tests": [
            ("[[1, 5], [2, 6], [8, 9]]", "2"),
            ("[]", "0"),
            ("[[1, 2]]", "1"),
            ("[[1, 3], [3, 5], [5, 7]]", "1"),
            ("[[1, 10], [2, 9], [3, 8], [4, 7]]", "4"),
            ("[[4, 6], [1, 5], [5, 8], [2, 3]]", "2"),
            ("[[1, 4], [2, 5], [3, 6]]", "3"),
        ],
    },
    {
        "id": "b46",
        "title": "Run-Length Compress",
        "difficulty": "medium",
        "statement": (
            "Given a string s, replace every run of the same character by the character followed "
            "by the run length; a run of length 1 is written as the character alone. Case "
            "matters.\n\n"
            "Example: s = 'aaabcc' -> 'a3bc2'"
        ),
        "method": "compressRuns",
        "starter_code": (
            "class Solution:\n"
            "    def compressRuns(self, s: str) -> str:\n"
            "        # Add your code here"
        ),
        "canonical_solution": (
            "class Solution:\n"
            "    def compressRuns(self, s: str) -> str:\n"
            "        out, i = [], 0\n"
            "        while i < len(s):\n"
            "            j = i\n"
            "            while j < len(s) and s[j] == s[i]:\n"
            "                j += 1\n"
            "            out.append(s[i] + (str(j - i) if j - i > 1 else ''))\n"
            "            i = j\n"
            "        return ''.join(out)"
        ),
        "tests": [
            ("'aaabcc'", "'a3bc2'"),
            ("''", "''"),
            ("'abc'", "'abc'"),
            ("'zzzzzzzzzzzz'", "'z12'"),
            ("'aabbaa'", "'a2b2a2'"),
            ("'x'", "'x'"),
            ("'aAa'", "'aAa'"),
        ],
    },
    {
        "id": "b47",
        "title": "Paths Around Walls",
        "difficulty": "medium",
        "statement": (
            "Given a non-empty grid of 0s (open) and 1s (wall), count the paths from the top-left "
            "cell to the bottom-right cell that move only right or down through open cells. "
            "Return 0 if either corner is a wall.\n\n"
            "Example: grid = [[0, 0], [0, 0]] -> 2"
        ),
        "method": "uniquePaths",
        "starter_code": (
            "class Solution:\n"
            "    def uniquePaths(self, grid: List[List[int]]) -> int:\n"
            "        # Add your code here"
        ),
        "canonical_solution": (
            "class Solution:\n"
            "    def uniquePaths(self, grid: List[List[int]]) -> int:\n"
            "        ways = [0] * len(grid[0])  # ways[c]: paths reaching column c of the current row\n"
            "        ways[0] = 1\n"
            "        for row in grid:\n"
            "            for c, cell in enumerate(row):\n"
            "                if cell == 1:\n"
            "                    ways[c] = 0\n"
            "                elif c > 0:\n"
            "                    ways[c] += ways[c - 1]\n"
            "        return ways[-1]"
        ),
        "tests": [
            ("[[0, 0], [0, 0]]", "2"),
            ("[[0]]", "1"),
            ("[[1]]", "0"),
            ("[[0, 0, 0], [0, 0, 0]]", "3"),
            ("[[0, 1], [0, 0]]", "1"),
            ("[[0, 0, 0], [1, 1, 0], [0, 0, 0]]", "1"),
            ("[[0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]", "20"),
            ("[[0, 0], [0, 1]]", "0"),
        ],
    },
    {
        "id": "b48",
        "title": "Longest Rising Subsequence",
        "difficulty": "medium",
        "statement": (
            "Given a list of integers nums, return the length of its longest strictly increasing "
            "subsequence (elements kept in their original order, not necessarily adjacent).\n\n"
            "Example: nums = [3, 1, 4, 1, 5, 9, 2, 6] -> 4"
        ),
        "method": "lisLength",
        "starter_code": (
            "class Solution:\n"
            "    def lisLength(self, nums: List[int]) -> int:\n"
            "        # Add your code here"
        ),
        "canonical_solution": (
            "class Solution:\n"
            "    def lisLength(self, nums: List[int]) -> int:\n"
            "        import bisect\n"
            "        tails = []  # tails[k]: smallest last element of a rising subsequence of length k + 1\n"
            "        for x in nums:\n"
            "            k = bisect.bisect_left(tails, x)\n"
            "            if k == len(tails):\n"
            "                tails.append(x)\n"
            "            else:\n"
            "                tails[k] = x\n"
            "        return len(tails)"
        ),
        "tests": [
            ("[3, 1, 4, 1, 5, 9, 2, 6]", "4"),
            ("[]", "0"),
            ("[7]", "1"),
            ("[5, 4, 3]", "1"),
            ("[2, 2, 2]", "1"),
            ("[1, 2, 3, 4, 5]", "5"),
            ("[0, 8, 4, 12, 2, 10, 6, 14, 1, 9]", "4"),
        ],
    },
]
