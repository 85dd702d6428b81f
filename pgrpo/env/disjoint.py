"""Near-copies between two problem sets: one problem's canonical solution that passes another's tests.

Titles, method names and statements can all differ while the answer is the same (the priming family "Total of
the 1 Largest" is `max(nums)`, as is the RL problem "Largest Value"), so a string comparison cannot tell; running
the code can. Each source problem's canonical solution is graded against each target problem's tests by the
project's own sandboxed grader (the strict oracle alone: no loophole, no detectors), and a pass is a near-copy.

The two methods have different names, and a target's tests call its own (`Solution().maxValue(...)`), so the
source's Solution gets the target's name as an alias (`Solution.maxValue = Solution.topTotalOne`) rather than a
renamed method: the source's code, its self-calls (a recursive `self.factorial(n - 1)`) and helpers included,
runs unchanged. A pair whose test calls pass another number of arguments than the source's method takes is not
graded: every call would raise TypeError, so it cannot pass (about half the pairs; the rest are graded).
"""

import ast
from collections.abc import Sequence
from dataclasses import dataclass

from pgrpo.env.exploits import completion
from pgrpo.env.grader import grade_batch
from pgrpo.env.problems import NO_LOOPHOLE, Problem
from pgrpo.env.syntax import parse


@dataclass(frozen=True)
class NearCopy:
    source: Problem  # whose canonical solution passed
    target: Problem  # whose tests it passed

    def __str__(self) -> str:
        return (f"{self.source.id} {self.source.title!r} ({self.source.method}) passes the tests of "
                f"{self.target.id} {self.target.title!r} ({self.target.method})")


def aliased(code: str, own: str, target: str) -> str:
    """`code` (a Solution with method `own`) answering to `target` as well."""
    return code if own == target else f"{code.rstrip()}\n\n\nSolution.{target} = Solution.{own}\n"


def near_copies(sources: Sequence[Problem], targets: Sequence[Problem], *,
                workers: int | None = None) -> list[NearCopy]:
    """Every (source, target) whose source canonical solution passes all of target's tests (one direction)."""
    pairs = candidate_pairs(sources, targets)
    items = [(t, completion(aliased(s.canonical_solution, s.method, t.method)), NO_LOOPHOLE) for s, t in pairs]
    graded = grade_batch(items, workers=workers, detectors=False)
    return [NearCopy(s, t) for (s, t), g in zip(pairs, graded) if g.gt_correct]


def cross_check(a: Sequence[Problem], b: Sequence[Problem], *, workers: int | None = None) -> list[NearCopy]:
    """Near-copies in both directions: a's solutions against b's tests, then b's against a's."""
    return near_copies(a, b, workers=workers) + near_copies(b, a, workers=workers)


def candidate_pairs(sources: Sequence[Problem], targets: Sequence[Problem]) -> list[tuple[Problem, Problem]]:
    """The (source, target) pairs `near_copies` grades: two problems, the tests calling with as many arguments as
    the source's method takes (the rest cannot pass)."""
    return [(s, t) for s in sources for t in targets if s.id != t.id and _may_pass(s, t)]


def _may_pass(source: Problem, target: Problem) -> bool:
    takes = _arity(source)
    return takes is None or any(_call_arity(t.call) in (takes, None) for t in target.tests)


def _arity(problem: Problem) -> int | None:
    """Positional parameters of the canonical method after self; None where defaults or *args make it loose."""
    for node in ast.walk(parse(problem.canonical_solution)):
        if isinstance(node, ast.FunctionDef) and node.name == problem.method:
            a = node.args
            if a.vararg or a.defaults or a.posonlyargs or a.kwonlyargs:
                return None
            return len(a.args) - 1
    return None


def _call_arity(call: str) -> int | None:
    """Positional arguments of a test's call; None where keywords or unpacking make it loose."""
    node = parse(call).body[0]
    if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)):
        return None
    c = node.value
    if c.keywords or any(isinstance(x, ast.Starred) for x in c.args):
        return None
    return len(c.args)
