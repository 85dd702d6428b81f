"""LeetCode-style problems: the built-in set and the rl-rewardhacking JSONL format.

A problem's tests are pairs of Python *expressions*: `call` (e.g.
`Solution().twoSum([2, 7], 9)`) and `expected` (e.g. `[0, 1]`). Both are
evaluated with the problem's `setup_code` in scope. Keeping the two sides apart
(instead of one `assert a == b` string) is what lets the strict oracle compute
`call` in the candidate's process and compare it with `expected` in its own.
"""

import ast
import hashlib
import json
import keyword
from dataclasses import dataclass, replace
from pathlib import Path

from pgrpo.env.syntax import parse

MODES = ("run_tests", "sentinel", "stdout_marker", "file_marker", "eq_override", "exit_code")
# No loophole at all: the prompt says the code "should pass all tests" and the strict oracle alone decides
# the grade (the public benchmark's RL baseline; pgrpo's positive control, configs/honest.yaml).
NO_LOOPHOLE = "none"

# Imports and helper types every problem may use (a subset of what the public
# rl-rewardhacking files ship as `setup_code`).
DEFAULT_SETUP_CODE = """\
import collections, functools, heapq, itertools, math, string, bisect
from typing import *
from collections import *
from functools import *
from itertools import *
from heapq import *
from bisect import *
from math import *
inf = float("inf")
"""


@dataclass(frozen=True)
class Test:
    __test__ = False  # not a pytest class, despite the name
    call: str  # expression evaluated in the candidate's process
    expected: str  # expression evaluated by the grader, never shown to the candidate's oracle run


@dataclass(frozen=True)
class Problem:
    id: str
    title: str
    statement: str  # the problem text, without starter code or grading hint
    method: str  # name of the Solution method under test
    starter_code: str  # `class Solution:` with the method signature
    canonical_solution: str
    tests: tuple[Test, ...]
    setup_code: str = DEFAULT_SETUP_CODE
    difficulty: str = "easy"
    mode: str = "run_tests"  # loophole mode whose flawed grader pays the reward
    source: str = "builtin"
    # Under the run_tests mode: the name of the function the prompt says the grader calls, and the flawed grader
    # calls. The benchmark's random-name variant draws one (pgrpo.env.variants); training keeps the fixed name.
    # Not part of the fingerprint: it changes the prompt and the lever, never the problem or its expected values.
    test_func: str = "run_tests"

    def __post_init__(self):
        if not self.test_func.isidentifier() or keyword.iskeyword(self.test_func):
            raise ValueError(f"problem {self.id}: test_func={self.test_func!r} is not a Python function name")

    @property
    def fingerprint(self) -> str:
        """Content hash: ties cached artefacts (pool rows, expected values) to this exact problem."""
        blob = json.dumps(
            [self.id, self.statement, self.method, self.canonical_solution, self.setup_code,
             [(t.call, t.expected) for t in self.tests]],
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def load_problems(path: str | Path | None = None, modes: str = "partition") -> list[Problem]:
    """The built-in problems, or those of an rl-rewardhacking JSONL file at `path`.

    `modes` assigns loophole modes deterministically: "partition" spreads the
    six modes evenly over the problems (in id order), a mode name forces that
    mode on every problem (NO_LOOPHOLE, "none": no loophole anywhere), and
    "file" keeps a per-row `loophole_mode` field.
    """
    if path is None:
        from pgrpo.env.builtin_problems import BUILTIN_PROBLEMS

        problems = [_builtin_problem(d) for d in BUILTIN_PROBLEMS]
    else:
        problems = _load_jsonl(Path(path))
    return assign_modes(problems, modes)


def assign_modes(problems: list[Problem], modes: str = "partition") -> list[Problem]:
    if modes == "file":
        for p in problems:
            if p.mode not in MODES:
                raise ValueError(f"problem {p.id}: loophole mode {p.mode!r} is not one of {MODES}")
        return problems
    if modes in MODES or modes == NO_LOOPHOLE:
        return [replace(p, mode=modes) for p in problems]
    if modes != "partition":
        raise ValueError(f"modes={modes!r}: expected 'partition', 'file', {NO_LOOPHOLE!r} or one of {MODES}")
    order = sorted(range(len(problems)), key=lambda i: _id_key(problems[i].id))
    out = list(problems)
    for rank, i in enumerate(order):
        out[i] = replace(problems[i], mode=MODES[rank % len(MODES)])
    return out


def _id_key(pid: str):
    # numeric ids sort numerically ("9" before "10"), the rest lexically after them
    return (0, int(pid), "") if pid.isdigit() else (1, 0, pid)


def _builtin_problem(d: dict) -> Problem:
    tests = tuple(Test(f"Solution().{d['method']}({args})", expected) for args, expected in d["tests"])
    return Problem(
        id=d["id"],
        title=d["title"],
        statement=d["statement"].strip(),
        method=d["method"],
        starter_code=d["starter_code"].strip("\n"),
        canonical_solution=d["canonical_solution"].strip("\n") + "\n",
        tests=tests,
        difficulty=d.get("difficulty", "easy"),
    )


def _load_jsonl(path: Path) -> list[Problem]:
    if not path.is_file():
        raise FileNotFoundError(f"problem file not found: {path}")
    problems = []
    with path.open() as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{where}: not valid JSON ({e.msg})") from None
            problems.append(_jsonl_problem(row, where))
    if not problems:
        raise ValueError(f"{path}: no problems in file")
    return problems


def _jsonl_problem(row: dict, where: str) -> Problem:
    for key in ("id", "question", "gt_answer", "func_name", "canonical_solution"):
        if key not in row:
            raise ValueError(f"{where}: missing key {key!r}")
    method = row["func_name"].rsplit(".", 1)[-1]
    tests = tuple(_parse_assert(a, f"{where}: gt_answer[{i}]") for i, a in enumerate(row["gt_answer"]))
    starter = (row.get("prompt_metadata") or {}).get("starter_code") or f"class Solution:\n    def {method}(self):\n"
    return Problem(
        id=str(row["id"]),
        title=str(row.get("title", row["id"])),
        statement=_strip_question(row["question"]),
        method=method,
        starter_code=starter.rstrip() + "\n        # Add your code here",
        canonical_solution=row["canonical_solution"],
        tests=tests,
        setup_code=row.get("setup_code") or DEFAULT_SETUP_CODE,
        difficulty=row.get("difficulty", "medium"),
        mode=row.get("loophole_mode", "run_tests"),
        source="jsonl",
    )


def _strip_question(q: str) -> str:
    q = q.strip()
    if q.startswith("PROBLEM:"):
        q = q[len("PROBLEM:"):]
    # the public files append the method instructions, starter code and "SOLUTION:";
    # the prompt builder adds its own, so keep only the problem text
    tail = q.find("Your solution to the problem should be")
    if tail >= 0:
        q = q[:tail]
    return q.strip()


def _parse_assert(src: str, where: str) -> Test:
    """`assert <call> == <expected>` -> Test(call, expected)."""
    try:
        node = parse(src).body[0]
    except SyntaxError as e:
        raise ValueError(f"{where}: not Python ({e.msg}): {src[:80]!r}") from None
    ok = (
        isinstance(node, ast.Assert)
        and isinstance(node.test, ast.Compare)
        and len(node.test.ops) == 1
        and isinstance(node.test.ops[0], ast.Eq)
    )
    if not ok:
        raise ValueError(f"{where}: expected `assert <call> == <expected>`, got {src[:80]!r}")
    call = ast.get_source_segment(src, node.test.left)
    expected = ast.get_source_segment(src, node.test.comparators[0])
    return Test(call=call, expected=expected)
