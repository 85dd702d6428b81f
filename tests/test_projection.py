import math

import pytest
import torch
from torch import nn

from pgrpo.adapter import SVDAdapterLinear
from pgrpo.extraction import HackBasis
from pgrpo.projection import (
    ProjectionConfig,
    hack_fraction,
    knob_snapshot,
    project_adapter_grads,
    project_update,
    project_vector,
)


def orthonormal_rows(k: int, r: int, seed: int = 0) -> torch.Tensor:
    q, _ = torch.linalg.qr(torch.randn(r, k, generator=torch.Generator().manual_seed(seed)))
    return q.T  # (k, r)


def gradient_with_mixed_signs(V: torch.Tensor) -> torch.Tensor:
    """A gradient with one hack-ward and one clean-ward coefficient on V plus an orthogonal part."""
    r = V.shape[1]
    orthogonal = torch.randn(r, generator=torch.Generator().manual_seed(1))
    orthogonal -= V.T @ (V @ orthogonal)
    return orthogonal + 2.0 * V[0] - 1.5 * V[1]


def in_span(vector: torch.Tensor, V: torch.Tensor) -> bool:
    return torch.allclose(V.T @ (V @ vector), vector, atol=1e-5)


def test_one_sided_removes_only_positive_coefficients_inside_span():
    V = orthonormal_rows(3, 10)
    g = gradient_with_mixed_signs(V)
    g_new, removed, c = project_vector(g, V, ProjectionConfig(gate="one_sided"))
    assert in_span(removed, V)
    torch.testing.assert_close(g_new + removed, g)
    assert (V @ g_new).max().item() < 1e-5
    torch.testing.assert_close((V @ g_new)[1], c[1])  # the clean-ward coefficient is kept
    basis = HackBasis({"m": V}, {"m": torch.ones(3)})
    torch.testing.assert_close(removed.norm() / g.norm(), hack_fraction({"m": g}, basis))


def test_no_gate_leaves_no_component_in_span():
    V = orthonormal_rows(3, 10)
    g_new, removed, _ = project_vector(gradient_with_mixed_signs(V), V, ProjectionConfig(gate="no_gate"))
    assert in_span(removed, V)
    assert (V @ g_new).abs().max().item() < 1e-5


def test_reverse_flips_the_span_component():
    V = orthonormal_rows(3, 10)
    g = gradient_with_mixed_signs(V)
    g_new, _, c = project_vector(g, V, ProjectionConfig(gate="reverse"))
    torch.testing.assert_close(V @ g_new, -c, atol=1e-5, rtol=0)


def test_overshoot_scales_removed():
    V = orthonormal_rows(3, 10)
    g = gradient_with_mixed_signs(V)
    _, removed_once, _ = project_vector(g, V, ProjectionConfig())
    _, removed_more, _ = project_vector(g, V, ProjectionConfig(overshoot=1.5))
    torch.testing.assert_close(removed_more, 1.5 * removed_once)


def test_preserve_magnitude_keeps_norm_and_direction():
    V = orthonormal_rows(3, 10)
    g = gradient_with_mixed_signs(V)
    plain, _, _ = project_vector(g, V, ProjectionConfig())
    kept, _, _ = project_vector(g, V, ProjectionConfig(preserve_magnitude=True))
    torch.testing.assert_close(kept.norm(), g.norm())
    torch.testing.assert_close(kept / kept.norm(), plain / plain.norm())


@pytest.mark.parametrize("field, value", [("arm", "erase_all"), ("gate", "two_sided"), ("overshoot", 0.0)])
def test_config_names_the_bad_field(field, value):
    with pytest.raises(ValueError, match=field):
        ProjectionConfig(**{field: value})


def adapters_with_grads() -> tuple[dict[str, SVDAdapterLinear], HackBasis]:
    """Modules a (r=10) and b (r=6) with basis rows, c (r=4) without; grads as one backward would leave them."""
    torch.manual_seed(0)
    shapes = {"a": (10, 12), "b": (8, 6), "c": (4, 4)}
    modules = {name: SVDAdapterLinear(nn.Linear(*shape)) for name, shape in shapes.items()}
    V = {"a": orthonormal_rows(2, 10, seed=2), "b": orthonormal_rows(2, 6, seed=3)}
    grads = {name: gradient_with_mixed_signs(rows) for name, rows in V.items()} | {"c": torch.randn(4)}
    for name, module in modules.items():
        module.delta_s.grad, module.delta_s_hack.grad = grads[name].clone(), grads[name].clone()
    return modules, HackBasis(V, {name: torch.ones(2) for name in V})


def test_none_arm_leaves_grads_untouched_and_freezes_quarantine():
    modules, basis = adapters_with_grads()
    before = {name: m.delta_s.grad.clone() for name, m in modules.items()}
    stats = project_adapter_grads(modules, basis, ProjectionConfig(arm="none"))
    for name, module in modules.items():
        assert torch.equal(module.delta_s.grad, before[name]) and module.delta_s_hack.grad is None
    hack_sq = sum((basis.V[n] @ before[n]).clamp(min=0).pow(2).sum() for n in ("a", "b"))
    assert stats["cin"] == pytest.approx(math.sqrt(hack_sq / (before["a"].pow(2).sum() + before["b"].pow(2).sum())))
    assert stats["cout"] == pytest.approx(0.0, abs=1e-5)  # measured on the g' that erase would apply


def test_erase_writes_projected_grad_and_leaves_quarantine_alone():
    modules, basis = adapters_with_grads()
    before = {name: m.delta_s.grad.clone() for name, m in modules.items()}
    stats = project_adapter_grads(modules, basis, ProjectionConfig(arm="erase"))
    for name in ("a", "b"):
        expected, _, _ = project_vector(before[name], basis.V[name], ProjectionConfig())
        torch.testing.assert_close(modules[name].delta_s.grad, expected)
    assert torch.equal(modules["c"].delta_s.grad, before["c"])  # no basis rows, untouched
    assert all(m.delta_s_hack.grad is None for m in modules.values())
    assert stats["cin"] > 0.5 and stats["cout"] == pytest.approx(0.0, abs=1e-5)


def test_route_parks_removed_in_quarantine_grad():
    modules, basis = adapters_with_grads()
    before = {name: m.delta_s.grad.clone() for name, m in modules.items()}
    project_adapter_grads(modules, basis, ProjectionConfig(arm="route"))
    for name in ("a", "b"):
        g_new, removed, _ = project_vector(before[name], basis.V[name], ProjectionConfig())
        torch.testing.assert_close(modules[name].delta_s.grad, g_new)
        torch.testing.assert_close(modules[name].delta_s_hack.grad, removed)
        assert removed.norm() > 0
    assert modules["c"].delta_s_hack.grad is None


def test_diagnostics_relu_before_aggregating_and_null():
    modules, basis = adapters_with_grads()
    teacher = {name: basis.V[name][0].clone() for name in ("a", "b")}  # purely hack-ward
    student = {name: -g for name, g in teacher.items()}  # purely clean-ward: relu leaves nothing
    stats = project_adapter_grads(modules, basis, ProjectionConfig(arm="none"), g_student=student, g_teacher=teacher)
    assert stats["cin_student"] == 0.0
    assert stats["cin_teacher"] == pytest.approx(1.0)
    assert stats["fired"] == 0.5  # per module one axis at +2, one at −1.5
    assert stats["cin_null"] == pytest.approx(math.sqrt(4 / (10 + 6)))
    g_a = modules["a"].delta_s.grad
    assert stats["cin_per_module"]["a"] == pytest.approx(2.0 / g_a.norm().item())


def test_zero_gradient_gives_zero_cin_not_nan():
    modules, basis = adapters_with_grads()
    for module in modules.values():
        module.delta_s.grad.zero_()
    stats = project_adapter_grads(modules, basis, ProjectionConfig(arm="erase", preserve_magnitude=True))
    assert stats["cin"] == 0.0 and stats["cout"] == 0.0
    assert all(not m.delta_s.grad.isnan().any() for m in modules.values())


def test_basis_must_fit_the_adapter():
    modules, _ = adapters_with_grads()
    with pytest.raises(ValueError, match="does not have"):
        project_adapter_grads(modules, HackBasis({"z": torch.eye(3)}, {"z": torch.ones(3)}), ProjectionConfig())
    with pytest.raises(ValueError, match="rank"):
        project_adapter_grads(modules, HackBasis({"a": torch.eye(3)}, {"a": torch.ones(3)}), ProjectionConfig())


def test_project_update_erases_hack_ward_part_of_the_optimizer_step():
    modules, basis = adapters_with_grads()
    optimizer = torch.optim.AdamW([m.delta_s for m in modules.values()], lr=0.1, weight_decay=0.0)
    before = knob_snapshot(modules)
    optimizer.step()  # descent moves δS against the gradient, i.e. clean-ward on the aligned axis
    for module in modules.values():
        module.delta_s.grad = None
    with torch.no_grad():  # push the update hack-ward along each first axis
        for name in ("a", "b"):
            modules[name].delta_s.add_(basis.V[name][0])
    stats = project_update(modules, basis, ProjectionConfig(arm="route"), before)
    assert stats["update_cin"] > 0 and stats["update_cout"] == pytest.approx(0.0, abs=1e-5)
    for name in ("a", "b"):
        change = modules[name].delta_s.detach() - before[name]
        assert (basis.V[name] @ change).max().item() < 1e-5
        assert (basis.V[name] @ modules[name].delta_s_hack.detach()).max().item() > 0


def test_purge_adam_moments_leaves_no_hack_ward_first_moment():
    from pgrpo.projection import purge_adam_moments

    modules, basis = adapters_with_grads()
    optimizer = torch.optim.AdamW([m.delta_s for m in modules.values()], lr=0.1)
    for name in ("a", "b"):
        modules[name].delta_s.grad = -basis.V[name][0].clone()  # descent moves hack-ward along axis 0
    optimizer.step()
    moments = {n: optimizer.state[modules[n].delta_s]["exp_avg"] for n in ("a", "b")}
    assert any((basis.V[n] @ moments[n]).min() < 0 for n in ("a", "b"))
    purge_adam_moments(optimizer, modules, basis, ProjectionConfig(arm="erase", gate="no_gate"))
    for name in ("a", "b"):
        assert (basis.V[name] @ moments[name]).abs().max().item() < 1e-6

