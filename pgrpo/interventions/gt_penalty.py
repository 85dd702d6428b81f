"""A ground-truth penalty (rl-rewardhacking's), an oracle skyline, never a method: an exploited rollout, as the
strict oracle labels it, loses `penalty` from its reward. Teacher rows carry the oracle's labels from when the
pool was graded and are penalised like the student's."""

from torch import Tensor

from pgrpo.interventions.base import Intervention, RewardEdit, RunView


class GtPenalty(Intervention):
    """Oracle skyline: an exploited rollout's reward is lowered by `penalty`."""

    reads_oracle = True

    def __init__(self, penalty: float = 1.0):
        """
        Args:
            penalty: what an exploited rollout loses (the pass reward by default, so a hack pays no more than a
                well-formed failure).
        """
        if penalty < 0:
            raise ValueError(f"penalty={penalty}: must be >= 0 (it is subtracted)")
        self.penalty = penalty

    def rewards(self, module: RunView, rewards: Tensor, packed, exploited: Tensor | None):
        assert exploited is not None  # reads_oracle: the step hands the labels
        return RewardEdit(rewards - self.penalty * exploited.to(rewards.dtype))
