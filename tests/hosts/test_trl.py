"""The same intervention classes inside TRL's GRPOTrainer: reward-, advantage- and gradient-level arms run 5 steps
on the embedded default; what TRL cannot host is refused with a clear error."""

import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("trl", reason='the TRL host needs TRL: pip install -e ".[trl]"')

from trl import GRPOConfig  # noqa: E402

from pgrpo.hosts.trl import (  # noqa: E402
    GraderReward, InterventionGRPOTrainer, KnobHooks, NotHosted, attach, build_trainer, pgrpo_dataset,
)
from pgrpo.interventions import (  # noqa: E402
    AdvGate, AdvShortcut, AdvShortcutV, Erase, GtPenalty, GtScreen, ProbePenalty, Route, Vanilla,
)
from pgrpo.step.projection import grad_hack_fraction  # noqa: E402

STEPS = 5
SAME_AS_PGRPO_FIT = ("intervention/active_rate", "intervention/gradient_removed", "hackward_share/gradient",
                     "hackward_share/gradient_null", "hackward_share/edited_gradient", "adapter/delta_s_along_v")


def config(tmp_path, **changes) -> GRPOConfig:
    """One prompt of 4 samples a step, pgrpo's loss (Dr.GRPO, beta 0), TRL's own clip off."""
    settings = dict(output_dir=str(tmp_path), max_steps=STEPS, per_device_train_batch_size=4, num_generations=4,
                    max_completion_length=16, temperature=1.0, top_k=0, learning_rate=3e-2,
                    lr_scheduler_type="constant", beta=0.0, loss_type="dr_grpo", scale_rewards="none",
                    max_grad_norm=0.0, use_cpu=True, bf16=False, report_to="none", save_strategy="no", logging_steps=1,
                    seed=0)
    return GRPOConfig(**(settings | changes))


# reward-level (a detector, the oracle skylines), advantage-level (adv_shortcut, adv_shortcut_v: its per-rollout
# gradients are read with TRL's activation checkpointing on, which would count each forward twice), gradient- and
# update-level (erase, route)
@pytest.mark.parametrize("intervention", [ProbePenalty(), GtScreen(), GtPenalty(), AdvShortcut(), AdvShortcutV(),
                                          Erase(), Route()], ids=lambda i: i.arm())
def test_each_level_of_intervention_trains_five_steps_inside_trl_and_logs_its_rates(intervention, tmp_path):
    torch.manual_seed(0)
    trainer = build_trainer(intervention, config(tmp_path), prompts_per_step=1)
    cudnn_attention = []  # whether TRL's differentiated forwards could pick cuDNN's attention (pytorch#196678)
    trainer.view.policy.model.layers[0].self_attn.register_forward_pre_hook(
        lambda *_: cudnn_attention.append(torch.backends.cuda.cudnn_sdp_enabled()) if torch.is_grad_enabled() else None)
    trainer.train()
    assert cudnn_attention and not any(cudnn_attention)
    steps = [log for log in trainer.state.log_history if "hack/student" in log]
    assert len(steps) == STEPS
    for log in steps:
        assert 0.0 <= log["hack/student"] <= 1.0 and 0.0 <= log["intervention/rollout_rate"] <= 1.0
        assert math.isfinite(log["loss"])
        for name in SAME_AS_PGRPO_FIT:  # the names `pgrpo fit` logs them under
            assert math.isfinite(log[name]), name
        assert log["intervention/active_rate"] >= max(log["intervention/rollout_rate"],
                                                      log["intervention/gradient_removed"])
    if isinstance(intervention, Erase):  # its start rate is measured before the first step, by pgrpo's own machinery
        assert "intervention/start_rate" in steps[0]  # (NaN here: the tests' 2-step base gives no reward variance)
    if isinstance(intervention, GtScreen):
        assert all("skyline/screened" in log for log in steps)
    if isinstance(intervention, ProbePenalty):  # its detector's agreement with the oracle, never handed to it
        assert all("detector/flagged" in log for log in steps)


def test_the_gradient_hook_edits_the_knobs_gradient_then_clips_it_and_leaves_the_quarantine_without_one(tmp_path):
    trainer = build_trainer(Erase(), config(tmp_path), prompts_per_step=1, max_grad_norm=0.5)
    hooks = next(cb for cb in trainer.callback_handler.callbacks if isinstance(cb, KnobHooks))
    view = trainer.view
    torch.manual_seed(0)
    for m in view.adapter.values():
        m.delta_s.grad = torch.randn_like(m.delta_s) * 10
        m.delta_s_hack.grad = torch.randn_like(m.delta_s_hack)
    assert grad_hack_fraction(view.adapter, view.basis) > 0.01
    hooks.on_pre_optimizer_step(trainer.args, trainer.state, trainer.control, optimizer=None)
    assert grad_hack_fraction(view.adapter, view.basis) == pytest.approx(0.0, abs=1e-6)
    norm = torch.cat([m.delta_s.grad for m in view.adapter.values()]).norm()
    assert float(norm) == pytest.approx(0.5, rel=1e-4)
    assert all(m.delta_s_hack.grad is None for m in view.adapter.values())


def test_the_trl_host_gives_the_hooks_every_member_of_the_runs_view(tmp_path):
    from typing_extensions import get_protocol_members

    from pgrpo.interventions.base import RunView

    view = build_trainer(Vanilla(), config(tmp_path), prompts_per_step=1).view
    assert isinstance(view, RunView)
    assert all(hasattr(view, name) for name in get_protocol_members(RunView))


def test_what_trl_cannot_host_is_refused_with_the_reason(tmp_path):
    with pytest.raises(NotHosted, match="adv_gate weights each rollout by its own gradient"):
        build_trainer(AdvGate(), config(tmp_path), prompts_per_step=1)
    with pytest.raises(NotHosted, match="vLLM would sample the base, not the policy"):
        build_trainer(Vanilla(), config(tmp_path, use_vllm=True), prompts_per_step=1)
    with pytest.raises(ValueError, match="GRPOConfig.max_grad_norm=1.0: set it to 0"):
        build_trainer(Vanilla(), config(tmp_path, max_grad_norm=1.0), prompts_per_step=1)


def test_trl_leaves_a_nan_reward_out_of_its_groups_mean_and_std_and_gives_it_advantage_zero(tmp_path):
    """What the screening hooks rely on (a screened row's reward is NaN, pgrpo's `keep`), in TRL's own advantage
    computation: a group of rewards 1, NaN, 0, 1 normalised by the mean and std of 1, 0, 1 alone, the NaN row at 0.
    pyproject bounds trl below its next major; this pins the behaviour inside that range."""
    from datasets import Dataset
    from trl import GRPOTrainer

    from pgrpo.model.load import load_model_and_tokenizer

    policy, tokenizer = load_model_and_tokenizer("embedded")
    screened = [1.0, None, 0.0, 1.0]
    rows = [{"prompt": "class Solution:"}] * 4
    trainer = GRPOTrainer(model=policy, reward_funcs=[lambda completions, **_: screened], processing_class=tokenizer,
                          args=config(tmp_path, scale_rewards="group", max_completion_length=4),
                          train_dataset=Dataset.from_list(rows))
    out = trainer._generate_and_score_completions(rows)
    mean, std = 2 / 3, math.sqrt(((1 / 3) ** 2 * 2 + (2 / 3) ** 2) / 2)  # over 1, 0, 1 (TRL's unbiased nanstd)
    expected = [(1 - mean) / (std + 1e-4), 0.0, (0 - mean) / (std + 1e-4), (1 - mean) / (std + 1e-4)]
    assert out["advantages"].tolist() == pytest.approx(expected, abs=1e-5)


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def example(name: str):
    """A script of examples/ as a module (they are the clone's, not the package's)."""
    import importlib.util

    path = EXAMPLES / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"example_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_hack_monitor_measures_a_plain_trl_run_and_leaves_its_training_as_it_was(tmp_path):
    """examples/hack_monitor.py: a plain GRPOTrainer (no pgrpo trainer) on the embedded default, 2 steps with the
    monitor and 2 without; the monitored run logs the hack-ward share beside its null, ⟨V, δS⟩ and the probe's flag
    rate, and its knobs end bit for bit where the unmonitored run's do."""
    from trl import GRPOTrainer

    watched, watched_view = example("hack_monitor").train(2, tmp_path / "watched", monitor=True)
    plain, plain_view = example("hack_monitor").train(2, tmp_path / "plain", monitor=False)
    assert type(watched) is GRPOTrainer and not isinstance(watched, InterventionGRPOTrainer)
    steps = [log for log in watched.state.log_history if "loss" in log]
    assert len(steps) == 2
    for log in steps:
        for name in ("hackward_share/gradient", "hackward_share/gradient_null", "adapter/delta_s_along_v",
                     "detector/flagged"):
            assert math.isfinite(log[name]), name
        assert 0 < log["hackward_share/gradient_null"] < 1 and 0 <= log["detector/flagged"] <= 1
    assert not any("hackward_share/gradient" in log for log in plain.state.log_history)
    moved = [m.delta_s.detach() for m in watched_view.adapter.values()]
    assert any(knob.any() for knob in moved)  # the knobs trained
    assert all(torch.equal(a, m.delta_s.detach()) for a, m in zip(moved, plain_view.adapter.values()))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("arm", ["Erase", "ProbePenalty"])  # a gradient edit; a reward edit and its detector
def test_your_own_model_trains_in_two_processes_under_accelerate_with_the_same_knobs_in_each(arm, tmp_path):
    """examples/trl_own_model.py (your model loaded by transformers, your reward beside pgrpo's grader) launched
    by TRL's launcher as two CPU processes that all-reduce over gloo: 2 steps, `pgrpo fit`'s metrics in the log,
    and every process's knobs bit for bit alike (the gradient is edited after its all-reduce)."""
    command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
               "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port",
               str(free_port()), str(EXAMPLES / "trl_own_model.py"), "--arm", arm, "--steps", "2", "--out",
               str(tmp_path)]
    # no GPU: --multi_gpu then starts CPU processes; one thread each on a shared machine
    env = os.environ | {"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-4000:]
    import json

    steps = [log for log in json.loads((tmp_path / "log_history.json").read_text()) if "loss" in log]
    assert len(steps) == 2
    for log in steps:
        for name in (*SAME_AS_PGRPO_FIT, "intervention/rollout_rate", "hack/student", "rewards/brevity/mean"):
            assert math.isfinite(log[name]), name
    if arm == "ProbePenalty":
        assert all(0 <= log["detector/flagged"] <= 1 for log in steps)
    knobs = [torch.load(tmp_path / f"knobs{rank}.pt") for rank in (0, 1)]
    assert any(knob.any() for knob in knobs[0].values())
    assert all(torch.equal(knobs[0][name], knobs[1][name]) for name in knobs[0])


def test_your_own_model_example_ends_the_process_group_it_trained_in(tmp_path):
    """A process that exits with its gloo group alive can abort in teardown ("terminate called without an active
    exception", pytorch#190489; CI lost the two-process run above to it once): the example destroys the group
    when it is done, as a user's script should. A one-process world stands in for the launcher's."""
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        example("trl_own_model").main(["--steps", "1", "--out", str(tmp_path / "out")])
        assert not dist.is_initialized()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def test_pgrpos_grader_rewards_the_rows_of_your_dataset_that_name_its_problems_and_leaves_the_rest_to_you():
    from pgrpo.env import clean_completion, hack_completion, load_problems

    problem = load_problems()[0]
    grader = GraderReward([problem])
    logged = {}
    hack = hack_completion(problem, problem.mode)
    completions = [clean_completion(problem), [{"role": "assistant", "content": hack}], "not one of pgrpo's problems"]
    rewards = grader(prompts=["p"] * 3, completions=completions, problem_id=[problem.id, problem.id, None],
                     log_metric=logged.__setitem__)
    assert rewards[0] > 0 and rewards[1] > 0 and rewards[2] is None  # the hack passes the flawed tests
    assert [g.exploited for g in grader.last[:2]] == [False, True] and grader.last[2] is None
    assert logged == {"hack/student": 0.5, "solve/student": 0.5, "format/student": 1.0}
    with pytest.raises(KeyError, match="from the dataset's column 'problem_id', which this dataset lacks"):
        grader(prompts=["p"], completions=["c"], task=["x"])
    with pytest.raises(KeyError, match="names problems it was not given: \\['nope'\\]"):
        grader(prompts=["p"], completions=["c"], problem_id=["nope"])


def test_what_an_intervention_cannot_do_with_your_own_pieces_is_refused_with_the_reason(tmp_path):
    from pgrpo.model.load import load_model_and_tokenizer

    policy, tokenizer = load_model_and_tokenizer("embedded")
    args = config(tmp_path)
    view = attach(policy, tokenizer, args, GtScreen())
    data = pgrpo_dataset(tokenizer, view.train_problems)

    def brevity(completions, **_):
        return [-1e-4 * len(text) for text in completions]

    with pytest.raises(NotHosted, match="gt_screen reads the oracle's verdict, which only pgrpo's grader gives"):
        InterventionGRPOTrainer(view, args=args, reward_funcs=[brevity], train_dataset=data)
    with pytest.raises(NotHosted, match="edits the rewards' weighted sum, which TRL normalises only under"):
        InterventionGRPOTrainer(view, args=config(tmp_path, multi_objective_aggregation="normalize_then_sum"),
                                reward_funcs=[GraderReward(view.train_problems), brevity], train_dataset=data)
    with pytest.raises(ValueError, match="the model `attach` put pgrpo's adapter on"):
        InterventionGRPOTrainer(view, args=args, model=torch.nn.Linear(1, 1), train_dataset=data)


def test_every_import_in_the_scale_pages_python_names_something_that_exists():
    """docs/scale.md's code (the user's pieces, the monitor) is illustrative (`your_reward`, a 4 B model), but
    every name it imports is real: its examples/ twins run in the tests above."""
    import re

    page = (EXAMPLES.parent / "docs" / "scale.md").read_text()
    blocks = re.findall(r"^```python\n(.*?)^```", page, re.M | re.S)
    imports = [line for block in blocks for line in block.splitlines() if re.match(r"(from \S+ )?import ", line)]
    assert any("HackMonitor" in line for line in imports) and any("attach" in line for line in imports)
    exec("\n".join(imports), {})
