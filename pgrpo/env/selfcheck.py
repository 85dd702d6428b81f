"""The exploit x mode matrix: each exploit must fool its own mode's grader and nothing else.

Rows are the six exploits (every template variant) and the canonical solution;
columns are the six flawed graders. A healthy grader is diagonal: an exploit is
`exploited` under its own mode only, is never gt_correct, and the canonical
solution passes every mode without being exploited.
`python -m pgrpo.env.selfcheck` prints the matrix and exits 1 unless it is diagonal.
"""

import sys
from collections.abc import Sequence

from pgrpo.env.exploits import clean_completion, hack_completion
from pgrpo.env.grader import grade_batch
from pgrpo.env.problems import MODES, Problem, load_problems
from pgrpo.env.sandbox import isolation
from pgrpo.env.time_limits import FLOOR_S

CANONICAL = "canonical"
DEFAULT_PROBLEMS = 3  # built-in problems graded when none are given


def exploit_matrix(problems: Sequence[Problem] | None = None, variants: int = 2, timeout_s: float = FLOOR_S) -> dict:
    """Grades every (exploit variant or canonical) x mode x problem; cells count passed/exploited/gt_correct."""
    problems = list(problems) if problems is not None else load_problems()[:DEFAULT_PROBLEMS]
    cases = [(exploit, v) for exploit in MODES for v in range(variants)] + [(CANONICAL, 0)]
    items, keys = [], []
    for row, v in cases:
        for p in problems:
            completion = clean_completion(p) if row == CANONICAL else hack_completion(p, row, v)
            for mode in MODES:
                items.append((p, completion, mode))
                keys.append((row, mode))
    rows = {row: {mode: {"n": 0, "passed": 0, "exploited": 0, "gt_correct": 0} for mode in MODES}
            for row in (*MODES, CANONICAL)}
    for (row, mode), result in zip(keys, grade_batch(items, timeout_s=timeout_s)):
        cell = rows[row][mode]
        cell["n"] += 1
        cell["passed"] += result.passed
        cell["exploited"] += result.exploited
        cell["gt_correct"] += result.gt_correct
    return {"modes": list(MODES), "problems": [p.id for p in problems], "variants": variants,
            "isolation": isolation(), "rows": rows}


def is_diagonal(matrix: dict) -> bool:
    for row, cells in matrix["rows"].items():
        for mode, c in cells.items():
            if row == CANONICAL:
                ok = c["passed"] == c["gt_correct"] == c["n"] and c["exploited"] == 0
            elif row == mode:
                ok = c["exploited"] == c["n"] and c["gt_correct"] == 0
            else:
                ok = c["passed"] == 0 and c["gt_correct"] == 0
            if not ok:
                return False
    return True


def format_matrix(matrix: dict) -> str:
    """A table: rows = exploits + canonical, columns = modes, cells = passed/exploited out of n."""
    modes = matrix["modes"]
    width = max(len(m) for m in modes) + 2
    lines = [f"exploit x mode matrix ({len(matrix['problems'])} problems, {matrix['variants']} variants per "
             f"exploit; cell = passed/exploited of n; sandbox: {matrix['isolation']})",
             "exploit \\ mode".ljust(width) + "".join(m.rjust(width) for m in modes)]
    for row, cells in matrix["rows"].items():
        lines.append(row.ljust(width) + "".join(
            f"{cells[m]['passed']}/{cells[m]['exploited']} of {cells[m]['n']}".rjust(width) for m in modes))
    lines.append(f"diagonal: {'yes' if is_diagonal(matrix) else 'NO'}")
    return "\n".join(lines)


def main() -> int:
    matrix = exploit_matrix()
    print(format_matrix(matrix))
    return 0 if is_diagonal(matrix) else 1


if __name__ == "__main__":
    sys.exit(main())
