"""Placebos matched in strength: at train start each acts on as much of the base policy's rollouts as its method."""

import pytest
import torch

from pgrpo.calibration import matching_center
from pgrpo.cli import main
from pgrpo.events import read_scalars
from test_cli import fast


def test_the_matching_center_gives_the_target_mean_discount():
    fractions = torch.tensor([0.05, 0.1, 0.15, 0.2, 0.3])
    center = matching_center(fractions, 0.3, 0.05)
    assert float(torch.sigmoid((fractions - center) / 0.05).mean()) == pytest.approx(0.3, abs=1e-6)


def test_the_adv_gate_placebo_moves_its_center_until_it_discounts_the_base_rollouts_as_the_real_gate_does(
        monkeypatch):
    from types import SimpleNamespace

    from pgrpo.extraction import HackBasis
    from pgrpo.interventions import AdvGate, adv_gate
    from pgrpo.projection import advantage_gate, rollout_hack_fraction

    g = torch.Generator().manual_seed(0)
    rows = {"m": torch.randn(128, 16, generator=g)}  # 128 live base rollouts' own gradients, rank 16
    real = HackBasis({"m": torch.linalg.qr(torch.randn(16, 4, generator=g))[0].T}, {"m": torch.ones(4)})
    rand = HackBasis({"m": torch.linalg.qr(torch.randn(16, 1, generator=g))[0].T}, {"m": torch.ones(1)})
    monkeypatch.setattr(adv_gate, "base_rollout_grads", lambda module: rows)
    logged = {}
    monkeypatch.setattr(adv_gate, "log_at_start", lambda module, metrics: logged.update(metrics))
    module = SimpleNamespace(basis=rand, extract_basis=lambda problems: real,
                             trainer=SimpleNamespace(datamodule=SimpleNamespace(extraction_problems=[])))
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
