"""Small built-in-style problems for the grader tests (list, float, set, ListNode and TreeNode answers)."""

from pgrpo.env.problems import DEFAULT_SETUP_CODE, Problem, Test

NODE_SETUP = DEFAULT_SETUP_CODE + '''
class ListNode:
    def __init__(self, val=0, next=None):
        self.val = val
        self.next = next

def list_node(values):
    head = None
    for v in reversed(values):
        head = ListNode(v, head)
    return head

class TreeNode:
    def __init__(self, val=0, left=None, right=None):
        self.val = val
        self.left = left
        self.right = right

def tree_node(values):
    if not values:
        return None
    nodes = [None if v is None else TreeNode(v) for v in values]
    kids = nodes[::-1]
    root = kids.pop()
    for node in nodes:
        if node is not None:
            if kids: node.left = kids.pop()
            if kids: node.right = kids.pop()
    return root
'''


def _problem(pid: str, method: str, signature: str, canonical: str, tests: list[tuple[str, str]],
             setup: str = DEFAULT_SETUP_CODE) -> Problem:
    return Problem(
        id=pid, title=pid, statement=f"Solve {pid}.", method=method,
        starter_code=f"class Solution:\n    def {method}{signature}:\n        # Add your code here",
        canonical_solution=canonical,
        tests=tuple(Test(f"Solution().{method}({args})", expected) for args, expected in tests),
        setup_code=setup)


TWO_SUM = _problem(
    "two_sum", "twoSum", "(self, nums: List[int], target: int) -> List[int]",
    "class Solution:\n"
    "    def twoSum(self, nums: List[int], target: int) -> List[int]:\n"
    "        seen = {}\n"
    "        for i, x in enumerate(nums):\n"
    "            if target - x in seen:\n"
    "                return [seen[target - x], i]\n"
    "            seen[x] = i\n",
    [("[2, 7, 11, 15], 9", "[0, 1]"), ("[3, 2, 4], 6", "[1, 2]"), ("[3, 3], 6", "[0, 1]")])

MEAN = _problem(
    "mean", "mean", "(self, nums: List[int]) -> float",
    "class Solution:\n"
    "    def mean(self, nums: List[int]) -> float:\n"
    "        return sum(x / len(nums) for x in nums)\n",
    [("[1, 2]", "1.5"), ("[1, 1, 1]", "1.0"), ("[3]", "3")])

UNIQUE = _problem(
    "unique", "unique", "(self, words: List[str]) -> Set[str]",
    "class Solution:\n"
    "    def unique(self, words: List[str]) -> Set[str]:\n"
    "        return set(words)\n",
    [("['b', 'a', 'b']", "{'a', 'b'}"), ("[]", "set()")])

REVERSE_LIST = _problem(
    "reverse_list", "reverseList", "(self, head: Optional[ListNode]) -> Optional[ListNode]",
    "class Solution:\n"
    "    def reverseList(self, head: Optional[ListNode]) -> Optional[ListNode]:\n"
    "        prev = None\n"
    "        while head:\n"
    "            head.next, prev, head = prev, head, head.next\n"
    "        return prev\n",
    [("list_node([1, 2, 3])", "list_node([3, 2, 1])"), ("list_node([])", "None")],
    setup=NODE_SETUP)

INVERT_TREE = _problem(
    "invert_tree", "invertTree", "(self, root: Optional[TreeNode]) -> Optional[TreeNode]",
    "class Solution:\n"
    "    def invertTree(self, root: Optional[TreeNode]) -> Optional[TreeNode]:\n"
    "        if root:\n"
    "            root.left, root.right = self.invertTree(root.right), self.invertTree(root.left)\n"
    "        return root\n",
    [("tree_node([4, 2, 7, 1, 3])", "tree_node([4, 7, 2, None, None, 3, 1])")],
    setup=NODE_SETUP)

SAMPLE_PROBLEMS = (TWO_SUM, MEAN, UNIQUE, REVERSE_LIST, INVERT_TREE)

