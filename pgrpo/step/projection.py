"""The arithmetic of V on the knobs: measure how hack-ward a gradient is (its hack-ward share, for every
intervention), remove (erase) or park (route) its component along V in a gradient, an update or the knobs'
position, and each rollout's own hack fraction (adv_gate). Which intervention applies what lives in
pgrpo/interventions/.

Sign convention: V lives in the *gradient* convention (c = V g > 0: descending g moves hack-ward). A change
of the knobs Δ is written as the gradient that would cause it, −Δ, before it is gated; so ⟨V, δS⟩ > 0 means
the knobs sit *away* from hack along V (`along_v`).

Why the one-sided variant constrains the position: gating each step (relu(V g)) keeps min(c, 0) along V, so
zero-mean noise alone walks δS away from hack by E[relu(c)] ≈ 0.4 σ_c a step, and every restoring step is
gated away (a ratchet). Subtracting that bias would need σ_c per axis and step, which one gradient does not
give. A constraint on where δS is, ⟨V, δS⟩ ≥ 0 (a projection onto a convex set after each step), needs
nothing estimated: inside the half-space every step passes, so noise only reflects off its wall (drift ~ √t,
not t: tests/step/test_projection.py measures both), and restoring steps are never removed.
"""

from collections.abc import Mapping
from typing import Literal

import torch
from torch import Tensor

from pgrpo.model.adapter import SVDAdapterLinear
from pgrpo.directions.extraction import HackBasis, hackward_share_null

Gate = Literal["one_sided", "no_gate", "reverse"]
Target = Literal["grad", "update", "position"]


def project_vector(g: Tensor, V: Tensor, gate: Gate = "no_gate", overshoot: float = 1.0,
                   preserve_magnitude: bool = False) -> tuple[Tensor, Tensor, Tensor]:
    """g (r,), V (k, r) orthonormal rows -> (g' (r,), removed (r,), c (k,)) with g' = g − removed.

    gate: which coefficients c = V g are removed: no_gate c, one_sided relu(c), reverse 2c (Erase's docstring
    says when each is biased); overshoot scales the removed vector; preserve_magnitude rescales g' to ‖g‖."""
    c = V @ g  # (k,)
    if gate == "one_sided":
        gated = c.clamp(min=0)
    elif gate == "no_gate":
        gated = c
    else:
        gated = 2 * c
    removed = overshoot * (gated @ V)  # (r,)
    g_new = g - removed
    if preserve_magnitude:
        g_new = g_new * (g.norm() / g_new.norm().clamp(min=torch.finfo(g_new.dtype).tiny))
    return g_new, removed, c


def hack_fraction(vectors: Mapping[str, Tensor], basis: HackBasis) -> Tensor:
    """sqrt(Σ_m ‖relu(V_m g_m)‖²) / sqrt(Σ_m ‖g_m‖²) over the basis modules (relu before aggregating; 0 if g = 0)."""
    hack_sq, total_sq = [], []
    for name, rows in basis.V.items():
        g = vectors[name].float()
        hack_sq.append((rows.to(g) @ g).clamp(min=0).pow(2).sum())
        total_sq.append(g.pow(2).sum())
    return (torch.stack(hack_sq).sum() / torch.stack(total_sq).sum().clamp(min=torch.finfo(torch.float32).tiny)).sqrt()


def measure_grads(
    modules: Mapping[str, SVDAdapterLinear],
    basis: HackBasis,
    g_student: Mapping[str, Tensor] | None = None,
    g_teacher: Mapping[str, Tensor] | None = None,
) -> dict[str, float]:
    """How hack-ward each step's knob gradient is, measured after backward for every intervention, as tags.

    Over the basis modules: `hackward_share/gradient`, the hack_fraction of delta_s.grad, and the same of the
    student's and the teacher rows' gradients when given (`hackward_share/student`, `.../teacher`), each beside
    its `_null`, what a random direction with the same per-module norms would give (`hackward_share_null`);
    `basis/axes_pushed_hackward`, the share of V's axes with c > 0. Modules without basis rows are not read.
    """
    _check_basis(modules, basis)
    grads, coeffs = {}, {}
    for name in basis.V:
        grad = modules[name].delta_s.grad
        if grad is None:
            raise ValueError(f"{name}.delta_s.grad is None: call backward before measure_grads")
        grads[name] = grad
        coeffs[name] = basis.V[name].to(grad) @ grad
    scalars = {"hackward_share/gradient": hack_fraction(grads, basis),
               "hackward_share/gradient_null": hackward_share_null(grads, basis)}
    for rows, g in (("student", g_student), ("teacher", g_teacher)):
        if g is not None:
            scalars[f"hackward_share/{rows}"] = hack_fraction(g, basis)
            scalars[f"hackward_share/{rows}_null"] = hackward_share_null(g, basis)
    scalars["basis/axes_pushed_hackward"] = (torch.cat(list(coeffs.values())) > 0).float().mean()
    # One host sync for every number instead of one per number.
    return dict(zip(scalars, torch.stack(list(scalars.values())).tolist()))


def grad_hack_fraction(modules: Mapping[str, SVDAdapterLinear], basis: HackBasis) -> float:
    """hack_fraction of delta_s.grad as it is now: measured after the intervention's gradient hook, it is the hack-ward
    share of the gradient the optimizer gets (`hackward_share/edited_gradient`)."""
    return float(hack_fraction({name: modules[name].delta_s.grad for name in basis.V}, basis))


def knob_snapshot(modules: Mapping[str, SVDAdapterLinear]) -> dict[str, Tensor]:
    """delta_s values before an optimizer step, for `project_knobs` and `update_hack_fraction`."""
    return {name: m.delta_s.detach().clone() for name, m in modules.items()}


def project_knobs(
    modules: Mapping[str, SVDAdapterLinear],
    basis: HackBasis,
    origin: Mapping[str, Tensor] | None,
    park: bool = False,
    **gating,
) -> None:
    """Project δS − origin along V, after the optimizer step: the step's update (origin: δS before it) or the
    position (origin None: the base, δS = 0).

    The change is written as the gradient that would cause it, −(δS − origin), and gated as a gradient is
    (see the module's sign convention), `gating` as project_vector's. δS becomes origin + the projected change;
    with park (route) what was removed is added to δS_hack, so δS + δS_hack, the training forward's knob, is
    exactly what the optimizer made.
    """
    _check_basis(modules, basis)
    with torch.no_grad():
        for name, rows in basis.V.items():
            knob = modules[name].delta_s
            start = origin[name].to(knob) if origin is not None else torch.zeros_like(knob)
            made = knob.detach().clone()
            kept, _, _ = project_vector(start - made, rows.to(knob), **gating)
            knob.copy_(start - kept)
            if park:
                modules[name].delta_s_hack.add_(made - knob)


def removed_share(before: Mapping[str, Tensor], after: Mapping[str, Tensor]) -> float:
    """‖before − after‖ / ‖before‖ over every module together: the share of a gradient's (or an update's) norm
    that an edit took away (0 when `before` is zero)."""
    with torch.no_grad():
        names = sorted(before)
        b = torch.cat([before[n].detach().float().flatten() for n in names])
        a = torch.cat([after[n].detach().float().flatten().to(b.device) for n in names])
        norm = b.norm()
        return float((b - a).norm() / norm) if norm > 0 else 0.0


def update_hack_fraction(modules: Mapping[str, SVDAdapterLinear], basis: HackBasis,
                         before: Mapping[str, Tensor]) -> float:
    """The hack-ward fraction of the change δS − before the step made (after any projection of it): the
    hack-ward share of the update actually applied (`hackward_share/update`)."""
    with torch.no_grad():
        descent = {name: before[name].to(modules[name].delta_s) - modules[name].delta_s.detach().float()
                   for name in basis.V}
        return float(hack_fraction(descent, basis))


def along_v(modules: Mapping[str, SVDAdapterLinear], basis: HackBasis) -> dict[str, float]:
    """Where the knobs sit along V: for δS and δS_hack, Σ_m Σ_i ⟨V_mi, δS_m⟩ (signed; > 0 is away from hack)
    and ‖(V_m δS_m)_m‖ / ‖(δS_m)_m‖ over the basis modules (the share of the knobs inside span(V)).

    The one-sided gradient gate shows here first: under it δS drifts along V, away from hack, by the
    gradient's noise, long before the hack or solve curves move.
    """
    tiny = torch.finfo(torch.float32).tiny
    stats = {}
    with torch.no_grad():
        for knob in ("delta_s", "delta_s_hack"):
            coeffs = [basis.V[n].to(getattr(modules[n], knob)) @ getattr(modules[n], knob).detach().float()
                      for n in basis.V]
            total = torch.cat([getattr(modules[n], knob).detach().float().flatten() for n in basis.V]).norm()
            c = torch.cat(coeffs)
            signed, share = torch.stack([c.sum(), c.norm() / total.clamp(min=tiny)]).tolist()
            stats[f"adapter/{knob}_along_v"] = signed
            stats[f"adapter/{knob}_along_v_share"] = share
    return stats


def knob_stats(modules: Mapping[str, SVDAdapterLinear], basis: HackBasis) -> dict[str, float]:
    """‖δS‖, ‖δS_hack‖ and where both sit along V (`along_v`): the drift a biased projection shows first."""
    ds = torch.cat([m.delta_s.detach().flatten() for m in modules.values()])
    dh = torch.cat([m.delta_s_hack.detach().flatten() for m in modules.values()])
    return {"adapter/delta_s_norm": float(ds.norm()), "adapter/delta_s_hack_norm": float(dh.norm()),
            **along_v(modules, basis)}


def purge_adam_moments(optimizer: torch.optim.Optimizer, modules: Mapping[str, SVDAdapterLinear],
                       basis: HackBasis, gate: Gate = "no_gate", overshoot: float = 1.0) -> None:
    """Remove the gated span(V) component from Adam's first moment of each delta_s (before the step).

    The first moment is an average of gradients, so it is gated in the gradient convention as g is.
    The purged moment is never rescaled: preserve_magnitude is about the gradient's norm, and a rescaled moment would
    re-grow the clean directions by the size of what was purged. Only the first moment lives in δS space; the second
    is elementwise, so an update can still lean hack-ward after this (hackward_share/update measures it).
    """
    with torch.no_grad():
        for name, rows in basis.V.items():
            state = optimizer.state.get(modules[name].delta_s, {})
            if "exp_avg" in state:
                m = state["exp_avg"]
                purged, _, _ = project_vector(m.float(), rows.to(m.device, torch.float32), gate, overshoot)
                m.copy_(purged)


def rollout_hack_fraction(per_row: Mapping[str, Tensor], basis: HackBasis) -> Tensor:
    """Each rollout's own hack fraction ‖relu(V g_b)‖/‖g_b‖ over the basis modules: (B,)."""
    hack_sq = total_sq = 0
    for name, rows in basis.V.items():
        g = per_row[name].float()  # (B, r)
        hack_sq = hack_sq + (g @ rows.to(g).T).clamp(min=0).pow(2).sum(1)  # (B,)
        total_sq = total_sq + g.pow(2).sum(1)
    return (hack_sq / total_sq.clamp(min=torch.finfo(torch.float32).tiny)).sqrt()


def advantage_gate(fraction: Tensor, center: float, temperature: float) -> Tensor:
    """adv_gate's factor on each rollout's advantage, 1 − σ((f − center) / temperature), from its hack fraction f."""
    return 1 - torch.sigmoid((fraction - center) / temperature)


def _check_basis(modules: Mapping[str, SVDAdapterLinear], basis: HackBasis) -> None:
    if not basis.V:
        raise ValueError("basis has no modules (all rows dropped by tau_axis or the noise floor?)")
    unknown = sorted(basis.V.keys() - modules.keys())
    if unknown:
        raise ValueError(f"basis names modules the adapter does not have: {unknown[:5]}")
    for name, rows in basis.V.items():
        if rows.shape[1] != modules[name].rank:
            raise ValueError(f"{name}: basis rank {rows.shape[1]} != adapter rank {modules[name].rank}")

