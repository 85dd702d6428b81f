"""Placebos matched in strength: at train start each acts on as much of the base policy's rollouts as its method."""

import pytest
import torch

from pgrpo.directions import calibration
from pgrpo.directions.calibration import matching_center
from pgrpo.cli import main
from pgrpo.model.embedded import PRETRAIN_STEPS_ENV
from pgrpo.directions.extraction import random_basis_like
from pgrpo.records.events import read_scalars
from test_cli import fast


def test_the_matching_center_gives_the_target_mean_discount():
    fractions = torch.tensor([0.05, 0.1, 0.15, 0.2, 0.3])
    center = matching_center(fractions, 0.3, 0.05)
    assert float(torch.sigmoid((fractions - center) / 0.05).mean()) == pytest.approx(0.3, abs=1e-6)


def test_the_adv_gate_placebo_moves_its_center_until_it_discounts_the_base_rollouts_as_the_real_gate_does(
        monkeypatch):
    from types import SimpleNamespace

    from pgrpo.directions.extraction import HackBasis
    from pgrpo.interventions import AdvGate, adv_gate
    from pgrpo.step.projection import advantage_gate, rollout_hack_fraction

    g = torch.Generator().manual_seed(0)
    rows = {"m": torch.randn(128, 16, generator=g)}  # 128 live base rollouts' own gradients, rank 16
    real = HackBasis({"m": torch.linalg.qr(torch.randn(16, 4, generator=g))[0].T}, {"m": torch.ones(4)})
    rand = HackBasis({"m": torch.linalg.qr(torch.randn(16, 1, generator=g))[0].T}, {"m": torch.ones(1)})
    monkeypatch.setattr(adv_gate, "base_rollout_grads", lambda module: rows)
    logged = {}
    module = SimpleNamespace(basis=rand, extract_basis=lambda problems: real, extraction_problems=[],
                             log_at_start=logged.update)
    placebo, method = AdvGate(v="random"), AdvGate()
    placebo.prepare(module)
    target = float(1 - advantage_gate(rollout_hack_fraction(rows, real), 0.4, 0.05).mean())
    assert logged["intervention/start_rate"] == pytest.approx(target, abs=1e-4)
    assert placebo.gate_center < 0.4  # a random V's fractions sit lower: its center comes down to meet them
    module.basis = real
    method.prepare(module)
    assert method.gate_center == 0.4 and logged["intervention/start_rate"] == pytest.approx(target, abs=1e-6)


def test_the_probe_placebo_flags_as_many_of_the_base_policys_rollouts_as_the_probe(tmp_path):
    rates = {}
    for arm in ("probe_penalty", "probe_penalty_random"):
        main(fast(arm, tmp_path, 1))
        rates[arm] = read_scalars(tmp_path / arm / "version_0")["intervention/start_rate"][0][1]
    assert abs(rates["probe_penalty_random"] - rates["probe_penalty"]) <= 1 / 100, rates


def test_bisect_finds_the_closer_side_of_a_step_function():
    assert calibration.bisect(lambda x: float(round(x)), 2.4, 0.0, 10.0, rising=True) == pytest.approx(2.5, abs=0.01)
    assert calibration.bisect(lambda x: -x, -3.0, 0.0, 10.0, rising=False) == pytest.approx(3.0, abs=1e-9)


def base_policy_gradient(r: int = 32) -> dict[str, torch.Tensor]:
    """A base gradient that leans on its first axes, as a real one leans on the hack directions."""
    g = torch.Generator().manual_seed(3)
    return {name: torch.randn(r, generator=g) * 0.8 ** torch.arange(r) for name in ("m1", "m2")}


@pytest.mark.parametrize("target", ["grad", "update"])
def test_the_erase_placebo_takes_as_many_random_axes_as_remove_the_real_vs_share_of_the_first_step(
        monkeypatch, target):
    from types import SimpleNamespace

    from pgrpo.directions.extraction import HackBasis
    from pgrpo.interventions import Erase, erase
    from pgrpo.step.optim import OptimConfig

    first = base_policy_gradient()
    # the real V holds the gradient's strongest axes, so a random V of its k removes much less
    real = HackBasis({n: torch.eye(32)[:2] for n in first}, {n: torch.ones(2) for n in first})
    monkeypatch.setattr(erase, "base_gradient", lambda module: first)
    logged = {}
    module = SimpleNamespace(optim=OptimConfig(), basis=real, log_at_start=logged.update)
    method, placebo = Erase(target=target), Erase(target=target, v="random", v_seed=0)
    method.prepare(module)
    start = logged["intervention/start_rate"]
    if target == "grad":  # (AdamW's first update, g/|g|, leans on no axis: there k alone matches it)
        unmatched = method.removed(method.first_step(module), random_basis_like(real, 0))
        assert unmatched < start - 0.1  # at the real V's k, the placebo would be the weaker edit
    module.basis = placebo.control(module, real)
    placebo.prepare(module)
    assert abs(logged["intervention/start_rate"] - start) <= 0.05


def test_the_clean_subspace_placebo_keeps_as_much_of_the_base_gradient_as_the_clean_subspace(monkeypatch):
    from pgrpo.interventions.clean_subspace import random_directions, removed

    first = base_policy_gradient()
    real = {n: (torch.eye(32)[:3], torch.tensor([1.0, 0.5, 0.25])) for n in first}  # the strong axes: keeps most
    target = removed(first, real)
    unmatched = removed(first, random_directions(real, seed=0))
    scale = calibration.bisect(lambda s: removed(first, random_directions(real, 0, s)), target, 0.0, 32.0, rising=False)
    assert unmatched > target + 0.1 and scale > 1
    assert abs(removed(first, random_directions(real, 0, scale)) - target) <= 0.05


@pytest.mark.slow
@pytest.mark.parametrize("method, placebo", [("erase", "random_v"), ("clean_subspace", "clean_subspace_random")])
def test_a_gradient_placebo_removes_as_much_of_the_base_policys_first_step_as_its_method(
        tmp_path, monkeypatch, method, placebo):
    # a gradient needs rewards that differ: the fully pretrained base, with rollouts long enough to pass a test
    # (the 2-step base of the other tests passes none, and an arm then logs its start rate as nan)
    monkeypatch.delenv(PRETRAIN_STEPS_ENV, raising=False)
    rates = {}
    for arm in (method, placebo):
        main(fast(arm, tmp_path, 1, "--model.generation.max_new_tokens=128"))
        rates[arm] = read_scalars(tmp_path / arm / "version_0")["intervention/start_rate"][0][1]
    assert abs(rates[placebo] - rates[method]) <= 0.05, rates
