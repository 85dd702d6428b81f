"""ProjectedGRPO pieces that a whole fit cannot pin down precisely."""

import math
from dataclasses import replace
import random
from pathlib import Path

import lightning as L
import pytest
import torch
import yaml

from pgrpo.cli import main
from pgrpo.step.batch import PromptGroup
from pgrpo.env import NO_LOOPHOLE, GradeResult, load_problems
from pgrpo.env.pool import TeacherRow
from pgrpo.directions.extraction import HackBasis
from pgrpo.step import engine as step_engine
from pgrpo.step.loss import LossConfig, teacher_advantages, teacher_token_weights
from pgrpo.model.load import model_id
from pgrpo.step.batch import Rollouts, Samples
from pgrpo.hosts.lightning.module import ProjectedGRPO
from pgrpo.step.optim import OptimConfig
from pgrpo.interventions import AdvGate, Erase, ReadsActivations, from_config
from pgrpo.step.rollout import pack


@pytest.fixture(scope="module")
def grpo():
    module = ProjectedGRPO(intervention=Erase())
    module.configure_model()
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False)
    trainer.strategy.connect(module)  # manual_backward goes through the trainer's strategy
    module.trainer = trainer
    torch.manual_seed(0)
    module.basis = HackBasis(
        {n: torch.linalg.qr(torch.randn(m.rank, 2))[0].T.contiguous() for n, m in module.adapter.items()},
        {n: torch.ones(2) for n in module.adapter}, {},
    )
    return module


def rollouts(rewards: list[list[float]], n_student: int, shared: bool | None = None) -> Rollouts:
    """A packed batch of random tokens: groups of len(rewards[0]) rows, the first n_student are student rows.

    shared None: every row its own prompt; False: a group's rows ask one prompt, each row running it;
    True: the same rows, each group's student rows and teacher rows sharing their prompt's forward.
    """
    from pgrpo.step.loss import group_advantages

    g = torch.Generator().manual_seed(0)
    size = len(rewards[0])
    n_rows = len(rewards) * size
    prompts = [torch.randint(3, 500, (5 + i % 3,), generator=g).tolist() for i in range(n_rows)]
    if shared is not None:
        prompts = [prompts[i - i % size] for i in range(n_rows)]
    completions = [torch.randint(3, 500, (4 + i % 5,), generator=g).tolist() for i in range(n_rows)]
    rewards_t = torch.tensor(rewards)
    adv, zero_std = group_advantages(rewards_t)
    is_student = torch.tensor([j < n_student for _ in rewards for j in range(size)])
    exploited = torch.tensor([r == 1.25 for group in rewards for r in group])
    packed = pack(prompts, completions, 0)
    if shared:
        packed.prompt_of_row = torch.arange(n_rows) // size * 2 + ~is_student
    return Rollouts(packed, is_student, exploited, adv.flatten(), rewards_t, zero_std, None, None, None, {}, [])


def test_student_and_teacher_gradients_sum_to_the_full_batch_gradient(grpo):
    ro = rollouts([[1.0, 0.0, 0.25, 1.25], [0.25, 1.25, 0.0, 0.0]], n_student=3)
    for m in grpo.adapter.values():
        m.delta_s.grad = None
    _, _, grads = grpo.engine.backward(ro)
    g_student, g_teacher = grads.split(ro.is_student)
    for name, m in grpo.adapter.items():
        g_s, g_t = g_student[name], g_teacher[name]
        torch.testing.assert_close(g_s + g_t, m.delta_s.grad, rtol=1e-5, atol=1e-7)
        assert g_t.abs().sum() > 0 and g_s.abs().sum() > 0


def test_a_long_teacher_row_does_not_widen_the_student_rows_pass(grpo, monkeypatch):
    ro = rollouts([[1.0, 0.0, 0.25, 1.25], [0.25, 1.25, 0.0, 0.0]], n_student=3, shared=True)
    long = [5] * 40  # a teacher completion ten times a student's
    t_p = ro.packed.input_ids.shape[1] - ro.packed.completion_len
    prompts = [ids[:t_p][mask[:t_p].bool()].tolist() for ids, mask in zip(ro.packed.input_ids, ro.packed.attention_mask)]
    completions = [row[: int(m.sum())].tolist() for row, m in zip(ro.packed.input_ids[:, -ro.packed.completion_len:],
                                                                   ro.packed.completion_mask)]
    completions[7] = long
    packed = pack(prompts, completions, 0)
    packed.prompt_of_row = ro.packed.prompt_of_row
    ro.packed = packed
    widths = []
    real_logprobs = grpo.engine.logprobs
    monkeypatch.setattr(grpo.engine, "logprobs",
                        lambda p, **k: widths.append((int(p.input_ids.shape[0]), p.completion_len))
                        or real_logprobs(p, **k))
    for m in grpo.adapter.values():
        m.delta_s.grad = None
    grpo.engine.backward(ro)
    assert widths == [(6, max(len(c) for c, s in zip(completions, ro.is_student) if s)), (2, 40)]


@pytest.mark.parametrize("micro_batch_size", [None, 3])
def test_shared_prompts_give_the_same_gradient_and_the_same_student_teacher_split(grpo, monkeypatch,
                                                                                 micro_batch_size):
    monkeypatch.setattr(grpo.engine, "config", replace(grpo.engine.config, micro_batch_size=micro_batch_size))
    # 3: a group spans two micro-batches
    for m in grpo.adapter.values():
        m.delta_s.data.normal_(0, 0.05, generator=torch.Generator().manual_seed(1))
    results = []
    for shared in (False, True):
        for m in grpo.adapter.values():
            m.delta_s.grad = None
        ro = rollouts([[1.0, 0.0, 0.25, 1.25], [0.25, 1.25, 0.0, 0.0]], n_student=3, shared=shared)
        loss, _, grads = grpo.engine.backward(ro)
        results.append((loss, {n: m.delta_s.grad.clone() for n, m in grpo.adapter.items()}, grads.split(ro.is_student),
                        grads))
    for m in grpo.adapter.values():
        m.delta_s.data.zero_()
    (loss_flat, grad_flat, (s_flat, t_flat), _), (loss_shared, grad_shared, (s_shared, t_shared), grads) = results
    assert loss_shared == pytest.approx(loss_flat, rel=1e-5)
    assert len(next(iter(grads.prompts.values()))) >= 4  # two groups × (student, teacher): the prompts ran shared
    for name in grad_flat:
        torch.testing.assert_close(grad_shared[name], grad_flat[name], rtol=1e-4, atol=1e-7)
        torch.testing.assert_close(s_shared[name], s_flat[name], rtol=1e-4, atol=1e-7)
        torch.testing.assert_close(t_shared[name], t_flat[name], rtol=1e-4, atol=1e-7)


def test_adv_gate_gives_the_gradient_of_the_gated_advantages_from_one_backward(grpo, monkeypatch):
    from pgrpo.step.projection import rollout_hack_fraction

    for m in grpo.adapter.values():
        m.delta_s.data.normal_(0, 0.05, generator=torch.Generator().manual_seed(2))
    ro = rollouts([[1.0, 0.0, 0.25, 1.25], [0.25, 1.25, 0.0, 0.0]], n_student=3)
    for m in grpo.adapter.values():
        m.delta_s.grad = None
    _, _, grads = grpo.engine.backward(ro)
    fraction = rollout_hack_fraction(grads.rows, grpo.basis)
    # centred among this batch's rollouts, so that some are kept and some discounted
    gate = AdvGate(center=float(fraction.median()), temperature=0.02)
    monkeypatch.setattr(grpo, "intervention", gate)
    weights = gate.advantage_weights(grpo, grads)
    assert weights.min() < 0.2 and weights.max() > 0.8
    stats = grpo.engine.project(grads, ro)
    gated = {n: m.delta_s.grad.clone() for n, m in grpo.adapter.items()}
    # the same batch, its advantages scaled by the weights up front: the gradient every other arm would take
    ro.advantages = ro.advantages * weights
    for m in grpo.adapter.values():
        m.delta_s.grad = None
    grpo.engine.backward(ro)
    for name, m in grpo.adapter.items():
        m.delta_s.data.zero_()
        torch.testing.assert_close(gated[name], m.delta_s.grad, rtol=1e-4, atol=1e-7)
    assert 0 < stats["intervention/advantage_weight"] < 1


@pytest.mark.parametrize("setting, key", [({"share_prompts": True}, "model.share_prompts"),
                                          ({"share_prompts": False, "loss": LossConfig(beta=0.1)}, "model.loss.beta")])
def test_the_module_asks_its_intervention_to_check_its_settings(setting, key):
    with pytest.raises(ValueError, match=key):
        ProjectedGRPO(intervention=AdvGate(), **setting)


def test_zero_variance_groups_are_skipped(grpo):
    ro = rollouts([[1.0, 1.0, 1.0, 1.0], [0.0, 1.25, 0.0, 0.0]], n_student=3)
    for m in grpo.adapter.values():
        m.delta_s.grad = None
    _, _, grads = grpo.engine.backward(ro)
    name = next(iter(grads.rows))
    assert grads.rows[name][:4].abs().sum() == 0  # the flat group contributed nothing
    assert grads.rows[name][4:].abs().sum() > 0
    assert ro.zero_std.tolist() == [True, False]


def test_all_flat_groups_backpropagate_nothing_and_projection_is_skipped(grpo):
    """`pgrpo report` tells an idle step by this: the gradient's hack-ward share is logged on a step with a
    gradient, never on one without (its strength is read on the former: events.HAD_GRADIENT)."""
    from pgrpo.records.events import HAD_GRADIENT

    ro = rollouts([[0.25, 0.25, 0.25, 0.25]], n_student=4)
    for m in grpo.adapter.values():
        m.delta_s.grad = None
    loss, _, grads = grpo.engine.backward(ro)
    assert loss == 0.0 and all(m.delta_s.grad is None for m in grpo.adapter.values())
    assert grpo.engine.project(grads, ro) == {}
    live = rollouts([[0.0, 1.25, 0.0, 0.0]], n_student=3)
    _, _, grads = grpo.engine.backward(live)
    assert HAD_GRADIENT in grpo.engine.project(grads, live)


def test_non_finite_loss_stops_the_run_naming_the_step(grpo, monkeypatch):
    monkeypatch.setattr(step_engine, "grpo_loss", lambda *a, **k: (torch.tensor(float("nan"), requires_grad=True), {}))
    with pytest.raises(FloatingPointError, match="at step 0"):
        grpo.engine.backward(rollouts([[1.0, 0.0]], n_student=1))


def test_warmup_never_gives_a_zero_learning_rate():
    module = ProjectedGRPO(optim=OptimConfig(lr=0.1, warmup_steps=4))
    module.configure_model()
    [opt], [sched] = module.configure_optimizers()
    lrs = []
    for _ in range(6):
        lrs.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    assert lrs[0] > 0 and lrs == sorted(lrs) and lrs[-1] == pytest.approx(0.1)


def test_quarantine_has_no_weight_decay_by_default():
    module = ProjectedGRPO(optim=OptimConfig(weight_decay=0.1))
    module.configure_model()
    [opt], _ = module.configure_optimizers()
    knobs, quarantine = opt.param_groups
    assert knobs["weight_decay"] == 0.1 and quarantine["weight_decay"] == 0.0


CONFIGS = Path(__file__).resolve().parents[3] / "configs"
# The arms that exist to let the oracle's verdict reach the reward or the advantage, each reported as such:
# the positive controls (honest and honest_matched, graded by the oracle alone) and the two ground-truth skylines.
ORACLE_ARMS = {"honest.yaml", "honest_matched.yaml", "gt_screen.yaml", "gt_penalty.yaml"}


def _grades(gt_correct: list[bool], passed: list[bool]) -> list[GradeResult]:
    return [GradeResult(reward=0.25 + p, passed=p, gt_correct=c, exploited=p and not c, mechanism=None,
                        format_ok=True, loophole_code=(), stub_passes=False, bogus_own_tests=False, attempted=False,
                        mode="run_tests", timed_out=False, error=None) for c, p in zip(gt_correct, passed)]


def _teacher(problem, exploited: bool) -> TeacherRow:
    return TeacherRow(problem.id, problem.fingerprint, problem.mode, "hack", [], "x = 1", 1.25, True,
                      not exploited, exploited, True)


@pytest.mark.parametrize("config", sorted(p.name for p in CONFIGS.glob("*.yaml")))
def test_only_the_oracle_arms_let_the_oracles_verdict_reach_a_reward_or_an_advantage(config, grpo, monkeypatch,
                                                                                     capsys):
    with pytest.raises(SystemExit):
        main(["fit", "--config", str(CONFIGS / config), "--print_config"])
    resolved = yaml.safe_load(capsys.readouterr().out)
    intervention = from_config(resolved["model"]["intervention"])
    if isinstance(intervention, ReadsActivations):  # its detector is fitted at train start: a score of the tokens
        intervention.scores = lambda module, packed: packed.input_ids.float().sum(1)
    monkeypatch.setattr(grpo, "intervention", intervention)
    monkeypatch.setattr(grpo.engine, "config",
                        replace(grpo.engine.config, advantage_scale=resolved["model"]["advantage_scale"]))
    problems = load_problems()[:2]
    prompt_ids = [[5, 6, 7]] * 6
    completions = [[8, 9, 10 + i] for i in range(6)]
    students = Samples(prompt_ids, completions, [False] * 6, ["x"] * 6)
    passed = [True, True, False, True, False, False]
    batches = []
    for flip in (False, True):  # the same flawed grades; only the oracle's verdict differs
        groups = [PromptGroup(p, "prompt", [_teacher(p, exploited=(i == 0) != flip)], 3) for i, p in enumerate(problems)]
        gt_correct = [c != flip for c in (True, False, False, False, False, True)]
        batches.append(grpo.engine.assemble(groups, students, _grades(gt_correct, passed)))
    reaches = not (torch.equal(batches[0].rewards, batches[1].rewards)
                   and torch.equal(batches[0].advantages, batches[1].advantages))
    graded_by_oracle = resolved["data"]["modes"] == NO_LOOPHOLE
    assert reaches or graded_by_oracle or config not in ORACLE_ARMS, f"{config}: its oracle intervention is inert"
    assert (reaches or graded_by_oracle) == (config in ORACLE_ARMS), f"{config}: the oracle reaches its reward"


def test_sampler_mismatch_is_logged_as_the_mean_gap_and_truncated_importance_weights_the_student_tokens(grpo,
                                                                                                     monkeypatch):
    """vLLM's logprobs against the trainer's: gen/logprob_gap over student tokens; with importance_cap the
    student rows' loss is weighted by min(exp(trainer − sampler), cap), teacher rows by 1."""
    ro = rollouts([[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 1.0, 0.0]], n_student=2)
    with torch.no_grad():
        trainer = grpo.engine.logprobs(ro.packed)
    offset = torch.tensor([0.3, -2.0, 0.1, 0.0, 1.0, 0.05, 9.0, -9.0])[:, None]  # teacher rows: never sampled
    ro.sampler_logp = torch.where(ro.is_student[:, None], trainer - offset, torch.zeros_like(trainer))
    student_tokens = ro.packed.completion_mask.bool() & ro.is_student[:, None]
    gap = float((offset.abs() * student_tokens).sum() / student_tokens.sum())

    weights = []
    real_loss = step_engine.grpo_loss
    monkeypatch.setattr(step_engine, "grpo_loss",
                        lambda *a, token_weight=None, **k: weights.append(token_weight) or real_loss(*a, **k))
    for cap in (None, 2.0):
        monkeypatch.setattr(grpo.engine, "config", replace(grpo.engine.config, importance_cap=cap))
        ro.stats = {}
        weights.clear()
        grpo.engine.backward(ro)
        assert ro.stats["gen/logprob_gap"] == pytest.approx(gap, abs=1e-5)
        if cap is None:
            assert weights == [None, None] and "gen/is_truncated_frac" not in ro.stats  # student, teacher passes
            continue
        expected = torch.where(ro.is_student[:, None], offset.exp().clamp(max=cap), torch.ones(()))
        for w, rows in zip(weights, grpo.engine.micro_batches(torch.arange(8), ro.is_student), strict=True):
            mask = ro.packed.rows(rows).completion_mask.bool()
            torch.testing.assert_close(w[mask], expected[rows].expand_as(w)[mask], atol=1e-5, rtol=1e-5)
        truncated = float(((offset > math.log(cap)) & student_tokens).sum() / student_tokens.sum())
        assert ro.stats["gen/is_truncated_frac"] == pytest.approx(truncated)


def test_a_resume_onto_another_base_is_refused_and_onto_the_same_base_restores_v():
    # `pgrpo fit --ckpt_path` used to go on from the knobs and V whatever base the model name resolved to now
    module = ProjectedGRPO()
    V, sigma = {"layers.0.q": torch.eye(2)}, {"layers.0.q": torch.ones(2)}
    rng = {"python": random.getstate(), "torch": torch.get_rng_state(), "cuda": []}

    def checkpoint(trained_on: str) -> dict:
        return {"pgrpo_basis": {"V": V, "sigma": sigma, "meta": {"model_id": trained_on}}, "pgrpo_rng": rng}

    with pytest.raises(ValueError, match="resuming from a checkpoint: trained on base 'embedded-0000000000000000'"):
        module.on_load_checkpoint(checkpoint("embedded-0000000000000000"))
    assert module.basis is None
    module.on_load_checkpoint(checkpoint(model_id("embedded")))
    assert module.basis.V is V


@pytest.mark.parametrize("treatment", [{"teacher_advantage": "positive"}, {"teacher_weight": "student_prob"}])
def test_an_off_policy_treatment_of_the_teacher_rows_changes_their_gradient_alone(grpo, monkeypatch, treatment):
    # group 0's teacher row is penalised (A < 0), group 1's rewarded (A > 0)
    ro = rollouts([[1.0, 0.25, 0.25, 0.0], [0.0, 0.25, 0.0, 1.25]], n_student=3)
    grads = {}
    for name, cfg in (("seed", LossConfig()), ("treated", LossConfig(**treatment))):
        monkeypatch.setattr(grpo, "loss_cfg", cfg)
        treated = replace(ro, advantages=teacher_advantages(ro.advantages, ro.is_student, cfg))
        grads[name] = treated, grpo.engine.backward(treated)[2].split(ro.is_student)
    (seed_ro, (s_student, s_teacher)), (ro_t, (t_student, t_teacher)) = grads["seed"], grads["treated"]
    for name in s_student:
        torch.testing.assert_close(t_student[name], s_student[name])  # the student rows train as before
    assert any(not torch.allclose(t_teacher[n], s_teacher[n]) for n in s_teacher)
    if "teacher_advantage" in treatment:  # the penalised teacher row gets no push down
        teacher = ~ro.is_student
        assert seed_ro.advantages[teacher].min() < 0 and ro_t.advantages[teacher].min() == 0
        torch.testing.assert_close(ro_t.advantages[ro.is_student], seed_ro.advantages[ro.is_student])


def test_the_student_probability_weight_is_each_teacher_tokens_own_probability_capped_at_one():
    logp = torch.log(torch.tensor([[0.5, 0.9], [0.2, 1.0]])).requires_grad_(True)
    is_student = torch.tensor([True, False])
    assert teacher_token_weights(logp, is_student, LossConfig()) is None
    weight = teacher_token_weights(logp, is_student, LossConfig(teacher_weight="student_prob"))
    torch.testing.assert_close(weight, torch.tensor([[1.0, 1.0], [0.2, 1.0]]))
    assert not weight.requires_grad
    with pytest.raises(ValueError, match="teacher_weight"):
        LossConfig(teacher_weight="two")
