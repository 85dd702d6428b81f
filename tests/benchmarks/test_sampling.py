"""`pgrpo bench-sampling`: both backends timed on one step's and one evaluation call's shapes, their samples graded.

Runs in the vLLM venv (`make test-vllm`, which .ci/run calls); the plain test command has no vLLM and skips it,
which is not a pass: under `make test-vllm` (PGRPO_REQUIRE_VLLM) a missing vLLM fails it.
"""

import json
import os

import pytest

if os.environ.get("PGRPO_REQUIRE_VLLM"):
    import vllm  # noqa: F401  (`make test-vllm`: a missing vLLM is a failure, not a skip)
else:
    pytest.importorskip("vllm", reason="vLLM is an optional extra: `make test-vllm` installs it and runs this test")

from benchmarks.sampling import RATES, sampling  # noqa: E402


def test_both_backends_are_timed_on_both_shapes_and_every_eval_sample_is_graded(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sampling(model="embedded", dtype="float32", max_new_tokens=8, step_prompts=1, step_students=2, eval_prompts=2,
             eval_samples=3, repeats=2, json=True)
    out = capsys.readouterr().out.strip().splitlines()
    table, figures = "\n".join(out[:-1]), json.loads(out[-1])
    for shape in ("step", "eval"):
        for backend in ("hf", "vllm"):
            assert figures[f"{shape}_{backend}_tokens_per_s"] > 0
        assert figures[f"{shape}_vllm_over_hf_tokens_per_s"] > 0
    for backend in ("hf", "vllm"):
        grades = figures["eval_grades"][backend]
        assert set(grades) == set(RATES)
        for successes, n, low, high in grades.values():
            assert n == 2 * 2 * 3  # every call's samples: 2 calls of 2 problems x 3 samples
            assert 0 <= low <= successes / n <= high <= 1
    assert "an eval call: 2 problems x 3 samples" in table and "| hack |" in table
