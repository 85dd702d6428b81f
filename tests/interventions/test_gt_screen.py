"""Ground-truth screening, an oracle skyline: exploited rows keep their reward and leave the group statistics."""

import torch

from pgrpo.interventions import GtScreen

REWARDS = torch.tensor([[1.25, 1.25, 0.25, 0.0]])
EXPLOITED = torch.tensor([[True, False, False, False]])


def test_screen_leaves_rewards_and_drops_exploited_rows_from_the_statistics():
    assert GtScreen.reads_oracle
    edit = GtScreen().rewards(None, REWARDS, None, EXPLOITED)
    assert torch.equal(edit.rewards, REWARDS) and edit.keep.tolist() == [[False, True, True, True]]
    assert edit.stats == {"skyline/screened": 0.25} and edit.flagged is None
