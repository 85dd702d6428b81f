"""probe_penalty: the rollouts its probe flags lose the penalty, or are screened out of their group."""

import math

import pytest
import torch

from pgrpo.interventions import ProbePenalty

REWARDS = torch.tensor([[1.25, 1.25, 0.25, 0.0]])


def probing(intervention: ProbePenalty, probabilities: list[float]) -> ProbePenalty:
    """The intervention with its probe's scores given (logits of these probabilities)."""
    intervention.scores = lambda module, packed: torch.tensor([math.log(p / (1 - p)) for p in probabilities])
    return intervention


def test_a_flagged_rollout_loses_the_penalty_and_the_flags_are_reported():
    edit = probing(ProbePenalty(penalty=2.0), [0.9, 0.2, 0.6, 0.1]).rewards(None, REWARDS, None, None)
    assert edit.rewards.tolist() == [[-0.75, 1.25, -1.75, 0.0]] and edit.keep is None
    assert edit.flagged.tolist() == [[True, False, True, False]]


def test_the_threshold_decides_what_is_flagged():
    edit = probing(ProbePenalty(threshold=0.8), [0.9, 0.2, 0.6, 0.1]).rewards(None, REWARDS, None, None)
    assert edit.flagged.tolist() == [[True, False, False, False]]


def test_screening_keeps_the_rewards_and_drops_flagged_rollouts_from_the_statistics():
    edit = probing(ProbePenalty(screen=True), [0.9, 0.2, 0.6, 0.1]).rewards(None, REWARDS, None, None)
    assert torch.equal(edit.rewards, REWARDS) and edit.keep.tolist() == [[False, True, False, True]]


def test_it_never_reads_the_oracle():
    assert not ProbePenalty.reads_oracle


@pytest.mark.parametrize("kwargs, match", [({"penalty": -1.0}, "penalty"), ({"threshold": 1.0}, "threshold"),
                                           ({"l2": -1.0}, "l2"), ({"detector": "shuffled"}, "detector")])
def test_bad_settings_name_the_field(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ProbePenalty(**kwargs)
