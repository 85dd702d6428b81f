"""Remove (erase) or park (route) the hack-ward component along V, once per optimizer step, of the knob
gradient, of the update the optimizer made, or of the knobs' position; or discount the advantage of each
rollout whose own gradient is hack-ward (adv_gate), with the same V.

Sign convention: V lives in the *gradient* convention (c = V g > 0: descending g moves hack-ward). A change
of the knobs Δ is written as the gradient that would cause it, −Δ, before it is gated; so ⟨V, δS⟩ > 0 means
the knobs sit *away* from hack along V (`along_v`).

Why the one-sided variant constrains the position: gating each step (relu(V g)) keeps min(c, 0) along V, so
zero-mean noise alone walks δS away from hack by E[relu(c)] ≈ 0.4 σ_c a step, and every restoring step is
gated away (a ratchet). Subtracting that bias would need σ_c per axis and step, which one gradient does not
give. A constraint on where δS is, ⟨V, δS⟩ ≥ 0 (a projection onto a convex set after each step), needs
nothing estimated: inside the half-space every step passes, so noise only reflects off its wall (drift ~ √t,
not t: tests/test_projection.py measures both), and restoring steps are never removed.
"""

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Literal

import torch
from torch import Tensor

from pgrpo.adapter import SVDAdapterLinear
from pgrpo.extraction import HackBasis, cin_null

Arm = Literal["none", "erase", "route", "adv_gate"]
Gate = Literal["one_sided", "no_gate", "reverse"]
Target = Literal["grad", "update", "position"]


@dataclass
class ProjectionConfig:
    """How each step's knob gradient is edited along V (each field's docstring is its `--help`)."""

    arm: Arm = "none"
    """none measures only (vanilla); erase removes the hack-ward part; route removes it and parks it in δS_hack,
    which is zeroed at deployment; adv_gate leaves the gradient's direction alone and scales each rollout's
    advantage by 1 − σ((f − adv_gate_center) / adv_gate_temperature), f the hack-ward fraction of that
    rollout's own gradient (the advantage-level twin of erase, on the same V)."""
    gate: Gate = "no_gate"
    """Which coefficients c = V g of the target are removed: no_gate c (the whole span(V) component; unbiased,
    the default), one_sided relu(c) (only hack-ward), reverse 2c (reflect it). On target grad or update
    one_sided is a biased estimator (a ratchet: each step may only move away from hack along V, so the knobs
    drift by the gradient's noise along V, and the model is damaged); on target position it is the
    half-space constraint ⟨V, δS⟩ ≥ 0, which restoring steps pass."""
    overshoot: float = 1.0
    """Scale of the removed vector."""
    preserve_magnitude: bool = False
    """Rescale the projected gradient g' to ‖g‖."""
    target: Target = "grad"
    """What is projected, once per step: grad, the gradient before the optimizer step; update, the change the
    optimizer made (Adam steps on its moments, not on g); position, the knobs themselves after the step,
    relative to the base (δS = 0), so the constraint holds the place rather than each move. The gradient and
    the optimizer's moments stay raw under update and position. Route needs update or position: the
    training forward (δS + δS_hack) then moves exactly as vanilla's and only the deployed δS differs."""
    purge_adam_moments: bool = False
    """Remove the gated span(V) part of Adam's first moment before each step (not under arm none)."""
    adv_gate_center: float = 0.4
    """adv_gate: the rollout hack fraction at which its advantage is halved (on the embedded default, exploited
    rollouts' own gradients measure about 0.44 and clean ones 0.28; not tuned)."""
    adv_gate_temperature: float = 0.05
    """adv_gate: how sharply the discount turns on around the center."""

    def __post_init__(self) -> None:
        if self.arm not in ("none", "erase", "route", "adv_gate"):
            raise ValueError(f"ProjectionConfig.arm must be 'none', 'erase', 'route' or 'adv_gate', got {self.arm!r}")
        if self.arm == "adv_gate" and (self.target != "grad" or self.purge_adam_moments):
            raise ValueError("ProjectionConfig.arm 'adv_gate' edits advantages, not the gradient or Adam's moments: "
                             "leave target 'grad' and purge_adam_moments false")
        if not self.adv_gate_temperature > 0:
            raise ValueError(f"ProjectionConfig.adv_gate_temperature must be > 0, got {self.adv_gate_temperature}")
        if self.gate not in ("one_sided", "no_gate", "reverse"):
            raise ValueError(f"ProjectionConfig.gate must be 'one_sided', 'no_gate' or 'reverse', got {self.gate!r}")
        if self.target not in ("grad", "update", "position"):
            raise ValueError(f"ProjectionConfig.target must be 'grad', 'update' or 'position', got {self.target!r}")
        if self.preserve_magnitude and self.target == "position":
            raise ValueError("ProjectionConfig.preserve_magnitude rescales a projected gradient or update to its "
                             "norm; on target 'position' it would rescale δS itself: leave it false")
        if self.arm == "route" and self.target == "grad":
            # a gradient parked in δS_hack gets Adam moments of its own: near-full-lr steps along V every step,
            # so the training forward leaves vanilla's path and the deployed model neither hacks nor solves
            raise ValueError("ProjectionConfig.arm 'route' parks the projected update or position in δS_hack, so "
                             "that the training forward moves as vanilla's: set target 'update' or 'position' "
                             "(got 'grad')")
        if not self.overshoot > 0:
            raise ValueError(f"ProjectionConfig.overshoot must be > 0, got {self.overshoot}")


def project_vector(g: Tensor, V: Tensor, cfg: ProjectionConfig) -> tuple[Tensor, Tensor, Tensor]:
    """g (r,), V (k, r) orthonormal rows -> (g' (r,), removed (r,), c (k,)) with g' = g − removed."""
    c = V @ g  # (k,)
    if cfg.gate == "one_sided":
        gated = c.clamp(min=0)
    elif cfg.gate == "no_gate":
        gated = c
    else:
        gated = 2 * c
    removed = cfg.overshoot * (gated @ V)  # (r,)
    g_new = g - removed
    if cfg.preserve_magnitude:
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


def project_adapter_grads(
    modules: Mapping[str, SVDAdapterLinear],
    basis: HackBasis,
    cfg: ProjectionConfig,
    g_student: Mapping[str, Tensor] | None = None,
    g_teacher: Mapping[str, Tensor] | None = None,
) -> dict[str, float | dict[str, float]]:
    """Edit delta_s.grad per cfg.arm (erase), after backward and before the optimizer step.

    Modules without basis rows keep their delta_s.grad. delta_s_hack.grad is set
    to None everywhere, so the optimizer never moves δS_hack on its own (route
    moves it in `project_knobs`). Diagnostics, aggregated over the
    basis modules: cin / cout = hack_fraction of g / g' (under none, the g' that
    erase would apply: a sanity check, ~0 for one_sided), cin_student /
    cin_teacher on the split grads when given, fired = fraction of hack axes with
    c > 0, cin_null / cin_null_student / cin_null_teacher = what cin would be for a random direction with
    the same per-module norms (`cin_null`), cin_per_module = {name: ‖relu(V g)‖ / ‖g‖}.
    """
    _check_basis(modules, basis)
    grads, projected, coeffs = {}, {}, {}
    for name in basis.V:
        grad = modules[name].delta_s.grad
        if grad is None:
            raise ValueError(f"{name}.delta_s.grad is None: call backward before project_adapter_grads")
        grads[name] = grad
        projected[name], _, coeffs[name] = project_vector(grad, basis.V[name].to(grad), cfg)
    scalars = {"cin": hack_fraction(grads, basis), "cout": hack_fraction(projected, basis),
               "cin_null": cin_null(grads, basis)}
    if g_student is not None:
        scalars["cin_student"] = hack_fraction(g_student, basis)
        scalars["cin_null_student"] = cin_null(g_student, basis)
    if g_teacher is not None:
        scalars["cin_teacher"] = hack_fraction(g_teacher, basis)
        scalars["cin_null_teacher"] = cin_null(g_teacher, basis)
    scalars["fired"] = (torch.cat(list(coeffs.values())) > 0).float().mean()
    tiny = torch.finfo(torch.float32).tiny
    per_module = torch.stack([coeffs[n].clamp(min=0).norm() / grads[n].norm().clamp(min=tiny) for n in basis.V])
    # Write only after measuring: grads[name] is the live .grad tensor.
    for name, module in modules.items():
        module.delta_s_hack.grad = None
        if cfg.arm == "erase" and name in projected:
            module.delta_s.grad.copy_(projected[name])
    # One host sync for every number instead of one per module.
    values = torch.cat([torch.stack(list(scalars.values())), per_module]).tolist()
    stats: dict[str, float | dict[str, float]] = dict(zip(scalars, values))
    stats["cin_per_module"] = dict(zip(basis.V, values[len(scalars) :]))
    return stats


def knob_snapshot(modules: Mapping[str, SVDAdapterLinear]) -> dict[str, Tensor]:
    """delta_s values before an optimizer step, for `project_knobs` and `update_hack_fraction`."""
    return {name: m.delta_s.detach().clone() for name, m in modules.items()}


def project_knobs(
    modules: Mapping[str, SVDAdapterLinear],
    basis: HackBasis,
    cfg: ProjectionConfig,
    origin: Mapping[str, Tensor] | None,
) -> None:
    """Project δS − origin along V, after the optimizer step: the step's update (origin: δS before it) or the
    position (origin None: the base, δS = 0).

    The change is written as the gradient that would cause it, −(δS − origin), and gated as a gradient is
    (see the module's sign convention). erase sets δS = origin + the projected change; route also adds what
    was removed to δS_hack, so δS + δS_hack, the training forward's knob, is exactly what the optimizer made.
    """
    _check_basis(modules, basis)
    if cfg.arm not in ("erase", "route"):
        return
    with torch.no_grad():
        for name, rows in basis.V.items():
            knob = modules[name].delta_s
            start = origin[name].to(knob) if origin is not None else torch.zeros_like(knob)
            made = knob.detach().clone()
            kept, _, _ = project_vector(start - made, rows.to(knob), cfg)
            knob.copy_(start - kept)
            if cfg.arm == "route":
                modules[name].delta_s_hack.add_(made - knob)


def update_hack_fraction(modules: Mapping[str, SVDAdapterLinear], basis: HackBasis,
                         before: Mapping[str, Tensor]) -> float:
    """The hack-ward fraction of the change δS − before the step made (after any projection of it): the cout
    of the update actually applied."""
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


def purge_adam_moments(optimizer: torch.optim.Optimizer, modules: Mapping[str, SVDAdapterLinear],
                       basis: HackBasis, cfg: ProjectionConfig) -> None:
    """Remove the gated span(V) component from Adam's first moment of each delta_s (before the step).

    The first moment is an average of gradients, so it is gated in the gradient convention as g is.
    Under arm none nothing is touched (the vanilla arm only measures), and the purged moment is never
    rescaled: preserve_magnitude is about the gradient's norm, and a rescaled moment would re-grow the
    clean directions by the size of what was purged. Only the first moment lives in δS space; the second
    is elementwise, so an update can still lean hack-ward after this (proj/cout_update measures it).
    """
    if cfg.arm == "none":
        return
    cfg = replace(cfg, preserve_magnitude=False)
    with torch.no_grad():
        for name, rows in basis.V.items():
            state = optimizer.state.get(modules[name].delta_s, {})
            if "exp_avg" in state:
                m = state["exp_avg"]
                purged, _, _ = project_vector(m.float(), rows.to(m.device, torch.float32), cfg)
                m.copy_(purged)


def rollout_hack_fraction(per_row: Mapping[str, Tensor], basis: HackBasis) -> Tensor:
    """Each rollout's own hack fraction ‖relu(V g_b)‖/‖g_b‖ over the basis modules: (B,)."""
    hack_sq = total_sq = 0
    for name, rows in basis.V.items():
        g = per_row[name].float()  # (B, r)
        hack_sq = hack_sq + (g @ rows.to(g).T).clamp(min=0).pow(2).sum(1)  # (B,)
        total_sq = total_sq + g.pow(2).sum(1)
    return (hack_sq / total_sq.clamp(min=torch.finfo(torch.float32).tiny)).sqrt()


def advantage_gate(fraction: Tensor, cfg: ProjectionConfig) -> Tensor:
    """adv_gate's factor on each rollout's advantage, 1 − σ((f − center) / temperature), from its hack fraction f."""
    return 1 - torch.sigmoid((fraction - cfg.adv_gate_center) / cfg.adv_gate_temperature)


def _check_basis(modules: Mapping[str, SVDAdapterLinear], basis: HackBasis) -> None:
    if not basis.V:
        raise ValueError("basis has no modules (all rows dropped by tau_axis or the noise floor?)")
    unknown = sorted(basis.V.keys() - modules.keys())
    if unknown:
        raise ValueError(f"basis names modules the adapter does not have: {unknown[:5]}")
    for name, rows in basis.V.items():
        if rows.shape[1] != modules[name].rank:
            raise ValueError(f"{name}: basis rank {rows.shape[1]} != adapter rank {modules[name].rank}")

