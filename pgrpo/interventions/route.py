"""Route: erase's projection of the update or the position, with what is removed parked in δS_hack instead of
dropped (after Gradient Routing, Cloud et al. 2024). δS + δS_hack, the training forward's knob, moves exactly as
vanilla's; only the deployed model, δS_hack zeroed (`deployed`, the base class's), differs."""

from pgrpo.interventions.erase import Erase
from pgrpo.interventions.reads_v import Source
from pgrpo.step.projection import Gate, Target


class Route(Erase):
    """Route: the update's (or position's) component along V moves into δS_hack, which is zeroed at deployment."""

    parks = True

    def __init__(self, gate: Gate = "no_gate", overshoot: float = 1.0, preserve_magnitude: bool = False,
                 target: Target = "update", purge_adam_moments: bool = False, v: Source = "real",
                 v_seed: int | None = None, yoked_to: str | None = None):
        """
        Args:
            gate: which coefficients c = V Δ of the update are parked (as Erase's).
            overshoot: scale of the parked vector.
            preserve_magnitude: rescale the kept update to the whole update's norm.
            target: update (each step's change) or position (the knobs relative to the base); grad is refused.
            purge_adam_moments: remove the gated span(V) part of Adam's first moment before each step.
            v: the V it reads: real, or a negative control: random (as many random axes as remove the real V's
                share of the base policy's first update), shuffled | nonhack (matched in k).
            v_seed: seed of the random control (None: the run's seed_everything).
            yoked_to: a placebo's method run at the same seed, whose share of the update it parks step by step, its
                own projection scaled to it (pgrpo/interventions/yoke.py); None: matched at train start.
        """
        if target == "grad":
            # a gradient parked in δS_hack gets Adam moments of its own: near-full-lr steps along V every step,
            # so the training forward leaves vanilla's path and the deployed model neither hacks nor solves
            raise ValueError("Route parks the projected update or position in δS_hack, so that the training forward "
                             "moves as vanilla's: set target 'update' or 'position' (got 'grad')")
        super().__init__(gate, overshoot, preserve_magnitude, target, purge_adam_moments, v, v_seed, yoked_to)
