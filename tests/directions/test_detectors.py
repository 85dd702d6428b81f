"""Linear detectors on pooled states: a probe and a mean-difference direction at the layer that separates held-out
pairs best, reproducible bit for bit, and a placebo that flags as many completions as the real one."""

import pytest
import torch

from pgrpo.directions.detectors import accuracy, fit_detector, fit_logistic, fit_mean_difference, random_placebo


def pairs_separable_at(layer: int, n: int = 60, n_layers: int = 4, d: int = 6, seed: int = 0):
    """(hack, clean) pooled states (n, n_layers, d): the two differ only at `layer`, along feature 0."""
    g = torch.Generator().manual_seed(seed)
    hack, clean = torch.randn(n, n_layers, d, generator=g), torch.randn(n, n_layers, d, generator=g)
    hack[:, layer, 0] += 6.0
    return hack, clean


@pytest.mark.parametrize("fit", [fit_logistic, fit_mean_difference], ids=["logistic", "mean_difference"])
def test_a_detector_finds_the_layer_where_hack_and_clean_differ(fit):
    hack, clean = pairs_separable_at(layer=2)
    detector = fit_detector(hack, clean, n_heldout=10, fit=fit)
    assert detector.layer == 2 and detector.heldout_accuracy >= 0.9
    assert detector.weight.abs().argmax() == 0  # it reads the feature that differs


def test_the_embeddings_are_read_only_when_asked_for_and_ties_go_to_the_deeper_layer():
    hack, clean = pairs_separable_at(layer=0)
    hack[:, 1:, 0] += 6.0  # every decoder layer separates them as well
    assert fit_detector(hack, clean, 10, fit_mean_difference).layer == 3
    assert fit_detector(hack, clean, 10, fit_mean_difference, layer=0).layer == 0


def test_a_fixed_layer_is_taken_as_given_and_negative_counts_from_the_last():
    hack, clean = pairs_separable_at(layer=2)
    assert fit_detector(hack, clean, 10, fit_mean_difference, layer=-1).layer == 3
    assert fit_detector(hack, clean, 10, fit_mean_difference, layer=2).heldout_accuracy >= 0.9


def test_the_probe_is_the_same_bit_for_bit_when_fitted_again():
    hack, clean = pairs_separable_at(layer=1)
    a, b = (fit_detector(hack, clean, 10, fit_logistic) for _ in range(2))
    assert torch.equal(a.weight, b.weight) and a.bias == b.bias


def test_the_placebo_flags_as_many_completions_as_the_real_detector_and_cannot_read_the_hack():
    hack, clean = pairs_separable_at(layer=1)
    hack[:, 1, 1:] += 1.0  # the hack shifts every feature a little: a merely random direction would read it
    real = fit_detector(hack, clean, 10, fit_logistic)
    states = torch.cat([hack, clean])
    for cut in (0.0, 1.5):
        placebo = random_placebo(real, hack, clean, seed=3, cut=cut)
        assert (placebo.scores(states) > cut).sum() == (real.scores(states) > cut).sum()
        assert placebo.layer == real.layer
        assert torch.allclose(placebo.weight.norm(), real.weight.norm())
    # orthogonal to the (standardised) mean difference: the hack and clean means score alike
    means = [real.features(x).mean(0) @ placebo.weight for x in (hack, clean)]
    assert means[0] == pytest.approx(float(means[1]), abs=1e-4)


@pytest.mark.parametrize("n_heldout, layer, match", [(0, None, "n_heldout"), (60, None, "n_heldout"),
                                                     (10, 4, "layer=4")])
def test_bad_detector_settings_name_the_setting(n_heldout, layer, match):
    hack, clean = pairs_separable_at(layer=1)
    with pytest.raises(ValueError, match=match):
        fit_detector(hack, clean, n_heldout, fit_mean_difference, layer)
