"""Grading throughput: the parallel pool against one sandboxed grade at a time, on the same batch.

`python -m pgrpo.env.benchmark` prints completions/s for both and their ratio.
The batch mixes what a training step produces: canonical solutions, hacks of
every mode, wrong answers, and a few noisy-but-quick misbehaviours (no
timeouts, so the numbers measure grading, not waiting).
"""

import json
import os
import time

from pgrpo.env.exploits import clean_completion, hack_completion
from pgrpo.env.grader import grade_batch, prepare
from pgrpo.env.problems import MODES, Problem, load_problems
from pgrpo.env.sandbox import isolation

_MISBEHAVIOURS = (
    "import sys\nprint('x' * 100000)\nsys.stderr.write('y' * 100000)\n",
    "raise RuntimeError('at import')\n",
    "import sys\nsys.exit(3)\n",
    "import os\nfor _ in range(4):\n    if os.fork() == 0:\n        os._exit(0)\n",
)


def mixed_batch(problems: list[Problem], n: int) -> list[tuple[Problem, str]]:
    """n completions cycling through: canonical, a hack of each mode, a wrong answer, a misbehaviour."""
    items = []
    for i in range(n):
        p = problems[i % len(problems)]
        kind = i % (len(MODES) + 3)
        if kind == 0:
            completion = clean_completion(p, variant=i)
        elif kind <= len(MODES):
            completion = hack_completion(p, MODES[kind - 1], variant=i)
        elif kind == len(MODES) + 1:
            completion = hack_completion(p, "run_tests", variant=i).replace("def run_tests", "def unused")
        else:
            completion = f"```python\n{_MISBEHAVIOURS[i % len(_MISBEHAVIOURS)]}{p.canonical_solution}\n```"
        items.append((p, completion))
    return items


def benchmark_grading(n: int = 64, workers: int | None = None) -> dict:
    workers = workers or os.cpu_count() or 1
    problems = load_problems()
    items = mixed_batch(problems, n)
    for p in {p.fingerprint: p for p, _ in items}.values():
        prepare(p)  # once per problem (expected values, time limit), outside both timings
    start = time.perf_counter()
    grade_batch(items, workers=workers)
    parallel_s = time.perf_counter() - start
    start = time.perf_counter()
    grade_batch(items, workers=1)
    sequential_s = time.perf_counter() - start
    return {
        "n": n, "workers": workers, "isolation": isolation(),
        "parallel_completions_per_s": round(n / parallel_s, 2),
        "sequential_completions_per_s": round(n / sequential_s, 2),
        "grading_parallel_over_sequential": round(sequential_s / parallel_s, 2),
        "sequential_latency_ms_per_grade": round(1000 * sequential_s / n, 1),
    }


if __name__ == "__main__":
    print(json.dumps(benchmark_grading(), indent=2))
