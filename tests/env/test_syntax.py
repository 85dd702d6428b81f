import threading

from pgrpo.env.exploits import loophole_code
from pgrpo.env.grader import levers_pulled
from pgrpo.env.syntax import parses

# a long honest answer: the race needs a parse long enough for a collection to land inside it
CODE = "class Solution:\n" + "".join(f"    def f{i}(self, x):\n        return [y * {i} for y in range(x) if y % 2]\n"
                                      for i in range(150))


class _CycleWithFinaliser:
    """Garbage only the collector frees; its finaliser runs bytecode, so the GIL can change hands mid-parse."""

    def __init__(self):
        self.me = self

    def __del__(self):
        sum(range(2000))


def test_the_grader_threads_parse_code_while_the_collector_runs_finalisers():
    # CPython 3.11's AST constructor counts its recursion per interpreter (gh-106905); unguarded, this raised
    # SystemError "AST constructor recursion depth mismatch" within a second, as it did once in CI's LeetCode eval
    errors = []

    def grade_like_a_worker():
        for _ in range(8):
            for _ in range(50):
                _CycleWithFinaliser()
            try:
                assert parses(CODE) and loophole_code(CODE) == levers_pulled(CODE) == ()
            except Exception as e:  # noqa: BLE001 - the test reports whatever a thread raised
                errors.append(repr(e))
                return

    threads = [threading.Thread(target=grade_like_a_worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
