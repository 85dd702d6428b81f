import math
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from pgrpo.model.adapter import SVDAdapterLinear
from pgrpo.directions.extraction import HackBasis, hackward_share_null
from pgrpo.step.optim import OptimConfig, build_optimizer
from pgrpo.interventions import Erase, Route, Vanilla
from pgrpo.step.projection import (
    hack_fraction,
    along_v,
    grad_hack_fraction,
    knob_snapshot,
    measure_grads,
    project_knobs,
    project_vector,
    purge_adam_moments,
    update_hack_fraction,
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
    g_new, removed, c = project_vector(g, V, gate="one_sided")
    assert in_span(removed, V)
    torch.testing.assert_close(g_new + removed, g)
    assert (V @ g_new).max().item() < 1e-5
    torch.testing.assert_close((V @ g_new)[1], c[1])  # the clean-ward coefficient is kept
    basis = HackBasis({"m": V}, {"m": torch.ones(3)})
    torch.testing.assert_close(removed.norm() / g.norm(), hack_fraction({"m": g}, basis))


def test_no_gate_leaves_no_component_in_span():
    V = orthonormal_rows(3, 10)
    g_new, removed, _ = project_vector(gradient_with_mixed_signs(V), V, gate="no_gate")
    assert in_span(removed, V)
    assert (V @ g_new).abs().max().item() < 1e-5


def test_reverse_flips_the_span_component():
    V = orthonormal_rows(3, 10)
    g = gradient_with_mixed_signs(V)
    g_new, _, c = project_vector(g, V, gate="reverse")
    torch.testing.assert_close(V @ g_new, -c, atol=1e-5, rtol=0)


def test_overshoot_scales_removed():
    V = orthonormal_rows(3, 10)
    g = gradient_with_mixed_signs(V)
    _, removed_once, _ = project_vector(g, V)
    _, removed_more, _ = project_vector(g, V, overshoot=1.5)
    torch.testing.assert_close(removed_more, 1.5 * removed_once)


def test_preserve_magnitude_keeps_norm_and_direction():
    V = orthonormal_rows(3, 10)
    g = gradient_with_mixed_signs(V)
    plain, _, _ = project_vector(g, V)
    kept, _, _ = project_vector(g, V, preserve_magnitude=True)
    torch.testing.assert_close(kept.norm(), g.norm())
    torch.testing.assert_close(kept / kept.norm(), plain / plain.norm())


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


def test_measuring_leaves_grads_untouched():
    modules, basis = adapters_with_grads()
    before = {name: m.delta_s.grad.clone() for name, m in modules.items()}
    stats = measure_grads(modules, basis)
    for name, module in modules.items():
        assert torch.equal(module.delta_s.grad, before[name])
    hack_sq = sum((basis.V[n] @ before[n]).clamp(min=0).pow(2).sum() for n in ("a", "b"))
    total_sq = before["a"].pow(2).sum() + before["b"].pow(2).sum()
    assert stats["hackward_share/gradient"] == pytest.approx(math.sqrt(hack_sq / total_sq))
    assert grad_hack_fraction(modules, basis) == pytest.approx(stats["hackward_share/gradient"])  # nothing edited


def test_diagnostics_relu_before_aggregating_and_null():
    modules, basis = adapters_with_grads()
    teacher = {name: basis.V[name][0].clone() for name in ("a", "b")}  # purely hack-ward
    student = {name: -g for name, g in teacher.items()}  # purely clean-ward: relu leaves nothing
    stats = measure_grads(modules, basis, g_student=student, g_teacher=teacher)
    assert stats["hackward_share/student"] == 0.0
    assert stats["hackward_share/teacher"] == pytest.approx(1.0)
    assert stats["basis/axes_pushed_hackward"] == 0.5  # per module one axis at +2, one at −1.5
    g = {name: modules[name].delta_s.grad for name in ("a", "b")}
    share_a = g["a"].pow(2).sum() / (g["a"].pow(2).sum() + g["b"].pow(2).sum())
    assert stats["hackward_share/gradient_null"] == pytest.approx(math.sqrt(share_a * 2 / 20 + (1 - share_a) * 2 / 12))
    assert stats["hackward_share/teacher_null"] == pytest.approx(math.sqrt(0.5 * 2 / 20 + 0.5 * 2 / 12))
    assert stats["hackward_share/student_null"] == stats["hackward_share/teacher_null"]


def test_zero_gradient_gives_a_zero_hackward_share_not_nan():
    modules, basis = adapters_with_grads()
    for module in modules.values():
        module.delta_s.grad.zero_()
    stats = measure_grads(modules, basis)
    Erase(preserve_magnitude=True).gradient(SimpleNamespace(adapter=modules, basis=basis))
    assert stats["hackward_share/gradient"] == 0.0 and grad_hack_fraction(modules, basis) == 0.0
    assert all(not m.delta_s.grad.isnan().any() for m in modules.values())


def test_basis_must_fit_the_adapter():
    modules, _ = adapters_with_grads()
    with pytest.raises(ValueError, match="does not have"):
        measure_grads(modules, HackBasis({"z": torch.eye(3)}, {"z": torch.ones(3)}))
    with pytest.raises(ValueError, match="rank"):
        measure_grads(modules, HackBasis({"a": torch.eye(3)}, {"a": torch.ones(3)}))


def sgd_step_on(modules: dict[str, SVDAdapterLinear], grads: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """One plain SGD step (lr 1) on the given gradients; returns the knobs as they were before it."""
    before = knob_snapshot(modules)
    optimizer = torch.optim.SGD([m.delta_s for m in modules.values()], lr=1.0)
    for name, module in modules.items():
        module.delta_s.grad = grads[name].clone() if name in grads else torch.zeros_like(module.delta_s)
    optimizer.step()
    return before


def test_descending_a_hack_ward_gradient_is_a_hack_ward_update_and_erase_removes_it():
    # V g > 0 means descending g moves hack-ward: an SGD step on g = V[0] is the purely hack-ward update
    # Δ = −V[0]; its hack-ward fraction is 1, and erasing the update leaves no change at all.
    modules, basis = adapters_with_grads()
    before = sgd_step_on(modules, {name: basis.V[name][0] for name in basis.V})
    assert update_hack_fraction(modules, basis, before) == pytest.approx(1.0)
    project_knobs(modules, basis, before)
    for name in basis.V:
        torch.testing.assert_close(modules[name].delta_s.detach(), before[name])
    # with a part outside span(V) as well, what erase leaves of the update has no hack-ward fraction
    modules, basis = adapters_with_grads()
    orthogonal = {name: torch.linalg.svd(rows)[2][-1] for name, rows in basis.V.items()}  # ⊥ every row of V
    before = sgd_step_on(modules, {name: basis.V[name][0] + orthogonal[name] for name in basis.V})
    assert update_hack_fraction(modules, basis, before) == pytest.approx(math.sqrt(0.5))
    project_knobs(modules, basis, before)
    assert update_hack_fraction(modules, basis, before) == pytest.approx(0.0, abs=1e-6)
    for name in basis.V:
        torch.testing.assert_close(modules[name].delta_s.detach() - before[name], -orthogonal[name])


def test_erasing_the_update_keeps_its_clean_ward_part():
    # descending −V[0] moves clean-ward (Δ = +V[0]): the update is not hack-ward and erase keeps it whole
    modules, basis = adapters_with_grads()
    before = sgd_step_on(modules, {name: -basis.V[name][0] for name in basis.V})
    assert update_hack_fraction(modules, basis, before) == pytest.approx(0.0, abs=1e-6)
    project_knobs(modules, basis, before, gate="one_sided")
    for name in basis.V:
        torch.testing.assert_close(modules[name].delta_s.detach(), before[name] + basis.V[name][0])


def test_route_parks_the_hack_ward_update_in_the_quarantine():
    modules, basis = adapters_with_grads()
    grads = {name: gradient_with_mixed_signs(rows) for name, rows in basis.V.items()}
    before = sgd_step_on(modules, grads)
    assert update_hack_fraction(modules, basis, before) > 0
    project_knobs(modules, basis, before, park=True, gate="one_sided")
    assert update_hack_fraction(modules, basis, before) == pytest.approx(0.0, abs=1e-5)
    for name in basis.V:
        change = modules[name].delta_s.detach() - before[name]
        parked = modules[name].delta_s_hack.detach()
        assert (basis.V[name] @ -change).max().item() < 1e-5  # nothing hack-ward is left in δS
        torch.testing.assert_close(change + parked, -grads[name])  # the whole step, split in two
        torch.testing.assert_close(parked, -2.0 * basis.V[name][0])  # exactly the hack-ward axis's step


def test_purge_adam_moments_leaves_no_span_component_in_the_first_moment():
    modules, basis = adapters_with_grads()
    optimizer = torch.optim.AdamW([m.delta_s for m in modules.values()], lr=0.1)
    for name in ("a", "b"):
        modules[name].delta_s.grad = basis.V[name][0].clone()  # descent moves hack-ward along axis 0
    optimizer.step()
    moments = {n: optimizer.state[modules[n].delta_s]["exp_avg"] for n in ("a", "b")}
    assert all((basis.V[n] @ moments[n]).max() > 0 for n in ("a", "b"))
    purge_adam_moments(optimizer, modules, basis, gate="no_gate")
    for name in ("a", "b"):
        assert (basis.V[name] @ moments[name]).abs().max().item() < 1e-6


def adam_with_moments(modules, basis) -> tuple[torch.optim.Optimizer, dict[str, torch.Tensor]]:
    optimizer = torch.optim.AdamW([m.delta_s for m in modules.values()], lr=0.1)
    for name, module in modules.items():
        module.delta_s.grad = gradient_with_mixed_signs(basis.V[name]) if name in basis.V else torch.randn(4)
    optimizer.step()
    return optimizer, {n: optimizer.state[m.delta_s]["exp_avg"].clone() for n, m in modules.items()}


def test_purge_adam_moments_is_erases_only_and_vanilla_leaves_the_moments():
    modules, basis = adapters_with_grads()
    optimizer, moments = adam_with_moments(modules, basis)
    step = SimpleNamespace(adapter=modules, basis=basis)
    Vanilla().before_update(step, optimizer)
    Erase().before_update(step, optimizer)  # purge_adam_moments off by default
    for name, module in modules.items():
        assert torch.equal(optimizer.state[module.delta_s]["exp_avg"], moments[name])


def test_purge_adam_moments_does_not_rescale_the_purged_moment():
    modules, basis = adapters_with_grads()
    optimizer, moments = adam_with_moments(modules, basis)
    Erase(preserve_magnitude=True, purge_adam_moments=True).before_update(SimpleNamespace(adapter=modules, basis=basis),
                                                                          optimizer)
    for name in basis.V:
        expected, _, _ = project_vector(moments[name], basis.V[name])
        torch.testing.assert_close(optimizer.state[modules[name].delta_s]["exp_avg"], expected)


def test_the_hackward_share_null_is_what_a_random_gradient_gives():
    # module a: k=2 of r=10; module b: k=2 of r=6. Over many random gradients whose norms put 9/10 of ‖g‖²
    # in a, the mean of the share² is Σ w k/2r = 0.9·2/20 + 0.1·2/12 (the unweighted √(Σk/Σr) would say 4/16).
    _, basis = adapters_with_grads()
    gen = torch.Generator().manual_seed(0)
    g_a, g_b = torch.randn(20000, 10, generator=gen), torch.randn(20000, 6, generator=gen)
    g_a = g_a / g_a.norm(dim=1, keepdim=True) * 3.0
    g_b = g_b / g_b.norm(dim=1, keepdim=True)
    relu_sq = sum((g @ basis.V[n].T).clamp(min=0).pow(2).sum(1) for n, g in (("a", g_a), ("b", g_b)))
    measured = (relu_sq / 10.0).mean().sqrt().item()
    expected = math.sqrt(0.9 * 2 / 20 + 0.1 * 2 / 12)
    assert measured == pytest.approx(expected, rel=0.02)
    null = hackward_share_null({"a": g_a, "b": g_b}, basis)
    torch.testing.assert_close(null, torch.full((20000,), expected), rtol=1e-5, atol=0)


# -- drift along V under pure noise, and the unbiased projections ------------------------------------------

def noise_run(target: str, gate: str, optimizer: str, steps: int = 200, arm: str = "erase",
              pull: float = 0.0) -> tuple[dict[str, SVDAdapterLinear], list[float]]:
    """`steps` optimizer steps on zero-mean noise gradients (plus `pull` × the training knob δS + δS_hack, a
    restoring force towards the base), projected per (target, gate): ⟨V, δS⟩ summed over axes after each step."""
    torch.manual_seed(0)
    modules = {"m": SVDAdapterLinear(nn.Linear(32, 32))}
    basis = HackBasis({"m": orthonormal_rows(4, 32, seed=5)}, {"m": torch.ones(4)})
    intervention = {"none": Vanilla, "erase": Erase, "route": Route}[arm]
    intervention = intervention() if arm == "none" else intervention(gate=gate, target=target)
    step = SimpleNamespace(adapter=modules, basis=basis)
    opt = build_optimizer([m.delta_s for m in modules.values()], [m.delta_s_hack for m in modules.values()],
                          OptimConfig(name=optimizer, lr=1e-2, momentum=0.0))
    noise = torch.Generator().manual_seed(1)
    drift = []
    for _ in range(steps):
        m = modules["m"]
        m.delta_s.grad = torch.randn(32, generator=noise) + pull * (m.delta_s + m.delta_s_hack).detach()
        m.delta_s_hack.grad = None  # as the step leaves it: only an intervention's update moves δS_hack
        intervention.gradient(step)
        before = knob_snapshot(modules)
        opt.step()
        intervention.update(step, before)
        drift.append(along_v(modules, basis)["adapter/delta_s_along_v"])
    return modules, drift


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_the_one_sided_gradient_gate_drifts_along_v_linearly_under_pure_noise(optimizer):
    _, one_sided = noise_run("grad", "one_sided", optimizer)
    _, no_gate = noise_run("grad", "no_gate", optimizer)
    # the ratchet: every step may only move away from hack along V, so the noise alone walks δS that way
    assert one_sided[99] > 0 and one_sided[199] / one_sided[99] == pytest.approx(2.0, abs=0.3)
    assert all(b >= a - 1e-6 for a, b in zip(one_sided, one_sided[1:])) or optimizer == "adamw"
    assert abs(no_gate[199]) < 0.1 * one_sided[199]


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_the_position_gate_keeps_the_half_space_without_the_ratchet(optimizer):
    modules, position = noise_run("position", "one_sided", optimizer)
    _, one_sided = noise_run("grad", "one_sided", optimizer)
    V = orthonormal_rows(4, 32, seed=5)
    assert (V @ modules["m"].delta_s.detach()).min() >= -1e-6  # never hack-ward of the base along any axis
    # a reflected random walk grows as √t, the ratchet as t
    assert position[199] < 0.35 * one_sided[199]


def test_a_restoring_pull_undoes_position_drift_but_not_the_ratchet():
    # with a pull towards the base, the position gate settles near it; the one-sided gradient gate throws
    # away every restoring step along V that points hack-ward, and keeps drifting
    _, position = noise_run("position", "one_sided", "sgd", steps=400, pull=0.5)
    _, one_sided = noise_run("grad", "one_sided", "sgd", steps=400, pull=0.5)
    assert position[-1] < 0.25 * one_sided[-1]


@pytest.mark.parametrize("target", ["update", "position"])
def test_route_moves_the_training_knob_exactly_as_vanilla_moves_its_own(target):
    vanilla, _ = noise_run("grad", "one_sided", "adamw", steps=50, arm="none", pull=0.5)
    route, _ = noise_run(target, "one_sided", "adamw", steps=50, arm="route", pull=0.5)
    v, r = vanilla["m"], route["m"]
    assert r.delta_s_hack.detach().norm() > 0.01  # something was parked
    torch.testing.assert_close(r.delta_s.detach() + r.delta_s_hack.detach(), v.delta_s.detach(), atol=1e-5, rtol=0)


def test_the_removed_share_is_the_norm_an_edit_took_away_over_every_module():
    from pgrpo.step.projection import removed_share

    before = {"a": torch.tensor([3.0, 0.0]), "b": torch.tensor([0.0, 4.0])}
    assert removed_share(before, before) == 0.0
    assert removed_share(before, {"a": torch.tensor([3.0, 0.0]), "b": torch.zeros(2)}) == pytest.approx(0.8)
    assert removed_share({"a": torch.zeros(2)}, {"a": torch.ones(2)}) == 0.0  # nothing to remove from
