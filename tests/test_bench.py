import json

import pytest

from pgrpo.bench import PHASES, bench


def test_bench_times_every_phase_of_both_arms_and_prints_their_ratio(capsys: pytest.CaptureFixture,
                                                                      tmp_path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    bench(steps=2, rounds=1, max_new_tokens=4, json=True)
    out = capsys.readouterr().out.strip().splitlines()
    table, figures = out[:-1], json.loads(out[-1])
    assert figures["steps_timed"] == 1  # one fit per arm, its first step not timed
    for phase in (*PHASES, "train", "step"):
        assert any(line.startswith(phase) for line in table), phase
        assert figures["seconds"]["vanilla"][phase] >= 0 and figures["seconds"]["erase"][phase] >= 0
    assert figures["seconds"]["erase"]["project"] > 0  # erase projects; the figure is measured, not assumed
    step = figures["seconds"]
    assert figures["erase_over_vanilla_step"] == pytest.approx(step["erase"]["step"] / step["vanilla"]["step"])
    # the phases are parts of the step
    assert sum(step["vanilla"][p] for p in PHASES) <= step["vanilla"]["step"]


def test_bench_refuses_a_single_step():
    with pytest.raises(ValueError, match="steps=1"):
        bench(steps=1)
