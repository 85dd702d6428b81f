"""Erase: the gradient's component along V removed before the step, or the update's or the position's after it
(the projection's arithmetic and its drift under noise: tests/step/test_projection.py)."""

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from pgrpo.model.adapter import SVDAdapterLinear
from pgrpo.directions.extraction import HackBasis
from pgrpo.interventions import Erase
from pgrpo.step.projection import project_vector


def orthonormal_rows(k: int, r: int, seed: int) -> torch.Tensor:
    return torch.linalg.qr(torch.randn(r, k, generator=torch.Generator().manual_seed(seed)))[0].T


def adapters_with_grads() -> tuple[dict[str, SVDAdapterLinear], HackBasis]:
    """Modules a (r=10) and b (r=6) with basis rows, c (r=4) without; random grads as a backward leaves them."""
    torch.manual_seed(0)
    shapes = {"a": (10, 12), "b": (8, 6), "c": (4, 4)}
    modules = {name: SVDAdapterLinear(nn.Linear(*shape)) for name, shape in shapes.items()}
    V = {"a": orthonormal_rows(2, 10, seed=2), "b": orthonormal_rows(2, 6, seed=3)}
    for module in modules.values():
        module.delta_s.grad = torch.randn(module.rank)
    return modules, HackBasis(V, {name: torch.ones(2) for name in V})


def test_erase_on_the_gradient_writes_the_projected_gradient_of_the_basis_modules_only():
    modules, basis = adapters_with_grads()
    before = {name: m.delta_s.grad.clone() for name, m in modules.items()}
    Erase(gate="one_sided").gradient(SimpleNamespace(adapter=modules, basis=basis))
    for name in ("a", "b"):
        expected, _, _ = project_vector(before[name], basis.V[name], gate="one_sided")
        torch.testing.assert_close(modules[name].delta_s.grad, expected)
    assert torch.equal(modules["c"].delta_s.grad, before["c"])  # no basis rows, untouched


@pytest.mark.parametrize("target", ["update", "position"])
def test_erase_on_the_update_or_position_leaves_the_gradient_and_projects_the_knobs_after_the_step(target):
    modules, basis = adapters_with_grads()
    before_grads = {name: m.delta_s.grad.clone() for name, m in modules.items()}
    step = SimpleNamespace(adapter=modules, basis=basis)
    erase = Erase(target=target)
    erase.gradient(step)
    assert all(torch.equal(m.delta_s.grad, before_grads[n]) for n, m in modules.items())
    before = {name: m.delta_s.detach().clone() for name, m in modules.items()}
    with torch.no_grad():
        for m in modules.values():
            m.delta_s.add_(torch.randn(m.rank))
    erase.update(step, before)
    for name in ("a", "b"):  # no_gate: nothing of the change (update) or of δS (position) is left along V
        moved = modules[name].delta_s.detach() - (before[name] if target == "update" else 0)
        assert (basis.V[name] @ moved).abs().max() < 1e-5
    assert all(m.delta_s_hack.abs().sum() == 0 for m in modules.values())  # erase drops what it removes


@pytest.mark.parametrize("field, value", [("gate", "two_sided"), ("overshoot", 0.0), ("target", "moments")])
def test_a_bad_setting_names_its_field(field, value):
    with pytest.raises(ValueError, match=field):
        Erase(**{field: value})


def test_preserve_magnitude_on_the_position_is_refused():
    with pytest.raises(ValueError, match="rescale δS itself"):
        Erase(target="position", preserve_magnitude=True)
