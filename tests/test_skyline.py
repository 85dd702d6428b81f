import pytest
import torch

from pgrpo.skyline import SkylineConfig, apply_skyline

REWARDS = torch.tensor([[1.25, 1.25, 0.25, 0.0]])
EXPLOITED = torch.tensor([[True, False, False, False]])


def test_without_a_skyline_the_oracles_verdict_is_not_read():
    rewards, keep = apply_skyline(REWARDS, EXPLOITED, SkylineConfig())
    assert rewards is REWARDS and keep is None
    assert apply_skyline(REWARDS, ~EXPLOITED, SkylineConfig())[0] is REWARDS


def test_screen_leaves_rewards_and_drops_exploited_rows_from_the_statistics():
    rewards, keep = apply_skyline(REWARDS, EXPLOITED, SkylineConfig("screen"))
    assert torch.equal(rewards, REWARDS) and keep.tolist() == [[False, True, True, True]]


def test_penalty_lowers_only_exploited_rewards():
    rewards, keep = apply_skyline(REWARDS, EXPLOITED, SkylineConfig("penalty", penalty=2.0))
    assert rewards.tolist() == [[-0.75, 1.25, 0.25, 0.0]] and keep is None


def test_bad_skyline_settings_name_the_key():
    with pytest.raises(ValueError, match="model.skyline.kind"):
        SkylineConfig("oracle")
    with pytest.raises(ValueError, match="model.skyline.penalty"):
        SkylineConfig("penalty", penalty=-1.0)
