import json
import tomllib
from pathlib import Path

import pytest

from benchmarks.bench import TARGETS, bench, real_step_figures
from pgrpo.cli import main


def test_quick_bench_prints_every_figure_the_issue_names_and_a_json_line(capsys: pytest.CaptureFixture, tmp_path,
                                                                         monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    bench(quick=True, larger=False, json=True)
    out = capsys.readouterr().out.strip().splitlines()
    table, figures = "\n".join(out[:-1]), json.loads(out[-1])
    for key in (*TARGETS, "grading_parallel_over_sequential", "adapter_memory_over_base_weights"):
        assert figures[key] > 0, key
        assert key in table, key
    # each fast path computes what its plain version does
    assert figures["split_sum_vs_plain_grad_max_rel_diff"] < 1e-4
    assert figures["extraction_batched_vs_loop_max_rel_diff"] < 1e-3
    # every arm's step was broken down into its phases, the projection measured where it runs
    for arm in ("vanilla", "erase", "route", "naive", "unshared"):
        assert figures["phases"][arm]["step"] > 0
    assert figures["phases"]["erase"]["project"] > 0
    # U and Vh of a square Linear at full rank take twice its weight; truncating to r keeps 2r/d of it
    assert figures["qwen3_4b_adapter_memory_over_base_weights_max_rank_64"] < figures[
        "qwen3_4b_adapter_memory_over_base_weights"]


@pytest.mark.slow  # a real step's batch: ~900-token rows, eight backward passes (about 3 minutes on 2 cores)
def test_the_real_data_step_is_timed_against_the_bare_model_on_the_same_batch_and_folding_keeps_the_gradient(
        leetcode_jsonl, tmp_path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    figures = real_step_figures("embedded", str(leetcode_jsonl), repeats=1, max_new_tokens=8)
    assert figures["real_step_batch"]["tokens_per_row"] > 500  # the real problems' prompts, not the built-in ones
    for key in ("real_step_backward_over_bare_fwd_bwd", "real_step_unfolded_backward_over_bare_fwd_bwd"):
        assert figures[key] > 0
    assert figures["real_step_folded_vs_unfolded_grad_max_rel_diff"] < 1e-4


def test_pgrpo_bench_runs_the_harness_of_the_clone_which_the_package_does_not_ship(capsys):
    with pytest.raises(SystemExit) as done:
        main(["bench", "--help"])
    assert done.value.code == 0 and "--quick" in capsys.readouterr().out
    packaged = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    assert packaged["tool"]["setuptools"]["packages"]["find"]["include"] == ["pgrpo*"]
