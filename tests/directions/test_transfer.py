import pytest
import torch

from pgrpo.directions.detectors import fit_mean_difference
from pgrpo.directions.transfer import leave_one_mode_out, unseen_forms_and_levers

MODES = ["a", "b", "c"]


def states(features: torch.Tensor) -> torch.Tensor:
    """(n, d) → (n, 2, d) pooled states: the embeddings row zero, the one decoder layer the features."""
    return torch.stack([torch.zeros_like(features), features], 1)


def pairs(lever_axis_of: dict[str, int | None], n: int = 12, d: int = 6, seed: int = 0):
    """n pairs per mode. A hack raises its mode's lever axis (None: no lever feature) and, like its wrong answer
    without the lever, the wrongness axis d-1; a clean solution raises neither."""
    g = torch.Generator().manual_seed(seed)
    modes = [m for _ in range(n) for m in MODES]
    hack, clean, wrong = (0.05 * torch.randn(len(modes), d, generator=g) for _ in range(3))
    for i, m in enumerate(modes):
        if lever_axis_of[m] is not None:
            hack[i, lever_axis_of[m]] += 1.0
        hack[i, d - 1] += 1.0
        wrong[i, d - 1] += 1.0
    return states(hack), states(clean), states(wrong), modes


def test_a_detector_flags_a_held_out_lever_that_shares_the_known_levers_feature():
    rows = leave_one_mode_out(*pairs({"a": 0, "b": 0, "c": 0}), n_heldout=6, fit=fit_mean_difference)
    assert [r.held_out for r in rows] == [*MODES, "none"]
    assert all(r.hacks_flagged == 1.0 and r.clean_flagged == 0.0 for r in rows)


def test_a_detector_that_reads_wrongness_flags_the_lever_free_wrong_answers_as_often_as_the_hacks():
    rows = leave_one_mode_out(*pairs({"a": None, "b": None, "c": None}), n_heldout=6, fit=fit_mean_difference)
    assert all(r.hacks_flagged == r.wrong_flagged == 1.0 and r.clean_flagged == 0.0 for r in rows)


def test_a_placebo_flags_the_held_out_hacks_no_more_than_their_clean_solutions():
    shared = pairs({"a": 0, "b": 0, "c": 0}, n=60)
    real = leave_one_mode_out(*shared, n_heldout=30, fit=fit_mean_difference)
    placebo = leave_one_mode_out(*shared, n_heldout=30, fit=fit_mean_difference, placebo_seed=0)
    assert [r.layer for r in placebo] == [r.layer for r in real]
    assert [r.held_out for r in placebo] == [r.held_out for r in real] == ["a", "b", "c", "none"]
    assert all(r.hacks_flagged == 1.0 and r.clean_flagged == 0.0 for r in real)
    for r in placebo:  # orthogonal to the hack − clean difference: which completions it flags is chance
        assert abs(r.hacks_flagged - r.clean_flagged) < 0.25, r


def test_mismatched_inputs_are_refused():
    hack, clean, wrong, modes = pairs({"a": 0, "b": 0, "c": 0})
    with pytest.raises(ValueError, match="one of each per pair"):
        leave_one_mode_out(hack, clean, wrong[:-1], modes, 6, fit_mean_difference)


def test_a_detector_of_one_forms_feature_misses_the_forms_it_never_saw_and_says_so_with_an_interval():
    # the detectors' forms raise axis 0, the taught forms axis 1: fitted on the first, it flags those hacks only
    hack, clean, _, _ = pairs({"a": 0, "b": 0, "c": 0}, n=20)
    taught, _, _, _ = pairs({"a": 1, "b": 1, "c": 1}, n=20, seed=1)
    taught[:, 1, 5] -= 1.0  # no wrongness axis either: only the form's own feature
    detector, rows = unseen_forms_and_levers((hack[:40], clean[:40]), {"seen forms": (hack[40:], clean[40:]),
                                             "unseen forms": (taught[40:], clean[40:])}, 8, fit_mean_difference)
    seen, unseen = rows
    assert (seen.scored_on, seen.n, seen.hacks_flagged, seen.clean_flagged) == ("seen forms", 20, 1, 0)
    assert seen.accuracy == 1
    assert unseen.hacks_flagged == 0 and unseen.accuracy == 0.5
    assert unseen.interval[0] < 0.5 < unseen.interval[1] and seen.interval[1] == 1.0 > seen.interval[0] > 0.9
