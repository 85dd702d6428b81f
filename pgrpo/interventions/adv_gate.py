"""adv_gate: the advantage-level twin of erase on the same V. The gradient's direction is left alone; each
rollout's advantage is scaled by 1 − σ((f − center) / temperature), f the hack-ward fraction of that rollout's
own gradient (in the spirit of Wu & Tang 2026's probe-discounted advantages, with V as the probe)."""

import torch
from torch import Tensor

from pgrpo.interventions.reads_v import ReadsV, Source
from pgrpo.projection import advantage_gate, rollout_hack_fraction
from pgrpo.step_grads import StepGrads


class AdvGate(ReadsV):
    """adv_gate: each rollout's advantage discounted by how hack-ward its own gradient is along V."""

    def __init__(self, center: float = 0.4, temperature: float = 0.05, v: Source = "real", v_seed: int | None = None):
        """
        Args:
            center: the rollout hack fraction at which its advantage is halved (on the embedded default,
                exploited rollouts' own gradients measure about 0.44 and clean ones 0.28; not tuned).
            temperature: how sharply the discount turns on around the center.
            v: the V it reads: real, or a negative control (random | shuffled | nonhack), matched in k.
            v_seed: seed of the random control (None: the run's seed_everything).
        """
        super().__init__(v, v_seed)
        if not temperature > 0:
            raise ValueError(f"temperature={temperature}: must be > 0")
        self.center = center
        self.temperature = temperature

    def check(self, module) -> None:
        # the step scales each rollout's gradient after the one backward, which equals scaling its advantage only
        # if that gradient is the rollout's alone and proportional to its advantage
        if module.hparams.share_prompts:
            raise ValueError("AdvGate needs each rollout's whole gradient, which a shared prompt's forward mixes "
                             "with its group's: set model.share_prompts: false")
        if module.loss_cfg.beta > 0:
            raise ValueError(f"AdvGate scales each rollout's gradient as its advantage, but the KL term's is not "
                             f"proportional to it: set model.loss.beta: 0 (got {module.loss_cfg.beta})")

    def advantage_weights(self, module, grads: StepGrads) -> Tensor:
        with torch.no_grad():
            return advantage_gate(rollout_hack_fraction(grads.rows, module.basis), self.center, self.temperature)
