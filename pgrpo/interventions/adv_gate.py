"""adv_gate: the advantage-level twin of erase on the same V. The gradient's direction is left alone; each
rollout's advantage is scaled by 1 − σ((f − center) / temperature), f the hack-ward fraction of that rollout's
own gradient (in the spirit of Wu & Tang 2026's probe-discounted advantages, with V as the probe)."""

import math

import torch
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch import Tensor

from pgrpo.directions.calibration import base_rollout_grads, matching_center
from pgrpo.interventions.base import RunView
from pgrpo.interventions.reads_v import ReadsV, Source
from pgrpo.step.projection import advantage_gate, rollout_hack_fraction
from pgrpo.step.step_grads import StepGrads


class AdvGate(ReadsV):
    """adv_gate: each rollout's advantage discounted by how hack-ward its own gradient is along V."""

    def __init__(self, center: float = 0.4, temperature: float = 0.05, v: Source = "real", v_seed: int | None = None,
                 yoked_to: str | None = None):
        """
        Args:
            center: the rollout hack fraction at which its advantage is halved (on the embedded default,
                exploited rollouts' own gradients measure about 0.44 and clean ones 0.28; not tuned).
            temperature: how sharply the discount turns on around the center.
            v: the V it reads: real, or a negative control (random | shuffled | nonhack), matched in k; a
                placebo's gate center is calibrated at train start to discount the base policy's rollouts as
                much as the real V's gate does.
            v_seed: seed of the random control (None: the run's seed_everything).
            yoked_to: a placebo's method run at the same seed, whose mean discount of the live rollouts it gives
                step by step, its gate's center moved to it (pgrpo/interventions/yoke.py); None: matched at train
                start.
        """
        super().__init__(v, v_seed, yoked_to)
        if not temperature > 0:
            raise ValueError(f"temperature={temperature}: must be > 0")
        self.center = center
        self.temperature = temperature
        self.gate_center = center  # a placebo's is calibrated at train start (`prepare`)

    def check(self, module: RunView) -> None:
        # the step scales each rollout's gradient after the one backward, which equals scaling its advantage only
        # if that gradient is the rollout's alone and proportional to its advantage
        if module.share_prompts:
            raise ValueError("AdvGate needs each rollout's whole gradient, which a shared prompt's forward mixes "
                             "with its group's: set model.share_prompts: false")
        if module.loss_cfg.beta > 0:
            raise ValueError(f"AdvGate scales each rollout's gradient as its advantage, but the KL term's is not "
                             f"proportional to it: set model.loss.beta: 0 (got {module.loss_cfg.beta})")

    def prepare(self, module: RunView) -> None:
        """Measure the gate's strength on the base policy's rollouts: its mean discount there (logged as
        intervention/start_rate). A placebo moves its center until its own discount there is its method's: a
        random V's rollout fractions sit far below the real V's, so at the real center it would gate nothing."""
        rows = base_rollout_grads(module)
        if not len(next(iter(rows.values()))):
            rank_zero_warn("adv_gate: no base rollout carried an advantage (every group's rewards were equal), so "
                           "its strength was not measured and a placebo keeps the configured center")
            module.log_at_start({"intervention/start_rate": math.nan, "intervention/gate_center": self.gate_center})
            return
        own = rollout_hack_fraction(rows, module.basis)
        if self.placebo:
            real = module.extract_basis(module.extraction_problems)  # the cached real V
            target = float(1 - advantage_gate(rollout_hack_fraction(rows, real), self.center, self.temperature).mean())
            self.gate_center = matching_center(own, target, self.temperature)
            rank_zero_info(f"adv_gate placebo: center {self.gate_center:.4f} discounts the base's rollouts as the real "
                           f"V's gate at {self.center} does ({target:.3f} on average, {len(own)} rollouts)")
        rate = float(1 - advantage_gate(own, self.gate_center, self.temperature).mean())
        module.log_at_start({"intervention/start_rate": rate, "intervention/gate_center": self.gate_center})

    def advantage_weights(self, module: RunView, grads: StepGrads) -> Tensor:
        with torch.no_grad():
            own = rollout_hack_fraction(grads.rows, module.basis)
            if self.yoke is None:
                return advantage_gate(own, self.gate_center, self.temperature)
            discount = self.yoke.discount(module)
            if discount == 0:
                return torch.ones_like(own)
            center = matching_center(own[grads.live.to(own.device)], discount, self.temperature)
            return advantage_gate(own, center, self.temperature)
