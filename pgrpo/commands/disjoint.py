"""`pgrpo disjoint`: the priming problems' near-copies of RL problems, and back; fails if there is one."""

import sys
import time

from pgrpo.env import load_problems
from pgrpo.env.disjoint import candidate_pairs, cross_check
from pgrpo.env.heldout_problems import heldout_problems
from pgrpo.env.primer_problems import primer_problems


def disjoint(seed: int = 0, primer_disjoint: bool = False, workers: int | None = None) -> None:
    """Print every near-copy between the priming and the RL problems; exit non-zero if there is one.

    A near-copy is a problem whose canonical solution passes another set's problem's tests, graded by the sandboxed
    grader both ways: the priming problems against the RL problems (the 48 built-in and the 24 extra held-out ones),
    and the extra held-out problems against the built-in ones. A few minutes on 2 cores (about 15,500 grades).

    Args:
        seed: the priming problems' seed (their tests are drawn from it, as `pgrpo prime --seed` draws them).
        primer_disjoint: check the priming problems with their near-copies replaced (`primer_problems(seed,
            disjoint=True)`, the selection of a primed base v2) instead of the problems as the primed base v1 has them.
        workers: grading threads (default: twice the cores).
    """
    primer, builtin, extra = primer_problems(seed, disjoint=primer_disjoint), load_problems(), heldout_problems()
    rl = builtin + extra
    start = time.perf_counter()
    found = []
    for name, a, b in ((f"priming (seed {seed}{', disjoint' if primer_disjoint else ''}) x RL", primer, rl),
                       ("extra held-out x built-in", extra, builtin)):
        pairs = cross_check(a, b, workers=workers)
        graded = len(candidate_pairs(a, b)) + len(candidate_pairs(b, a))
        print(f"{name}: {len(a)} x {len(b)} problems, {graded} pairs graded both ways, {len(pairs)} near-copies")
        for pair in pairs:
            print(f"  {pair}")
        found += pairs
    print(f"{len(found)} near-copies ({time.perf_counter() - start:.0f} s)")
    if found:
        sys.exit("disjoint FAILED: a problem's canonical solution passes another set's problem's tests")
