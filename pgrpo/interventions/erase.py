"""Erase: each step loses the component along V of its gradient, of its update, or of the knobs' position.

Sign convention and why the one-sided gate is only safe on the position: pgrpo/step/projection.py. Why the default
gate is unbiased: docs/design.md#why-the-default-gate-is-unbiased.

Its random-V placebo is matched in strength, not in k: a random V removes far less of a gradient than the real
one (on the embedded default 0.20 of its norm against 0.35), so at the real V's k it would be a weaker edit, and
"the real V beats it" could mean only "more is removed". At train start the placebo takes as many random axes as
make it remove the real V's share of the base policy's first step (pgrpo/directions/calibration.py).
"""

import math

import torch
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch import Tensor

from pgrpo.directions.calibration import base_gradient, bisect
from pgrpo.directions.extraction import HackBasis, random_basis_like
from pgrpo.interventions.base import RunView, run_seed
from pgrpo.interventions.reads_v import ReadsV, Source
from pgrpo.step.optim import first_update
from pgrpo.step.projection import Gate, Target, project_knobs, project_vector, purge_adam_moments, removed_share


class Erase(ReadsV):
    """Erase: remove the (gated) component along V of the gradient, the update or the knobs' position."""

    parks = False
    """Whether what is removed from δS is added to δS_hack (Route) rather than dropped."""

    def __init__(self, gate: Gate = "no_gate", overshoot: float = 1.0, preserve_magnitude: bool = False,
                 target: Target = "grad", purge_adam_moments: bool = False, v: Source = "real",
                 v_seed: int | None = None, yoked_to: str | None = None):
        """
        Args:
            gate: which coefficients c = V g of the target are removed: no_gate c (the whole span(V) component;
                unbiased, the default), one_sided relu(c) (only hack-ward), reverse 2c (reflect it). On target
                grad or update one_sided is a biased estimator (a ratchet: each step may only move away from hack
                along V, so the knobs drift by the gradient's noise along V, and the model is damaged); on target
                position it is the half-space constraint ⟨V, δS⟩ ≥ 0, which restoring steps pass.
            overshoot: scale of the removed vector.
            preserve_magnitude: rescale the projected gradient or update to its norm before the projection.
            target: what is projected, once per step: grad, the gradient before the optimizer step; update, the
                change the optimizer made (Adam steps on its moments, not on g); position, the knobs themselves
                after the step, relative to the base (δS = 0), so the constraint holds the place rather than each
                move. The gradient and the optimizer's moments stay raw under update and position.
            purge_adam_moments: remove the gated span(V) part of Adam's first moment before each step.
            v: the V it reads: real, or a negative control: random (as many random axes as remove the real V's
                share at train start), shuffled | nonhack (matched in k).
            v_seed: seed of the random control (None: the run's seed_everything).
            yoked_to: a placebo's method run at the same seed, whose share of the gradient (or of the update) it
                removes step by step, its own projection scaled to it (pgrpo/interventions/yoke.py); None: matched
                at train start.
        """
        super().__init__(v, v_seed, yoked_to)
        self._first_step: dict[str, Tensor] | None = None  # what the projection acts on at train start
        if gate not in ("one_sided", "no_gate", "reverse"):
            raise ValueError(f"gate={gate!r}: expected one_sided, no_gate or reverse")
        if target not in ("grad", "update", "position"):
            raise ValueError(f"target={target!r}: expected grad, update or position")
        if preserve_magnitude and target == "position":
            raise ValueError("preserve_magnitude rescales a projected gradient or update to its norm; on target "
                             "'position' it would rescale δS itself: leave it false")
        if not overshoot > 0:
            raise ValueError(f"overshoot={overshoot}: must be > 0")
        if preserve_magnitude and yoked_to is not None:
            raise ValueError("preserve_magnitude rescales what the projection keeps, so the share it removes is not "
                             "proportional to its scale, which a yoked placebo sets: leave it false, or yoked_to unset")
        self.gate = gate
        self.overshoot = overshoot
        self.preserve_magnitude = preserve_magnitude
        self.target = target
        self.purge_adam_moments = purge_adam_moments

    @property
    def gating(self) -> dict:
        """project_vector's settings."""
        return {"gate": self.gate, "overshoot": self.overshoot, "preserve_magnitude": self.preserve_magnitude}

    def control(self, module: RunView, real: HackBasis) -> HackBasis:
        """A random V that removes as much of the base policy's first step as the real V (shuffled and nonhack are
        matched in k)."""
        if self.v != "random":
            return super().control(module, real)
        first, seed = self.first_step(module), run_seed(self.v_seed)
        if not any(g.any() for g in first.values()):
            rank_zero_warn("erase placebo: no base rollout carried an advantage (every group's rewards were equal), so "
                           "its strength was not measured: the random V keeps the real V's k")
            return random_basis_like(real, seed)
        target = self.removed(first, real)
        largest = max(rows.shape[1] for rows in real.V.values())  # every module at its full rank
        scale = bisect(lambda s: self.removed(first, random_basis_like(real, seed, s)), target, 0.0, largest, True)
        rank_zero_info(f"erase placebo: {scale:.2f}x the real V's axes remove {target:.3f} of the base policy's first "
                       f"step, as the real V does")
        return random_basis_like(real, seed, scale)

    def prepare(self, module: RunView) -> None:
        """Log intervention/start_rate: the share of the base policy's first step (its gradient, or the update
        the optimizer makes from it) that the V in use removes."""
        first, self._first_step = self._first_step or self.first_step(module), None
        measured = any(g.any() for g in first.values())
        module.log_at_start({"intervention/start_rate": self.removed(first, module.basis) if measured else math.nan})

    def first_step(self, module: RunView) -> dict[str, Tensor]:
        """What the projection acts on at the first step, on the base policy's rollouts: their gradient, or under
        target update or position the first update the optimizer makes from it (kept for `prepare`)."""
        grad = base_gradient(module)
        self._first_step = (grad if self.target == "grad"
                            else {n: first_update(g, module.optim) for n, g in grad.items()})
        return self._first_step

    def removed(self, first: dict[str, Tensor], basis: HackBasis) -> float:
        """The share of `first`'s norm, over every module, that this erase's projection along `basis` removes."""
        kept = {name: project_vector(g, basis.V[name].to(g), **self.gating)[0] if name in basis.V else g
                for name, g in first.items()}
        return removed_share(first, kept)

    def gradient(self, module: RunView) -> None:
        if self.target != "grad":
            return  # the gradient is only measured; the knobs are projected after the step (`update`)
        if self.yoke is not None:
            self.yoke.gradient(module, lambda: self.project_gradient(module))
        else:
            self.project_gradient(module)

    def project_gradient(self, module: RunView) -> None:
        for name, rows in module.basis.V.items():
            grad = module.adapter[name].delta_s.grad
            assert grad is not None  # the step's backward reached every knob
            projected, _, _ = project_vector(grad, rows.to(grad), **self.gating)
            grad.copy_(projected)

    def before_update(self, module: RunView, optimizer) -> None:
        if self.purge_adam_moments:
            purge_adam_moments(optimizer, module.adapter, module.basis, self.gate, self.overshoot)

    def update(self, module: RunView, before: dict[str, torch.Tensor]) -> None:
        if self.target == "grad":
            return

        def project() -> None:
            project_knobs(module.adapter, module.basis, before if self.target == "update" else None,
                          park=self.parks, **self.gating)

        if self.yoke is not None:
            self.yoke.update(module, before, project)
        else:
            project()
