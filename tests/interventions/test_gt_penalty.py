"""A ground-truth penalty, an oracle skyline: only exploited rows lose reward."""

import pytest
import torch

from pgrpo.interventions import GtPenalty

REWARDS = torch.tensor([[1.25, 1.25, 0.25, 0.0]])
EXPLOITED = torch.tensor([[True, False, False, False]])


def test_penalty_lowers_only_exploited_rewards():
    assert GtPenalty.reads_oracle
    edit = GtPenalty(penalty=2.0).rewards(None, REWARDS, None, EXPLOITED)
    assert edit.rewards.tolist() == [[-0.75, 1.25, 0.25, 0.0]] and edit.keep is None


def test_a_negative_penalty_names_the_field():
    with pytest.raises(ValueError, match="penalty"):
        GtPenalty(penalty=-1.0)
