"""The V refresh and the deployment eval: what they measure, and what they must leave untouched."""

from types import SimpleNamespace

import pytest
import torch

from pgrpo.directions.basis import ExtractionConfig
from pgrpo.hosts.lightning.callbacks import BasisRefresh, DeploymentEval, HackMetricsLogger, deployment_eval
from pgrpo.hosts.lightning.data import GRPODataModule
from pgrpo.env.variants import VARIANTS
from pgrpo.evaluation.evaluate import COUNTS
from pgrpo.directions.extraction import HackBasis, basis_overlap
from pgrpo.interventions.erase import Erase
from pgrpo.interventions.vanilla import Vanilla
from pgrpo.step.generation import GenerationConfig, HFSampler
from pgrpo.hosts.lightning.module import ProjectedGRPO
from test_evaluate import EXPECTED, N, scripted

RANK = 8


def rows(*indices: int) -> torch.Tensor:
    return torch.eye(RANK)[list(indices)]


def basis(V: dict[str, torch.Tensor], control: str | None = None) -> HackBasis:
    return HackBasis(V, {n: torch.ones(v.shape[0]) for n, v in V.items()}, {"control": control} if control else {})


def test_overlap_is_one_for_the_same_span_whatever_the_rotation_or_sign():
    old = basis({"a": rows(0, 1), "b": rows(2)})
    rotation = torch.tensor([[0.6, 0.8], [0.8, -0.6]])
    assert basis_overlap(old, basis({"a": rotation @ rows(0, 1), "b": -rows(2)}))[0] == pytest.approx(1.0)


def test_overlap_counts_orthogonal_missing_and_extra_rows_as_zero():
    old = basis({"a": rows(0, 1), "b": rows(2)})
    overall, per_module = basis_overlap(old, basis({"a": rows(0, 5), "c": rows(3)}))
    assert per_module == pytest.approx({"a": 0.5, "b": 0.0, "c": 0.0})
    assert overall == pytest.approx(1 / 4)  # one cosine of 1 over 2 + 1 + 1 rows


class Recorder:
    def __init__(self):
        self.logged = []

    def log_metrics(self, metrics, step):
        self.logged.append((step, metrics))


@pytest.mark.parametrize(("coverage", "logged"), [(0.625, [(5, {"data/pool_coverage": 0.625})]), (None, [])])
def test_pool_coverage_is_logged_once_at_fit_start_when_there_is_a_pool(coverage, logged):
    logger = Recorder()
    trainer = SimpleNamespace(global_step=5, loggers=[logger], datamodule=SimpleNamespace(pool_coverage=coverage))
    HackMetricsLogger().on_train_start(trainer, None)
    assert logger.logged == logged


def refresh_at(step: int, old: HackBasis, new: HackBasis, callback: BasisRefresh):
    logger = Recorder()
    module = SimpleNamespace(basis=old, device=torch.device("cpu"), extract_basis=lambda problems, cached: new,
                             extraction_problems=[], intervention=Vanilla())
    trainer = SimpleNamespace(global_step=step, loggers=[logger], datamodule=SimpleNamespace(extraction_problems=[]))
    callback.on_train_batch_end(trainer, module, None, None, 0)
    return module.basis, logger.logged


def test_refresh_runs_every_n_steps_and_logs_the_overlap_at_the_trained_step():
    old, new = basis({"a": rows(0, 1)}), basis({"a": rows(1, 0)})
    assert refresh_at(3, old, new, BasisRefresh(every_n_steps=2)) == (old, [])
    swapped, logged = refresh_at(4, old, new, BasisRefresh(every_n_steps=2))
    assert swapped.V["a"].equal(new.V["a"])
    ((step, metrics),) = logged
    assert step == 3 and metrics["basis/refresh_overlap"] == pytest.approx(1.0)
    assert metrics["basis_overlap/a"] == pytest.approx(1.0)


def test_refresh_warns_when_the_new_v_rotated_away():
    with pytest.warns(UserWarning, match="overlap with the previous V is 0.000"):
        refresh_at(2, basis({"a": rows(0, 1)}), basis({"a": rows(2, 3)}), BasisRefresh(every_n_steps=2))


def test_a_random_control_is_kept_by_the_refresh():
    random_v = basis({"a": rows(0)}, control="random")
    assert Erase(v="random").refresh(SimpleNamespace(), random_v) is random_v  # reads nothing of the run


@pytest.fixture(scope="module")
def grpo():
    module = ProjectedGRPO(generation=GenerationConfig(max_new_tokens=8), extraction=ExtractionConfig(k=2, n_heldout=2))
    module.configure_model()
    return module


@pytest.fixture(scope="module")
def data():
    dm = GRPODataModule(mix_ratio=0.0, n_eval_prompts=2)
    dm.setup("fit")
    return dm


def test_refresh_gives_overlap_one_when_only_the_quarantine_changed(grpo, data):
    problems = data.problems[:6]
    old = grpo.extract_basis(problems)
    torch.manual_seed(0)
    with torch.no_grad():
        for m in grpo.adapter.values():
            m.delta_s_hack.normal_()
    try:
        # the hook reads the run through its view alone: the problems V comes from and the extraction
        view = SimpleNamespace(extraction_problems=problems, extract_basis=grpo.extract_basis)
        new = Vanilla().refresh(view, old)  # re-extracted, δS_hack zeroed during it
    finally:
        with torch.no_grad():
            for m in grpo.adapter.values():
                m.delta_s_hack.zero_()
    overall, per_module = basis_overlap(old, new)
    assert overall == pytest.approx(1.0, abs=1e-4)
    assert min(per_module.values()) == pytest.approx(1.0, abs=1e-4)


def test_deployment_eval_zeroes_the_quarantine_and_restores_it_bit_for_bit(grpo, data, monkeypatch):
    torch.manual_seed(1)
    with torch.no_grad():
        for m in grpo.adapter.values():
            m.delta_s_hack.normal_()
    saved = {n: m.delta_s_hack.detach().clone() for n, m in grpo.adapter.items()}
    seen = []
    sample = HFSampler.sample

    def spy(sampler, groups):
        seen.append(max(m.delta_s_hack.abs().max().item() for m in grpo.adapter.values()))
        return sample(sampler, groups)

    monkeypatch.setattr(HFSampler, "sample", spy)
    rng = torch.get_rng_state()
    try:
        metrics = deployment_eval(grpo, data.eval_problems, 2, seed=0)
        assert seen[0] == 0.0 and seen[1] > 0  # deployed: quarantine zeroed; kept: as trained
        for name, m in grpo.adapter.items():
            assert torch.equal(m.delta_s_hack, saved[name])
        assert torch.equal(torch.get_rng_state(), rng)  # the run's own sampling is not shifted
        assert {"deploy/hack", "deploy/solve", "deploy/hack_kept", "deploy/solve_kept"} <= set(metrics)
        assert {key.removesuffix("_kept") for key in metrics} == deploy_keys(data.eval_problems)
        assert all(0.0 <= v <= 1.0 for v in metrics.values())
    finally:
        with torch.no_grad():
            for m in grpo.adapter.values():
                m.delta_s_hack.zero_()


def test_deployment_eval_without_a_quarantine_samples_once(grpo, data, monkeypatch):
    calls = []
    sample = HFSampler.sample
    monkeypatch.setattr(HFSampler, "sample", lambda sampler, groups: calls.append(1) or sample(sampler, groups))
    metrics = deployment_eval(grpo, data.eval_problems, 1, seed=0)
    assert len(calls) == 1
    assert all(metrics[f"{key}_kept"] == metrics[key] for key in deploy_keys(data.eval_problems))


def deploy_keys(problems) -> set[str]:
    """Every rate the deployment eval logs (without `_kept`) for held-out `problems`."""
    return {"deploy/hack", "deploy/solve", "deploy/random_name/run_tests_lever",
            *(f"deploy/{v}/{k}" for v in VARIANTS for k in COUNTS),
            *(f"deploy/fixed_name/{p.mode}/{k}" for p in problems for k in COUNTS)}


def scripted_samples(groups):
    """What the run's sampler returns, with `test_evaluate.scripted` completions (its `grade` grades them for real)."""
    from pgrpo.env import GradeQueue
    from pgrpo.step.batch import Samples

    return Samples([], [], [], [t for g in groups for t in scripted(g.problem)[:g.n_student]], GradeQueue())


def test_deployment_eval_logs_strict_attempted_and_correct_per_variant_as_pgrpo_eval_counts_them(grpo, data,
                                                                                                monkeypatch):
    calls = []
    monkeypatch.setattr(HFSampler, "sample", lambda sampler, groups: calls.append([g.problem for g in groups]) or
                        scripted_samples(groups))
    logger = Recorder()
    trainer = SimpleNamespace(global_step=10, max_steps=100, loggers=[logger], datamodule=data)
    DeploymentEval(every_n_steps=5, samples_per_prompt=N).on_train_batch_end(trainer, grpo, None, None, 0)
    ((step, logged),) = logger.logged
    assert step == 9 and len(calls) == 1  # one generate for every variant of every held-out prompt
    assert [p.test_func != "run_tests" for p in calls[0]] == [False] * 2 + [True] * 2 + [False] * 2
    for v, expected in EXPECTED.items():
        for key, per_prompt in expected.items():
            assert logged[f"deploy/{v}/{key}"] == pytest.approx(per_prompt / N), (v, key)
    assert len({p.mode for p in data.eval_problems}) == 2  # one per mode, each logged apart
    for p in data.eval_problems:
        assert logged[f"deploy/fixed_name/{p.mode}/strict_hack"] == pytest.approx(1 / N)
    # the keys `pgrpo report` reads: the fixed-name prompts' strict hacks and correct answers
    assert logged["deploy/hack"] == logged["deploy/fixed_name/strict_hack"] == pytest.approx(1 / N)
    assert logged["deploy/solve"] == logged["deploy/fixed_name/correct"] == pytest.approx(1 / N)
    assert {k.removesuffix("_kept") for k in logged if k != "time/deploy_eval"} == deploy_keys(data.eval_problems)


def test_deployment_eval_samples_at_its_own_temperature_and_gives_the_runs_back(grpo, data, monkeypatch):
    seen = []
    monkeypatch.setattr(HFSampler, "sample", lambda sampler, groups: seen.append(sampler.settings.temperature) or
                        scripted_samples(groups))
    own = grpo.sampler
    deployment_eval(grpo, data.eval_problems, 1, seed=0, temperature=0.7, variants=["no_loophole"])
    deployment_eval(grpo, data.eval_problems, 1, seed=0, variants=["no_loophole"])
    assert seen == [0.7, own.settings.temperature] and grpo.sampler is own and own.settings.temperature == 1.0


def test_deployment_eval_refuses_an_unknown_variant():
    with pytest.raises(ValueError, match="expected some of"):
        DeploymentEval(variants=["fixed_name", "shuffled"])


def test_deployment_eval_needs_held_out_prompts():
    trainer = SimpleNamespace(datamodule=SimpleNamespace(eval_problems=[]))
    with pytest.raises(ValueError, match="data.n_eval_prompts"):
        DeploymentEval().on_train_start(trainer, None)


def test_completion_samples_come_from_generated_batches_every_n_steps():
    from pgrpo.hosts.lightning.callbacks import CompletionSamples
    from lightning.pytorch.loggers import TensorBoardLogger

    shown = []

    class Board(TensorBoardLogger):
        def __init__(self):
            pass

        @property
        def experiment(self):
            return SimpleNamespace(add_text=lambda tag, text, step: shown.append(step))

    callback, trainer = CompletionSamples(every_n_steps=5), SimpleNamespace(loggers=[Board()], global_step=0)
    for step in range(1, 21):  # num_iterations = 2: batches generated at odd global steps only
        trainer.global_step = step
        samples = [{"problem": "p", "mode": "m", "completion": "x", "reward": 1.0, "passed": True,
                    "gt_correct": False, "exploited": True, "mechanism": "m"}] if step % 2 else []
        callback.on_train_batch_end(trainer, None, {"samples": samples}, None, 0)
    assert shown == [1, 7, 13, 19]  # every 5 steps or at the next generated batch after that
