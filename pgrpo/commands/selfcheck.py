"""`pgrpo selfcheck`: every exploit against every loophole mode and the strict oracle; fails unless diagonal."""

import sys

from pgrpo.env import load_problems
from pgrpo.env.selfcheck import exploit_matrix, format_matrix, is_diagonal


def selfcheck(problems: str | None = None) -> None:
    """Print the exploit x loophole-mode matrix and exit non-zero unless it is diagonal.

    Args:
        problems: an rl-rewardhacking JSONL file (default: the built-in problems).
    """

    matrix = exploit_matrix(load_problems(problems) if problems else None)
    print(format_matrix(matrix))
    if not is_diagonal(matrix):
        sys.exit("selfcheck FAILED: an exploit fooled a mode other than its own, or the oracle")
