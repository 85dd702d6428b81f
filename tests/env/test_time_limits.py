"""Time limits: each problem's runs get a budget calibrated from its canonical solution, and each run its own."""

import json
import os
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import replace

import pytest

from pgrpo.records.cache import cache_dir
from pgrpo.env import clean_completion, grade, grade_batch, load_problems, time_limits
from pgrpo.env.exploits import completion
from pgrpo.env.grader import prepare, run_budgets
from pgrpo.env.problems import Problem, Test

TIGHT_FLOOR_S = 0.3  # far less than the slow canonical solution below needs


def napping_solution(seconds: float) -> str:
    return f"import time\n\n\nclass Solution:\n    def nap(self, x: int) -> int:\n        time.sleep({seconds})\n" \
           "        return x\n"


SLOW = Problem(id="slow_nap", title="Slow nap", statement="Return x, after a nap.", method="nap",
               starter_code="class Solution:\n    def nap(self, x: int) -> int:\n        # Add your code here",
               canonical_solution=napping_solution(0.5), tests=(Test("Solution().nap(7)", "7"),))


def fake_measure(seconds: float | None, calls: list):
    def measure(problem: Problem, budget_s: float) -> float | None:
        calls.append(problem.id)
        return seconds
    return measure


def test_a_slow_canonical_solution_gets_a_calibrated_limit_and_passes_under_a_tight_floor():
    result = grade(SLOW, clean_completion(SLOW), timeout_s=TIGHT_FLOOR_S)
    assert result.gt_correct and result.passed and not result.timed_out, result.error
    assert run_budgets(SLOW, TIGHT_FLOOR_S)["oracle"] >= time_limits.MULTIPLE * 0.5


def test_the_oracle_and_the_flawed_grader_each_get_their_own_budget():
    limit = run_budgets(SLOW, TIGHT_FLOOR_S)["oracle"]
    assert run_budgets(SLOW, TIGHT_FLOOR_S)["flawed"] == limit
    # each run fits in the limit, both together do not: a share of one budget would time the second out
    slow_but_correct = completion(napping_solution(0.6 * limit))
    result = grade(SLOW, slow_but_correct, "sentinel", timeout_s=TIGHT_FLOOR_S)
    assert result.gt_correct and result.passed and not result.timed_out, result.error


def test_the_runtime_is_measured_once_and_kept_on_disk_by_fingerprint(monkeypatch):
    from pgrpo.env import grader

    problem = replace(SLOW, id="slow_nap_cached")
    prepare(problem)
    record = json.loads((cache_dir() / time_limits.CACHE_SUBDIR / f"{problem.fingerprint}.json").read_text())
    assert record["problem"] == problem.id and record["seconds"] >= 0.5
    limit = run_budgets(problem, TIGHT_FLOOR_S)["oracle"]
    monkeypatch.setattr(time_limits, "_seconds", {})  # a new process: only the disk remembers
    monkeypatch.setattr(grader, "run_job", lambda *a, **k: pytest.fail("measured again"))
    assert run_budgets(problem, TIGHT_FLOOR_S)["oracle"] == limit


def test_the_floor_and_the_cap_bound_the_limit():
    quick, slow, calls = replace(SLOW, id="bound_quick"), replace(SLOW, id="bound_slow"), []
    assert time_limits.time_limit(quick, 4.0, fake_measure(0.01, calls)) == 4.0
    assert time_limits.time_limit(slow, 4.0, fake_measure(1000.0, calls)) == time_limits.CAP_S
    assert time_limits.time_limit(slow, 2 * time_limits.CAP_S, fake_measure(1000.0, calls)) == 2 * time_limits.CAP_S
    assert calls == ["bound_quick", "bound_slow"]  # the third call found the second's measurement


def test_a_failed_measurement_grades_with_the_floor_and_is_tried_again():
    problem, calls = replace(SLOW, id="unmeasurable"), []
    assert time_limits.time_limit(problem, 4.0, fake_measure(None, calls)) == 4.0
    assert not (cache_dir() / time_limits.CACHE_SUBDIR / f"{problem.fingerprint}.json").exists()
    assert time_limits.time_limit(problem, 4.0, fake_measure(2.0, calls)) == 10.0
    assert calls == ["unmeasurable", "unmeasurable"]


def test_a_canonical_solution_that_crashes_is_not_kept_as_its_runtime():
    from pgrpo.env.grader import _time_canonical

    crashing = replace(SLOW, id="crashing_canonical", canonical_solution="import os\nos._exit(3)\n")
    assert _time_canonical(crashing, 5.0) is None  # a quick crash is no runtime: the floor until measured again
    assert _time_canonical(SLOW, 5.0) >= 0.5


def test_a_corrupt_record_is_an_error_naming_its_file():
    problem = replace(SLOW, id="corrupt_record")
    path = cache_dir() / time_limits.CACHE_SUBDIR / f"{problem.fingerprint}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"seconds": "soon"}')
    with pytest.raises(ValueError, match=problem.fingerprint):
        time_limits.time_limit(problem, 4.0, fake_measure(1.0, []))


@contextmanager
def every_core_busy():
    """One busy loop per core, as when other work shares the machine."""
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        yield
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


@pytest.mark.slow
@pytest.mark.parametrize("source", ["builtin", "leetcode_dev"])
def test_every_canonical_solution_is_gt_correct_at_default_settings_on_a_busy_machine(source, request):
    problems = load_problems(None if source == "builtin" else request.getfixturevalue("leetcode_jsonl"))
    for problem in problems:  # measured one at a time on an idle machine: the tightest limits they can get
        prepare(problem)
    with every_core_busy():
        results = grade_batch([(p, clean_completion(p)) for p in problems])
    assert [(p.id, r.error) for p, r in zip(problems, results) if not (r.gt_correct and r.passed)] == []
