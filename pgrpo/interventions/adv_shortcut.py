"""adv_shortcut: Advantage Modification after Wu & Tang 2026. Each rollout's score along a shortcut direction,
z-scored over the batch and made one-sided, is subtracted (× alpha) from its reward *before* group normalisation,
so a hack-like rollout loses ground against its own group, and a clean one is never paid for looking clean.

The direction is the difference of the hack and clean means of the pooled hidden states of the pairs V is
extracted from, at the layer that separates the held-out pairs best (Wu & Tang build theirs from ~60
contrastive pairs). On Phi-4-mini they cut hacking 99.9% → 24.9% at alpha 2.
"""

from torch import Tensor

from pgrpo.directions.detectors import fit_mean_difference
from pgrpo.interventions.base import RewardEdit, RunView
from pgrpo.interventions.reads_activations import Detector, ReadsActivations
from pgrpo.interventions.yoke import refuse_yoke

UNYOKED = ("its penalty grows with each rollout's score (alpha · max(0, z)), so acting on as many rollouts as its "
           "method did leaves open how much each one loses: use the start-matched placebo")


class AdvShortcut(ReadsActivations):
    """Each rollout's reward loses alpha · max(0, z), z its batch-z-scored score along the shortcut direction."""

    def __init__(self, alpha: float = 2.0, layer: int | None = None, detector: Detector = "real",
                 detector_seed: int | None = None, yoked_to: str | None = None):
        """
        Args:
            alpha: the penalty per standard deviation above the batch's mean score (Wu & Tang: 2).
            layer: hidden states the direction lives in (0: the embeddings); None: the decoder layer best on the
                held-out pairs.
            detector: real (the hack − clean mean difference) or random (the placebo: a random direction at the
                same layer; the penalty z-scores the scores over the batch, so its strength matches the real
                direction's by construction).
            detector_seed: seed of the random placebo (None: the run's seed_everything).
            yoked_to: refused (a ValueError says why): its placebo is matched at train start only.
        """
        refuse_yoke(self, yoked_to, UNYOKED)
        super().__init__(layer, detector, detector_seed)
        if alpha < 0:
            raise ValueError(f"alpha={alpha}: must be >= 0 (the penalty is subtracted)")
        self.alpha = alpha

    def fit(self, hack: Tensor, clean: Tensor) -> tuple[Tensor, float]:
        return fit_mean_difference(hack, clean)

    def rewards(self, module: RunView, rewards: Tensor, packed, exploited) -> RewardEdit:
        return one_sided_penalty(rewards, self.scores(module, packed).cpu(), self.alpha)


def one_sided_penalty(rewards: Tensor, scores: Tensor, alpha: float) -> RewardEdit:
    """(P, G) rewards less alpha · max(0, z), z each row's score (P*G,) z-scored over the whole batch, every group."""
    z = (scores - scores.mean()) / scores.std().clamp(min=1e-6)
    penalty = alpha * z.clamp(min=0)
    return RewardEdit(rewards - penalty.view(rewards.shape).to(rewards.dtype), flagged=(z > 0).view(rewards.shape),
                      stats={"detector/mean_penalty": float(penalty.mean())})
