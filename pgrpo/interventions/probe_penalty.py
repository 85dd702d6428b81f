"""probe_penalty: a logistic probe on the policy's pooled hidden states flags rollouts as hacks, and a flagged
rollout loses `penalty` from its reward (or, screening, leaves its group's statistics with zero advantage).

rl-rewardhacking's linear-probe penalty (a probe of ~80% accuracy held hacking at 0% on Qwen3-4B), on pgrpo's
detector data: the probe is fitted on the hack/clean pairs V is extracted from, at the layer that classifies the
held-out pairs best, and fixed during training. How often it agrees with the oracle on the live rollouts is logged
(`detector/*`), never fed back.
"""

import math

from torch import Tensor

from pgrpo.directions.detectors import fit_logistic
from pgrpo.interventions.base import RewardEdit, RunView
from pgrpo.interventions.reads_activations import Detector, ReadsActivations


class ProbePenalty(ReadsActivations):
    """A linear probe on activations flags rollouts; a flagged rollout's reward loses `penalty` (or is screened)."""

    def __init__(self, penalty: float = 1.0, threshold: float = 0.5, screen: bool = False, l2: float = 1e-2,
                 layer: int | None = None, detector: Detector = "real", detector_seed: int | None = None,
                 yoked_to: str | None = None):
        """
        Args:
            penalty: what a flagged rollout loses (the pass reward by default: a flagged pass pays as a
                well-formed failure).
            threshold: the probe's probability above which a rollout is flagged.
            screen: instead of the penalty, flagged rollouts get zero advantage and leave their group's mean and
                std (ground-truth screening with the probe for the oracle).
            l2: the probe's L2 penalty on standardised features.
            layer: hidden states the probe reads (0: the embeddings); None: the decoder layer best on the
                held-out pairs.
            detector: real, or random (the placebo: a random probe at the same layer, its cut calibrated to
                flag as many of the base policy's own rollouts at train start).
            detector_seed: seed of the random placebo (None: the run's seed_everything).
            yoked_to: a placebo's method run at the same seed: step by step it flags as many student rows and as
                many teacher rows as the method acted on, those its probe scores highest (pgrpo/interventions/yoke.py);
                None: its cut matched at train start.
        """
        super().__init__(layer, detector, detector_seed, yoked_to)
        if penalty < 0:
            raise ValueError(f"penalty={penalty}: must be >= 0 (it is subtracted)")
        if not 0 < threshold < 1:
            raise ValueError(f"threshold={threshold}: a probability in (0, 1)")
        if l2 < 0:
            raise ValueError(f"l2={l2}: must be >= 0")
        self.penalty = penalty
        self.threshold = threshold
        self.screen = screen
        self.l2 = l2

    @property
    def cut(self) -> float:
        return math.log(self.threshold / (1 - self.threshold))  # probability > threshold ⇔ score > logit

    def fit(self, hack: Tensor, clean: Tensor) -> tuple[Tensor, float]:
        return fit_logistic(hack, clean, self.l2)

    def rewards(self, module: RunView, rewards: Tensor, packed, exploited) -> RewardEdit:
        scores = self.scores(module, packed).view(rewards.shape).cpu()  # (P, G)
        flagged = scores > self.cut if self.yoke is None else self.yoke.flags(module, scores)
        if self.screen:
            return RewardEdit(rewards, keep=~flagged, flagged=flagged)
        return RewardEdit(rewards - self.penalty * flagged.to(rewards.dtype), flagged=flagged)

