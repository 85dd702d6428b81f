import math

import pytest

from pgrpo.evaluation.intervals import auroc, hanley_mcneil, newcombe, t_interval, wilson


def test_wilsons_interval_is_not_empty_at_zero_and_stays_inside_zero_one():
    assert wilson(0, 48) == (0.0, pytest.approx(0.0741, abs=1e-4))
    lo, hi = wilson(48, 48)
    assert hi == pytest.approx(1.0) and lo == pytest.approx(0.9259, abs=1e-4)
    assert wilson(5, 10) == (pytest.approx(0.2366, abs=1e-4), pytest.approx(0.7634, abs=1e-4))


def test_a_rate_over_no_samples_has_no_interval():
    with pytest.raises(ValueError, match="0 samples"):
        wilson(0, 0)


def test_the_t_interval_takes_the_quantile_of_the_seed_count():
    mean, half = t_interval([0.1, 0.2, 0.3])
    assert mean == pytest.approx(0.2) and half == pytest.approx(4.303 * 0.1 / math.sqrt(3))
    assert math.isnan(t_interval([0.4])[1])


def test_newcombes_interval_of_a_difference_of_two_rates_matches_his_papers_examples():
    # Newcombe (1998), Statistics in Medicine 17:873, table II, method 10
    assert newcombe(56, 70, 48, 80) == (pytest.approx(0.0524, abs=1e-4), pytest.approx(0.3339, abs=1e-4))
    assert newcombe(9, 10, 3, 10) == (pytest.approx(0.1705, abs=1e-4), pytest.approx(0.8090, abs=1e-4))


def test_the_auroc_is_one_when_every_positive_ranks_above_every_negative_and_a_half_at_ties():
    assert auroc([0.9, 0.8], [0.1, 0.2, 0.3]) == 1.0
    assert auroc([0.1], [0.9]) == 0.0
    assert auroc([0.5, 0.5], [0.5]) == 0.5
    with pytest.raises(ValueError, match="both classes"):
        auroc([0.3], [])


def test_hanley_mcneils_interval_is_their_standard_error_and_narrows_with_samples():
    # area 0.8, 50 and 50: Q1 = 0.8/1.2, Q2 = 1.28/1.8, SE² = (0.16 + 49 (Q1 − 0.64) + 49 (Q2 − 0.64)) / 2500
    lo, hi = hanley_mcneil(0.8, 50, 50)
    assert (hi - lo) / (2 * 1.96) == pytest.approx(0.04450, abs=1e-5)
    wide, narrow = hanley_mcneil(0.7, 5, 100), hanley_mcneil(0.7, 50, 100)
    assert wide[1] - wide[0] > narrow[1] - narrow[0]
    assert hanley_mcneil(0.99, 3, 3)[1] <= 1.0
