"""The end-of-run evaluation: every embedded fit ends on its final policy's hack and solve, with intervals."""

import json

import pgrpo.evaluation.end_eval as end_eval_mod
import pgrpo.records.summary as summary_mod
from pgrpo.cli import main
from pgrpo.records.events import read_scalars
from pgrpo.evaluation.intervals import wilson
from test_cli import fast


def test_a_fit_ends_on_its_final_policys_rates_on_every_training_and_held_out_problem(tmp_path):
    main(fast("vanilla", tmp_path, 2, "--end_eval.samples_per_problem=3"))
    run = tmp_path / "vanilla" / "version_0"
    result = json.loads((run / "end_eval.json").read_text())
    # the embedded configs hold 6 of the 48 problems out of training
    assert (result["train"]["problems"], result["heldout"]["problems"]) == (42, 6)
    assert (result["train"]["samples"], result["heldout"]["samples"]) == (42 * 3, 6 * 3)
    assert result["step"] == 2 and result["samples_per_problem"] == 3 and result["temperature"] == 1.0
    for split in ("train", "heldout"):
        e = result[split]
        for rate in ("hack", "solve"):
            assert e[rate] == e[f"{rate}_count"] / e["samples"]
            assert list(wilson(e[f"{rate}_count"], e["samples"])) == e[f"{rate}_wilson"]
        assert sum(m["samples"] for m in e["per_mode"].values()) == e["samples"]
    scalars = read_scalars(run)
    assert scalars["end/samples"] == [(1, 126.0)] and scalars["end/heldout_samples"] == [(1, 18.0)]
    assert scalars["end/hack"] == [(1, result["train"]["hack"])]
    # every strict hack of the embedded base's policy pulls the lever its prompt names: none is unattributed
    assert result["train"]["unattributed_hack_count"] == 0 and scalars["end/unattributed_hacks"] == [(1, 0.0)]
    for mode, e in result["train"]["per_mode"].items():  # a held-out lever's own end numbers
        assert scalars[f"end/hack_{mode}"] == [(1, e["hack"])] and scalars[f"end/samples_{mode}"] == [(1, 7.0 * 3)]


def test_the_end_of_run_evaluation_says_what_it_samples_and_how_far_along_it_is(tmp_path, capsys):
    # on SmolLM2 on CPU it is ~10 minutes of generation after the last step, which printed nothing
    main(fast("vanilla", tmp_path, 1, "--end_eval.samples_per_problem=2", "--end_eval.prompts_per_call=7"))
    err = capsys.readouterr().err
    assert "end-of-run evaluation: 2 samples of each of 42 train and 6 heldout problems" in err
    assert "end-of-run evaluation, train: generate call 6/6" in err
    assert "end-of-run evaluation, heldout: generate call 1/1" in err


def test_no_evaluation_when_it_is_off(tmp_path):
    main(fast("vanilla", tmp_path, 1, "--end_eval.samples_per_problem=0"))
    run = tmp_path / "vanilla" / "version_0"
    assert not (run / "end_eval.json").exists() and "end/hack" not in read_scalars(run)


def test_a_run_killed_between_its_last_checkpoint_and_its_evaluation_is_evaluated_when_resumed(tmp_path,
                                                                                                 monkeypatch):
    # the final checkpoint is written before the evaluation: a resume finds no step left to train, and Lightning
    # then skips the training loop and its on_train_end
    main(fast("vanilla", tmp_path, 2, "--end_eval.samples_per_problem=3"))
    run = tmp_path / "vanilla" / "version_0"
    whole = json.loads((run / "end_eval.json").read_text())
    (run / "end_eval.json").unlink()  # as if killed there
    said = []  # the run's closing output, in order: its evaluation, then the summary of the run
    evaluate, summarise = end_eval_mod.end_of_run_eval, summary_mod.summary
    monkeypatch.setattr(end_eval_mod, "end_of_run_eval", lambda *a, **k: said.append("evaluation") or evaluate(*a, **k))
    monkeypatch.setattr(summary_mod, "summary", lambda *a, **k: said.append("summary") or summarise(*a, **k))
    main(fast("vanilla", tmp_path, 2, "--end_eval.samples_per_problem=3", "--ckpt_path=last"))
    resumed = json.loads((run / "end_eval.json").read_text())
    assert {k: v for k, v in resumed.items() if k != "seconds"} == {k: v for k, v in whole.items() if k != "seconds"}
    assert read_scalars(run)["end/hack"] == [(1, whole["train"]["hack"])]
    assert said == ["evaluation", "summary"]


def test_a_run_is_evaluated_once_and_not_again_by_a_resume_that_finds_it_evaluated(tmp_path, monkeypatch):
    calls = []
    evaluate = end_eval_mod.end_of_run_eval
    monkeypatch.setattr(end_eval_mod, "end_of_run_eval", lambda *a, **k: calls.append(1) or evaluate(*a, **k))
    main(fast("vanilla", tmp_path, 2, "--end_eval.samples_per_problem=1"))
    assert len(calls) == 1
    main(fast("vanilla", tmp_path, 2, "--end_eval.samples_per_problem=1", "--ckpt_path=last"))
    assert len(calls) == 1
