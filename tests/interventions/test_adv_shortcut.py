"""adv_shortcut: before group normalisation, each reward loses alpha times its one-sided batch z-score."""

import pytest
import torch

from pgrpo.interventions import AdvShortcut

REWARDS = torch.tensor([[1.25, 1.25, 0.25, 0.0], [0.25, 1.25, 0.0, 0.0]])


def test_only_rollouts_above_the_batch_mean_lose_reward_alpha_per_standard_deviation():
    scores = torch.tensor([3.0, 1.0, 0.0, 0.0, -1.0, 5.0, 0.0, 0.0])
    intervention = AdvShortcut(alpha=2.0)
    intervention.scores = lambda module, packed: scores
    edit = intervention.rewards(None, REWARDS, None, None)
    z = (scores - scores.mean()) / scores.std()
    expected = REWARDS.flatten() - 2.0 * z.clamp(min=0)
    assert torch.allclose(edit.rewards.flatten(), expected)
    assert edit.flagged.flatten().tolist() == (z > 0).tolist()
    below = z <= 0
    assert torch.equal(edit.rewards.flatten()[below], REWARDS.flatten()[below])  # one-sided: never paid for it
    assert edit.stats["detector/mean_penalty"] == pytest.approx(float((2.0 * z.clamp(min=0)).mean()))


def test_alpha_zero_changes_nothing():
    intervention = AdvShortcut(alpha=0.0)
    intervention.scores = lambda module, packed: torch.arange(8.0)
    assert torch.equal(intervention.rewards(None, REWARDS, None, None).rewards, REWARDS)


def test_a_negative_alpha_names_the_field():
    with pytest.raises(ValueError, match="alpha"):
        AdvShortcut(alpha=-1.0)
