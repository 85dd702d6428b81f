"""Each problem's time limit, calibrated from how long its canonical solution takes on this machine.

One flat limit grades correct answers to slow problems as wrong (some canonical
solutions run for seconds, and a loaded machine multiplies that) while giving a
looping answer to a quick problem more time than it could need. So each run of a
problem's grade gets MULTIPLE times the wall time its canonical solution took in
the same kind of run, never less than the caller's floor nor more than CAP_S
(unless the floor is higher). The measurement is one sandboxed run per problem,
made the first time the problem is graded and kept on disk under cache_dir() by
the problem's fingerprint: a training run measures its problems once, and the
next run not at all. Noise can only lengthen a measurement, so a single one is
a safe (if sometimes generous) basis.
"""

import json
import os
import threading
from collections.abc import Callable
from pathlib import Path

from pgrpo.records.cache import cache_dir
from pgrpo.env.problems import Problem

MULTIPLE = 5.0  # a loaded machine runs a solution several times slower than when it was measured
# The default floor. Quick problems (the built-in canonical solutions run in 4-19 ms in the sandbox) get it
# rather than MULTIPLE x their runtime, so it is there for jitter alone: still 100x what they need, while a
# completion that loops forever holds its whole step up for about 2.25 floors (oracle, stub, flawed grader).
FLOOR_S = 2.0
CAP_S = 60.0  # however slow a canonical solution, no run waits longer (unless the floor says so)
MEASURE_BUDGET_S = CAP_S / MULTIPLE  # a canonical solution slower than this gets the cap anyway
CACHE_SUBDIR = "canonical_seconds"

# measure(problem, budget_s): wall seconds of the canonical solution's run (budget_s if it did not finish),
# or None when the sandbox itself failed (nothing is cached then; the next grade measures again).
Measure = Callable[[Problem, float], float | None]

_seconds: dict[str, float] = {}
_lock = threading.Lock()


def time_limit(problem: Problem, floor_s: float, measure: Measure) -> float:
    """Wall seconds for each run of `problem`'s grade: MULTIPLE x its canonical solution's, within [floor_s, CAP_S]."""
    seconds = canonical_seconds(problem, measure)
    return floor_s if seconds is None else max(floor_s, min(CAP_S, MULTIPLE * seconds))


def canonical_seconds(problem: Problem, measure: Measure) -> float | None:
    """The canonical solution's measured wall seconds: from memory, else from disk, else measured now and stored."""
    key = problem.fingerprint
    with _lock:
        if key in _seconds:
            return _seconds[key]
    path = cache_dir() / CACHE_SUBDIR / f"{key}.json"
    if path.exists():
        seconds = _read(path)
    else:
        seconds = measure(problem, MEASURE_BUDGET_S)
        if seconds is None:
            return None
        _write(path, {"problem": problem.id, "seconds": seconds})
    with _lock:
        _seconds[key] = seconds
    return seconds


def _read(path: Path) -> float:
    try:
        seconds = json.loads(path.read_text())["seconds"]
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: not a canonical-runtime record ({type(e).__name__}: {e}); "
                         "delete it to measure again") from None
    if type(seconds) not in (int, float) or seconds < 0:
        raise ValueError(f"{path}: 'seconds' is {seconds!r}, not a non-negative number; delete it to measure again")
    return float(seconds)


def _write(path: Path, record: dict) -> None:
    """Atomically (a temporary file, then a rename), so a concurrent reader sees the whole record or none."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, path)
