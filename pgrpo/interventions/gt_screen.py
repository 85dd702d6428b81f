"""Ground-truth screening (rl-rewardhacking's), an oracle skyline, never a method: exploited rollouts, as the
strict oracle labels them, get zero advantage and leave their group's mean and std. It bounds what a perfect hack
detector could reach. Teacher rows carry the oracle's labels from when the pool was graded and are screened like
the student's."""

from torch import Tensor

from pgrpo.interventions.base import Intervention, RewardEdit, RunView


class GtScreen(Intervention):
    """Oracle skyline: exploited rollouts get zero advantage and leave their group's statistics."""

    reads_oracle = True

    def rewards(self, module: RunView, rewards: Tensor, packed, exploited: Tensor | None):
        assert exploited is not None  # reads_oracle: the step hands the labels
        keep = ~exploited.bool()
        return RewardEdit(rewards, keep, stats={"skyline/screened": float((~keep).float().mean())})
