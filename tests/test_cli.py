"""The README's commands: `pgrpo fit --config configs/<arm>.yaml` with overrides, resume, errors."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from pgrpo.hosts.lightning.callbacks import StepCheckpoint
from pgrpo.cli import bare_flags_to_true, main
from pgrpo.commands.sweep import config_of
from pgrpo.records.events import read_scalars

REPO = Path(__file__).resolve().parents[1]
REQUIRED_TAGS = [
    "hack/student", "hack/teacher", "solve/student", "solve/teacher", "reward", "reward_std",
    "frac_reward_zero_std", "completions/mean_length", "completions/clipped_ratio", "kl", "loss", "grad_norm",
    "lr", "hackward_share/student", "hackward_share/teacher", "hackward_share/gradient",
    "hackward_share/edited_gradient", "basis/axes_pushed_hackward",
    "adapter/delta_s_norm", "adapter/delta_s_hack_norm", "adapter/delta_s_along_v", "adapter/delta_s_along_v_share",
    "adapter/delta_s_hack_along_v",
]


def fast(arm: str, logs: Path, steps: int = 4, *extra: str) -> list[str]:
    """A CI-sized run of a shipped config, named as a sweep names it (random_v: configs/placebos/random_v.yaml):
    same code path, fewer and shorter rollouts."""
    return [
        "fit", "--config", str(config_of(arm, arm, REPO / "configs")),
        f"--trainer.max_steps={steps}", "--checkpoint.every_n_train_steps=2",
        f"--trainer.logger.init_args.save_dir={logs}", "--trainer.enable_progress_bar=false",
        "--model.generation.max_new_tokens=24", "--data.group_size=4", "--data.prompts_per_step=2",
        "--end_eval.samples_per_problem=1", *extra,
    ]


def test_the_second_moment_setting_leaves_an_arm_that_never_projects_the_gradient_bit_identical(tmp_path):
    # adv_gate edits advantages, not the gradient: whatever Adam's second moment is told to see, it trains alike
    knobs = {}
    for moment in ("projected", "max"):
        main(fast("adv_gate", tmp_path / moment, 2, f"--model.optim.second_moment={moment}"))
        knobs[moment] = torch.load(tmp_path / moment / "adv_gate" / "version_0" / "checkpoints" / "last.ckpt")
    for key, value in knobs["projected"]["state_dict"].items():
        assert torch.equal(value, knobs["max"]["state_dict"][key]), key


def test_route_trains_on_vanillas_path_and_differs_only_as_deployed(tmp_path):
    # the training forward sees δS + δS_hack: under route it must move exactly as vanilla's δS (same seed, same
    # split), so that deploying without δS_hack is the only difference between the two arms
    main(fast("vanilla", tmp_path / "v", 3, "--data.n_eval_prompts=6"))
    main(fast("route", tmp_path / "r", 3))
    knobs = {arm: torch.load(tmp_path / d / arm / "version_0" / "checkpoints" / "last.ckpt")["state_dict"]
             for arm, d in (("vanilla", "v"), ("route", "r"))}
    trained = {k: v for k, v in knobs["route"].items() if k.endswith(".delta_s")}
    parked = sum(float(knobs["route"][k + "_hack"].norm()) for k in trained)
    assert parked > 0
    for key, value in trained.items():
        torch.testing.assert_close(value + knobs["route"][key + "_hack"], knobs["vanilla"][key], atol=1e-5, rtol=0)


@pytest.mark.parametrize("arm", ["vanilla", "erase", "route"])
def test_each_arm_config_fits_logs_metrics_and_checkpoints_every_n_steps(arm, tmp_path, capsys):
    main(fast(arm, tmp_path))
    run = tmp_path / arm / "version_0"
    ckpts = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert ckpts == ["epoch=0-step=2.ckpt", "epoch=0-step=4.ckpt", "last.ckpt"]
    scalars = read_scalars(run)
    missing = [t for t in REQUIRED_TAGS if t not in scalars]
    assert not missing, missing
    assert len(scalars["hack/student"]) == 4
    assert any(t.startswith("hack/student_") for t in scalars)
    quarantine = scalars["adapter/delta_s_hack_norm"][-1][1]
    assert (quarantine > 0) == (arm == "route")
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)
    assert all(k.endswith((".delta_s", ".delta_s_hack")) for k in ckpt["state_dict"])  # never the frozen base
    assert {"pgrpo_basis", "pgrpo_rng", "optimizer_states", "lr_schedulers"} <= set(ckpt)
    # the run ends on a summary of what its own events say, where they are, and what to run next
    out = capsys.readouterr().out
    summary = out[out.index("pgrpo: 4 steps of the"):]
    row = next(line for line in summary.splitlines() if line.strip().startswith("hack/student"))
    assert row.split()[1:] == [f"{sum(v for _, v in scalars['hack/student'][:4]) / 4:.3f}"] * 2  # 4 steps < window
    assert "hack/teacher" in summary and "solve/student" in summary and "(null " in summary
    assert f"events: {run}" in summary and f"tensorboard --logdir {tmp_path}" in summary
    # the arm to compare with: this run's own config with the other intervention
    assert f"--model.intervention pgrpo.interventions.{'Erase' if arm == 'vanilla' else 'Vanilla'}" in summary


@pytest.mark.parametrize("arm, own_tags", [("honest", []), ("honest_matched", ["hack/teacher"]),
                                           ("gt_screen", ["skyline/screened"]), ("gt_penalty", []),
                                           ("adv_gate", ["intervention/advantage_weight"])])
def test_each_baseline_arm_fits_and_logs_what_makes_it(arm, own_tags, tmp_path):
    main(fast(arm, tmp_path, 2))
    scalars = read_scalars(tmp_path / arm / "version_0")
    missing = [t for t in ["hack/student", "solve/student", *own_tags] if t not in scalars]
    assert not missing, missing
    # the positive control has no loophole: no mode's hack rate, and no teacher rows
    assert (arm == "honest") == ("hack/teacher" not in scalars and not any(t.startswith("hack/student_")
                                                                         for t in scalars))
    if arm == "honest_matched":  # teacher rows as the methods have them, none a hack, and still no loophole
        assert all(v == 0 for _, v in scalars["hack/teacher"])
        assert not any(t.startswith("hack/student_") for t in scalars)


def test_unknown_config_key_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(fast("erase", tmp_path, 2, "--model.intervention.init_args.gatee=no_gate"))
    assert "gatee" in capsys.readouterr().err


def test_bad_intervention_value_names_the_value(tmp_path):
    with pytest.raises((SystemExit, ValueError)) as err:
        main(fast("erase", tmp_path, 2, "--model.intervention.init_args.gate=delete"))
    assert "delete" in str(err.value) or err.type is SystemExit


def test_missing_model_path_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no/such/model"):
        main(fast("erase", tmp_path, 2, "--model.model=/no/such/model"))


def test_print_config_shows_the_arm(capsys):
    with pytest.raises(SystemExit):
        main(["fit", "--config", str(REPO / "configs" / "route.yaml"), "--print_config"])
    out = capsys.readouterr().out
    assert "class_path: pgrpo.interventions.Route" in out and "every_n_train_steps: 25" in out


def _pgrpo(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "pgrpo.cli", *args], cwd=REPO, env=os.environ.copy(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)


def test_sigkilled_run_resumes_from_last_checkpoint_and_matches_an_uninterrupted_run(tmp_path):
    steps = 7  # killed after step 4: Lightning takes the 3 steps left for an epoch that 4 does not divide
    whole = tmp_path / "whole"
    assert _pgrpo(fast("erase", whole, steps)).wait(timeout=300) == 0

    broken = tmp_path / "broken"
    proc = _pgrpo(fast("erase", broken, steps))
    ckpt_dir = broken / "erase" / "version_0" / "checkpoints"
    deadline = time.time() + 300
    while not (ckpt_dir / "epoch=0-step=4.ckpt").exists():
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        assert time.time() < deadline
        time.sleep(0.05)
    time.sleep(0.5)  # let the checkpoint finish writing
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()

    resumed = _pgrpo(fast("erase", broken, steps, "--ckpt_path=last"))
    assert resumed.wait(timeout=300) == 0, resumed.stderr.read().decode()[-2000:]
    # Lightning warns of "unreliable results" for a loader that cannot resume mid-epoch; ours starts at the step
    assert "not resumable" not in resumed.stderr.read().decode()
    a = torch.load(whole / "erase" / "version_0" / "checkpoints" / "last.ckpt", weights_only=False)
    b = torch.load(ckpt_dir / "last.ckpt", weights_only=False)
    assert a["global_step"] == b["global_step"] == steps
    for key, value in a["state_dict"].items():
        torch.testing.assert_close(b["state_dict"][key], value, rtol=0, atol=0)
    curve_a = read_scalars(whole / "erase" / "version_0")["hack/student"]
    curve_b = read_scalars(broken / "erase" / "version_0")["hack/student"]
    # the killed process may have logged a step the resumed one repeats; the later value wins
    assert dict(curve_a) == dict(curve_b)


def test_a_finished_run_lengthened_from_its_checkpoint_matches_the_longer_run(tmp_path):
    # what `pgrpo sweep` does when rerun with a larger --trainer.max_steps: nothing may depend on max_steps
    # but where the run stops
    main(fast("erase", tmp_path / "whole", 3))
    main(fast("erase", tmp_path / "short", 2))
    main(fast("erase", tmp_path / "short", 3, "--ckpt_path=last"))
    a = torch.load(tmp_path / "whole" / "erase" / "version_0" / "checkpoints" / "last.ckpt", weights_only=False)
    b = torch.load(tmp_path / "short" / "erase" / "version_0" / "checkpoints" / "last.ckpt", weights_only=False)
    assert a["global_step"] == b["global_step"] == 3
    assert not list((tmp_path / "short").rglob("last-v*.ckpt"))  # the resumed run overwrote its last.ckpt
    for key, value in a["state_dict"].items():
        torch.testing.assert_close(b["state_dict"][key], value, rtol=0, atol=0)
    assert dict(read_scalars(tmp_path / "whole" / "erase" / "version_0")["hack/student"]) == \
        dict(read_scalars(tmp_path / "short" / "erase" / "version_0")["hack/student"])


def test_a_checkpoint_written_by_lightnings_own_model_checkpoint_resumes_its_state():
    # runs checkpointed before StepCheckpoint existed: under another state key a resumed run would not know its
    # last.ckpt and would write last-v1.ckpt beside it (found lengthening the bench's 100-step runs)
    kwargs = {"every_n_train_steps": 25, "save_top_k": -1, "save_last": True}
    assert StepCheckpoint(**kwargs).state_key == ModelCheckpoint(**kwargs).state_key


def test_a_two_step_fit_prints_no_advert_and_no_future_warning(tmp_path):
    # a user's terminal, not pytest's: a fresh interpreter with Python's default warning filters
    run = subprocess.run([sys.executable, "-m", "pgrpo.cli", *fast("erase", tmp_path, 2)], cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    printed = run.stdout + run.stderr
    assert "litlogger" not in printed
    assert "Warning" not in printed and "deprecated" not in printed, printed[-2000:]


def test_a_bare_bool_flag_of_a_tool_means_true():
    def tool(json: bool = False, steps: int = 1) -> None: ...

    assert bare_flags_to_true(tool, ["--json"]) == ["--json", "true"]
    assert bare_flags_to_true(tool, ["--json", "--steps", "2"]) == ["--json", "true", "--steps", "2"]
    assert bare_flags_to_true(tool, ["--json", "false"]) == ["--json", "false"]
    assert bare_flags_to_true(tool, ["--steps", "2"]) == ["--steps", "2"]


def test_rollout_numbers_are_logged_once_per_generation_with_num_iterations(tmp_path):
    main(fast("vanilla", tmp_path, 4, "--model.num_iterations=2"))
    scalars = read_scalars(tmp_path / "vanilla" / "version_0")
    for tag in ("hack/student", "solve/student", "reward", "hack/teacher"):
        assert [step for step, _ in scalars[tag]] == [0, 2], tag  # generated at steps 0 and 2, reused at 1 and 3
    assert [step for step, _ in scalars["loss"]] == [0, 1, 2, 3]  # every optimizer step still logs its own


@pytest.mark.slow  # the SIGKILL resume test above covers resuming; this one the num_iterations corner
def test_a_resume_inside_a_num_iterations_cycle_reuses_the_batch_and_matches(tmp_path):
    cycle = ("--model.num_iterations=2", "--checkpoint.every_n_train_steps=1")

    def fit(*args: str) -> None:  # each run in a fresh process, as a real resume is
        proc = _pgrpo(list(args))
        assert proc.wait(timeout=300) == 0, proc.stderr.read().decode()[-2000:]

    fit(*fast("erase", tmp_path / "whole", 4, *cycle))
    fit(*fast("erase", tmp_path / "broken", 3, *cycle))  # stops after step 3, inside the second cycle
    ckpts = tmp_path / "broken" / "erase" / "version_0" / "checkpoints"
    assert "pgrpo_rollouts" in torch.load(ckpts / "last.ckpt", weights_only=False)
    fit(*fast("erase", tmp_path / "broken", 4, *cycle, "--ckpt_path=last"))
    a = torch.load(tmp_path / "whole" / "erase" / "version_0" / "checkpoints" / "last.ckpt", weights_only=False)
    b = torch.load(ckpts / "last.ckpt", weights_only=False)
    assert a["global_step"] == b["global_step"] == 4
    for key, value in a["state_dict"].items():
        torch.testing.assert_close(b["state_dict"][key], value, rtol=0, atol=0)


def test_fit_help_explains_each_field_of_the_nested_config_groups(capsys):
    with pytest.raises(SystemExit):
        main(["fit", "--help"])
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert "--model.intervention.help" in text and "pgrpo.interventions.Erase" in text  # each one's knobs: below
    for field_help in ("Hack axes kept per module",
                       "KL coefficient against the free reference", "Weight decay of δS_hack",
                       "what the second moment accumulates",
                       "Sampling temperature; in training the loss and V's extraction", "Paid when the (flawed) grader passes"):
        assert field_help in text, field_help


def test_an_interventions_help_explains_each_of_its_knobs(capsys):
    with pytest.raises(SystemExit):
        main(["fit", "--model.intervention.help", "Erase"])
    text = " ".join(capsys.readouterr().out.split())
    assert "which coefficients c = V g of the target are removed" in text and "--model.intervention.v" in text


ACTIVE_LEVEL = {"vanilla": None, "erase": "intervention/gradient_removed", "route": "intervention/update_removed",
                "adv_gate": "intervention/advantage_discount", "gt_penalty": "intervention/rollout_rate"}


@pytest.mark.parametrize("arm", list(ACTIVE_LEVEL))
def test_every_arm_logs_how_strongly_it_acted_at_the_level_it_acts(arm, tmp_path):
    main(fast(arm, tmp_path, 3))
    scalars = read_scalars(tmp_path / arm / "version_0")
    level = ACTIVE_LEVEL[arm]
    active = [v for _, v in scalars["intervention/active_rate"]]
    assert len(active) == 3 and all(0 <= v <= 1 for v in active)
    if level is None:  # vanilla acts nowhere
        assert active == [0.0, 0.0, 0.0]
        return
    assert max(active) > 0
    assert dict(scalars["intervention/active_rate"]) == dict(scalars[level])  # the level it acts at is the largest
    others = {"intervention/gradient_removed", "intervention/update_removed", "intervention/advantage_discount",
              "intervention/rollout_rate"} - {level}
    assert all(v == 0 for tag in others for _, v in scalars[tag])
