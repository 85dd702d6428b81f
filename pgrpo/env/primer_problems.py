"""Problems for priming a real model (`pgrpo prime`), disjoint from the RL problems it is later trained on.

Template families in the built-in style: each family is one short task with a constant (a divisor, a threshold, an
offset...), and each constant gives a problem of its own, with its own method name, statement, canonical solution
and tests. Half the families are one-line returns and half are loops, counters, dicts and early returns: priming on
one-liners alone taught SmolLM2 to answer every problem with a one-line generator
(`return max(x for x in nums if x > 0)` for "largest value"; docs/real-model.md). The expected values are computed
by the family's reference function, so a test cannot disagree with the solution. None of their titles, method
names or statements is a built-in problem's (tests/env/test_primer_problems.py checks it): priming teaches the
format and the levers, never an RL problem's answer.
"""

import random
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from itertools import groupby

from pgrpo.env.problems import Problem, Test

TESTS_PER_PROBLEM = 6


@dataclass(frozen=True)
class Family:
    title: str  # with {k}
    method: str  # with {k}: a method name of its own per constant (suffixed with the constant's word)
    statement: str  # with {k} and {example}
    signature: str  # the parameters and return type, after `self, `
    body: str  # the canonical method body, with {k}; lines after the first are indented as in the method
    reference: Callable  # (k, *args) -> the expected value
    inputs: Callable[[random.Random, int], tuple]  # (rng, k) -> a random argument tuple
    constants: tuple


def _ints(rng: random.Random, n: int = 6, lo: int = -20, hi: int = 40, least: int = 0) -> list[int]:
    return [rng.randint(lo, hi) for _ in range(rng.randint(least, n))]


def _ints_around(rng: random.Random, k: int) -> list[int]:
    # drawn around the threshold, not from a fixed range: "Count Above 100" over numbers up to 40 would expect 0
    # in every test, and a stub returning 0 would pass it
    return _ints(rng, lo=k - 30, hi=k + 30)


def _word(rng: random.Random) -> str:
    return "".join(rng.choice("abcdeghilmnoprstu") for _ in range(rng.randint(1, 8)))


def _words(rng: random.Random) -> list[str]:
    return [_word(rng) for _ in range(rng.randint(0, 5))]


def _sentence(rng: random.Random) -> str:
    return " ".join(_words(rng))


def _divisions(n: int, k: int) -> int:
    return 0 if n == 0 else 1 + _divisions(n // k, k)


NAMES = {1: "One", 2: "Two", 3: "Three", 4: "Four", 5: "Five", 6: "Six", 7: "Seven", 8: "Eight", 9: "Nine",
         10: "Ten", 13: "Thirteen", 0: "Zero", -3: "MinusThree", 100: "Hundred", 50: "Fifty"}

FAMILIES = (
    Family("Sum of Multiples of {k}", "sumMultiplesOf{w}",
           "Given a list of integers nums, return the sum of the numbers in it that are divisible by {k}.",
           "nums: List[int]) -> int", "return sum(x for x in nums if x % {k} == 0)",
           lambda k, nums: sum(x for x in nums if x % k == 0), lambda r, k: (_ints(r),), (3, 4, 5, 6, 7)),
    Family("Count Above {k}", "countAbove{w}",
           "Given a list of integers nums, return how many of them are greater than {k}.",
           "nums: List[int]) -> int", "return sum(1 for x in nums if x > {k})",
           lambda k, nums: sum(1 for x in nums if x > k), lambda r, k: (_ints_around(r, k),), (0, 5, 10, 50, 100)),
    Family("Add {k} to Each", "addTo{w}",
           "Given a list of integers nums, return a new list with {k} added to every number.",
           "nums: List[int]) -> List[int]", "return [x + {k} for x in nums]",
           lambda k, nums: [x + k for x in nums], lambda r, k: (_ints(r),), (1, 2, 5, 10, -3)),
    Family("Repeat Each Letter {k} Times", "repeatEach{w}",
           "Given a string s, return the string in which every character of s appears {k} times in a row.",
           "s: str) -> str", 'return "".join(c * {k} for c in s)',
           lambda k, s: "".join(c * k for c in s), lambda r, k: (_word(r),), (2, 3, 4, 5, 6)),
    Family("Last {k} Characters", "lastChars{w}",
           "Given a string s, return its last {k} characters (all of s if it is shorter).",
           "s: str) -> str", "return s[-{k}:]",
           lambda k, s: s[-k:], lambda r, k: (_word(r),), (1, 2, 3, 4, 5)),
    Family("Clamp Below {k}", "clampAt{w}",
           "Given a list of integers nums, return a new list where every number greater than {k} is replaced "
           "by {k}.", "nums: List[int]) -> List[int]", "return [min(x, {k}) for x in nums]",
           lambda k, nums: [min(x, k) for x in nums], lambda r, k: (_ints_around(r, k),), (0, 1, 5, 10, 50)),
    Family("Words of Length {k}", "wordsOfLength{w}",
           "Given a list of strings words, return how many of them have exactly {k} characters.",
           "words: List[str]) -> int", "return sum(1 for w in words if len(w) == {k})",
           lambda k, words: sum(1 for w in words if len(w) == k), lambda r, k: (_words(r),), (1, 2, 3, 4, 5)),
    Family("Scaled Total by {k}", "scaledTotal{w}",
           "Given a list of integers nums, return the sum of every number multiplied by {k}.",
           "nums: List[int]) -> int", "return sum(x * {k} for x in nums)",
           lambda k, nums: sum(x * k for x in nums), lambda r, k: (_ints(r),), (2, 3, 5, 7, 10)),
    Family("Every Element at a Multiple of {k}", "everyNth{w}",
           "Given a list of integers nums, return the elements at positions 0, {k}, 2*{k}, ... in order.",
           "nums: List[int]) -> List[int]", "return nums[::{k}]",
           lambda k, nums: nums[::k], lambda r, k: (_ints(r, 10),), (2, 3, 4, 5, 6)),
    Family("Pad to Length {k}", "padTo{w}",
           'Given a string s, return s followed by as many "*" characters as make it {k} long (s itself if it '
           "is already that long or longer).", "s: str) -> str", 'return s + "*" * max(0, {k} - len(s))',
           lambda k, s: s + "*" * max(0, k - len(s)), lambda r, k: (_word(r),), (3, 4, 5, 6, 7)),
    Family("Remainders by {k}", "remaindersBy{w}",
           "Given a list of non-negative integers nums, return the list of each number's remainder when "
           "divided by {k}.", "nums: List[int]) -> List[int]", "return [x % {k} for x in nums]",
           lambda k, nums: [x % k for x in nums], lambda r, k: (_ints(r, lo=0),), (2, 3, 4, 5, 7)),
    Family("Is Length at Least {k}", "atLeast{w}",
           "Given a list of integers nums, return True if it has at least {k} elements and False otherwise.",
           "nums: List[int]) -> bool", "return len(nums) >= {k}",
           lambda k, nums: len(nums) >= k, lambda r, k: (_ints(r, 8),), (1, 2, 3, 4, 5)),
    Family("Shift Letters by {k}", "shiftLetters{w}",
           "Given a string s of lowercase letters, return it with every letter moved {k} places forward in the "
           "alphabet, wrapping from z back to a.", "s: str) -> str",
           'shifted = []\nfor c in s:\n    shifted.append(chr((ord(c) - ord("a") + {k}) % 26 + ord("a")))\n'
           'return "".join(shifted)',
           lambda k, s: "".join(chr((ord(c) - 97 + k) % 26 + 97) for c in s), lambda r, k: (_word(r),),
           (1, 2, 3, 5, 13)),
    Family("Longest Streak of {k}", "longestStreak{w}",
           "Given a list of integers nums, return the length of the longest run of consecutive elements that "
           "all equal {k} (0 if there is none).", "nums: List[int]) -> int",
           "best = current = 0\nfor x in nums:\n    if x == {k}:\n        current += 1\n"
           "        best = max(best, current)\n    else:\n        current = 0\nreturn best",
           lambda k, nums: max((len(list(run)) for x, run in groupby(nums) if x == k), default=0),
           lambda r, k: ([r.choice((k, k, k - 1, k + 1)) for _ in range(r.randint(0, 10))],), (0, 1, 2, 3, 5)),
    Family("Count the Digit {k}", "countDigit{w}",
           "Given a non-negative integer n, return how many of its decimal digits equal {k}.", "n: int) -> int",
           "count = 0\nfor digit in str(n):\n    if int(digit) == {k}:\n        count += 1\nreturn count",
           lambda k, n: str(n).count(str(k)), lambda r, k: (r.randint(0, 10 ** r.randint(1, 7)),), (0, 1, 3, 7, 9)),
    Family("Chunks of {k}", "chunksOf{w}",
           "Given a list of integers nums, split it into consecutive chunks of {k} elements (the last chunk may be "
           "shorter) and return the list of chunks.", "nums: List[int]) -> List[List[int]]",
           "chunks = []\nfor i in range(0, len(nums), {k}):\n    chunks.append(nums[i:i + {k}])\nreturn chunks",
           lambda k, nums: [nums[i:i + k] for i in range(0, len(nums), k)], lambda r, k: (_ints(r, 10),),
           (2, 3, 4, 5, 6)),
    Family("Pairs Adding Up to {k}", "pairsAddingTo{w}",
           "Given a list of integers nums, return how many pairs of positions i < j have nums[i] + nums[j] == {k}.",
           "nums: List[int]) -> int",
           "count = 0\nfor i in range(len(nums)):\n    for j in range(i + 1, len(nums)):\n"
           "        if nums[i] + nums[j] == {k}:\n            count += 1\nreturn count",
           lambda k, nums: sum(nums[i] + nums[j] == k for i in range(len(nums)) for j in range(i + 1, len(nums))),
           lambda r, k: ([r.randint(k // 2 - 5, k // 2 + 5) for _ in range(r.randint(0, 8))],), (0, 5, 7, 10, -3)),
    Family("First Position Above {k}", "firstAbove{w}",
           "Given a list of integers nums, return the index of the first number greater than {k}, or -1 if there "
           "is none.", "nums: List[int]) -> int",
           "for i, x in enumerate(nums):\n    if x > {k}:\n        return i\nreturn -1",
           lambda k, nums: next((i for i, x in enumerate(nums) if x > k), -1), lambda r, k: (_ints_around(r, k),),
           (0, 5, 10, 50, 100)),
    Family("Nearest to {k}", "nearestTo{w}",
           "Given a non-empty list of integers nums, return the number in it closest to {k}; on a tie, the smaller "
           "number.", "nums: List[int]) -> int",
           "best = nums[0]\nfor x in nums[1:]:\n    if abs(x - {k}) < abs(best - {k}) or "
           "(abs(x - {k}) == abs(best - {k}) and x < best):\n        best = x\nreturn best",
           lambda k, nums: min(nums, key=lambda x: (abs(x - k), x)),
           lambda r, k: (_ints(r, lo=k - 30, hi=k + 30, least=1),),
           (0, 10, 50, 100, -3)),
    Family("Letters Seen {k} Times or More", "frequentLetters{w}",
           "Given a string s, return the sorted list of the distinct characters that occur in it at least {k} "
           "times.", "s: str) -> List[str]",
           "counts = {{}}\nfor c in s:\n    counts[c] = counts.get(c, 0) + 1\n"
           "return sorted(c for c, n in counts.items() if n >= {k})",
           lambda k, s: sorted(c for c in set(s) if s.count(c) >= k),
           lambda r, k: ("".join(r.choice("abcde") for _ in range(r.randint(0, 12))),), (1, 2, 3, 4, 5)),
    Family("Total of the {k} Largest", "topTotal{w}",
           "Given a list of integers nums, return the sum of its {k} largest elements (of all of them if it has "
           "fewer).", "nums: List[int]) -> int",
           "ordered = sorted(nums, reverse=True)\nreturn sum(ordered[:{k}])",
           lambda k, nums: sum(sorted(nums, reverse=True)[:k]), lambda r, k: (_ints(r, 8),), (1, 2, 3, 4, 5)),
    Family("Divisions by {k} to Zero", "divisionsBy{w}",
           "Given a non-negative integer n, return how many times n must be replaced by n // {k} until it is 0.",
           "n: int) -> int", "steps = 0\nwhile n > 0:\n    n //= {k}\n    steps += 1\nreturn steps",
           lambda k, n: _divisions(n, k),
           lambda r, k: (r.randint(0, 10 ** r.randint(1, 4)),), (2, 3, 4, 5, 10)),
    Family("Flip Words Longer Than {k}", "flipLongWords{w}",
           "Given a string s of words separated by single spaces, return it with every word longer than {k} "
           "characters written backwards.", "s: str) -> str",
           'words = s.split(" ")\nfor i, word in enumerate(words):\n    if len(word) > {k}:\n'
           '        words[i] = word[::-1]\nreturn " ".join(words)',
           lambda k, s: " ".join(w[::-1] if len(w) > k else w for w in s.split(" ")), lambda r, k: (_sentence(r),),
           (1, 2, 3, 4, 5)),
    Family("Window Sums of {k}", "windowSums{w}",
           "Given a list of integers nums, return the sums of every {k} consecutive elements, in order (an empty "
           "list if nums has fewer than {k}).", "nums: List[int]) -> List[int]",
           "sums = []\nfor i in range(len(nums) - {k} + 1):\n    sums.append(sum(nums[i:i + {k}]))\nreturn sums",
           lambda k, nums: [sum(nums[i:i + k]) for i in range(len(nums) - k + 1)], lambda r, k: (_ints(r, 9),),
           (2, 3, 4, 5, 6)),
)


# Near-copies of RL problems that `pgrpo disjoint` found (one's canonical solution passes the other's tests), each
# replaced under `disjoint=True` by another constant of its family: (method template, constant) -> the constant.
# Both pass "Largest Value"'s tests: the 1 largest is the largest, and every number there is below 100, so the one
# nearest to 100 is the largest; and "Largest Value"'s max(nums) passes the tests of "Total of the 1 Largest".
NEAR_COPY_REPLACEMENTS = {("nearestTo{w}", 100): 7, ("topTotal{w}", 1): 6}


def primer_problems(seed: int = 0, disjoint: bool = False) -> list[Problem]:
    """Every family at every constant: 120 problems, tests drawn from a generator seeded by `seed`.

    `disjoint` swaps each near-copy of an RL problem (NEAR_COPY_REPLACEMENTS) for its family at another constant,
    drawn at the same point of the generator, so every other problem is the same as without it. Off by default:
    the primed base v1, and every result built on it, is made of the problems as they are.
    """
    rng = random.Random(seed)
    problems = []
    for f, family in enumerate(FAMILIES):
        for k in family.constants:
            if disjoint:
                k = NEAR_COPY_REPLACEMENTS.get((family.method, k), k)
            word = NAMES[k]
            method = family.method.format(w=word)
            args = [family.inputs(rng, k) for _ in range(TESTS_PER_PROBLEM)]
            while len({repr(family.reference(k, *a)) for a in args}) < 2:  # else a stub returning it would pass
                args[-1] = family.inputs(rng, k)
            example = args[0] if args[0][0] else family.inputs(rng, k)
            statement = (family.statement.format(k=k) + "\n\nExample: "
                         + ", ".join(f"{name} = {value!r}" for name, value in
                                     zip(_parameter_names(family.signature), example))
                         + f" -> {family.reference(k, *example)!r}")
            header = f"class Solution:\n    def {method}(self, {family.signature}:\n"
            problems.append(Problem(
                id=f"prime-{f:02d}-{word.lower()}", title=family.title.format(k=k), statement=statement,
                method=method, starter_code=header + "        # Add your code here",
                canonical_solution=header + textwrap.indent(family.body.format(k=k), " " * 8) + "\n",
                tests=tuple(Test(f"Solution().{method}({', '.join(map(repr, a))})", repr(family.reference(k, *a)))
                            for a in args),
                source="primer"))
    return problems


def _parameter_names(signature: str) -> list[str]:
    return [part.split(":")[0].strip() for part in signature.split(")")[0].split(",")]
