"""Erase: each step loses the component along V of its gradient, of its update, or of the knobs' position.

Sign convention and why the one-sided gate is only safe on the position: pgrpo/projection.py. Why the default
gate is unbiased: docs/design.md#why-the-default-gate-is-unbiased.
"""

import torch

from pgrpo.interventions.reads_v import ReadsV, Source
from pgrpo.projection import Gate, Target, project_knobs, project_vector, purge_adam_moments


class Erase(ReadsV):
    """Erase: remove the (gated) component along V of the gradient, the update or the knobs' position."""

    parks = False
    """Whether what is removed from δS is added to δS_hack (Route) rather than dropped."""

    def __init__(self, gate: Gate = "no_gate", overshoot: float = 1.0, preserve_magnitude: bool = False,
                 target: Target = "grad", purge_adam_moments: bool = False, v: Source = "real",
                 v_seed: int | None = None):
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
            v: the V it reads: real, or a negative control (random | shuffled | nonhack), matched in k.
            v_seed: seed of the random control (None: the run's seed_everything).
        """
        super().__init__(v, v_seed)
        if gate not in ("one_sided", "no_gate", "reverse"):
            raise ValueError(f"gate={gate!r}: expected one_sided, no_gate or reverse")
        if target not in ("grad", "update", "position"):
            raise ValueError(f"target={target!r}: expected grad, update or position")
        if preserve_magnitude and target == "position":
            raise ValueError("preserve_magnitude rescales a projected gradient or update to its norm; on target "
                             "'position' it would rescale δS itself: leave it false")
        if not overshoot > 0:
            raise ValueError(f"overshoot={overshoot}: must be > 0")
        self.gate = gate
        self.overshoot = overshoot
        self.preserve_magnitude = preserve_magnitude
        self.target = target
        self.purge_adam_moments = purge_adam_moments

    @property
    def gating(self) -> dict:
        """project_vector's settings."""
        return {"gate": self.gate, "overshoot": self.overshoot, "preserve_magnitude": self.preserve_magnitude}

    def gradient(self, module) -> None:
        if self.target != "grad":
            return  # the gradient is only measured; the knobs are projected after the step (`update`)
        for name, rows in module.basis.V.items():
            grad = module.adapter[name].delta_s.grad
            projected, _, _ = project_vector(grad, rows.to(grad), **self.gating)
            grad.copy_(projected)

    def before_update(self, module, optimizer) -> None:
        if self.purge_adam_moments:
            purge_adam_moments(optimizer, module.adapter, module.basis, self.gate, self.overshoot)

    def update(self, module, before: dict[str, torch.Tensor]) -> None:
        if self.target != "grad":
            project_knobs(module.adapter, module.basis, before if self.target == "update" else None,
                          park=self.parks, **self.gating)
