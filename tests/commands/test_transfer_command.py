"""`pgrpo transfer`: the leave-one-mode-out table of a detector, on the model's own substrate."""

import pytest

from pgrpo.cli import main
from pgrpo.env import MODES


def test_transfer_prints_a_row_per_held_out_mode_and_one_for_the_detector_built_from_all(capsys):
    main(["transfer", "--model", "embedded", "--variants", "1", "--n_heldout", "4"])
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("probe on embedded, 48 template pairs")
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in out[3:]]
    assert sorted(r[0] for r in rows[:-1]) == sorted(MODES) and rows[-1][0] == "none"
    assert all(0 <= float(x) <= 1 for r in rows for x in r[2:])


def test_transfer_scores_the_random_placebo_when_given_its_seed(capsys):
    main(["transfer", "--model", "embedded", "--variants", "1", "--n_heldout", "4", "--placebo_seed", "0"])
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("the random placebo (seed 0) of probe on embedded")
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in out[3:]]
    assert all(0 <= float(x) <= 1 for r in rows for x in r[2:])
    assert float(rows[-1][2]) < 1.0  # orthogonal to the hack − clean difference: it does not classify them all


def test_an_unknown_detector_is_refused_by_name():
    with pytest.raises(ValueError, match="'knn'"):
        main(["transfer", "--detector", "knn"])


def test_transfer_of_forms_scores_the_forms_and_levers_the_detector_never_saw(capsys):
    main(["transfer", "--model", "embedded", "--variants", "1", "--n_heldout", "4", "--unseen", "forms"])
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("probe on embedded, fitted on 20 pairs of the detectors' forms")
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in out[3:]]
    assert [r[0] for r in rows] == ["seen forms", "unseen forms", *(f"unseen lever {m}, {role} forms"
                                    for m in ("run_tests", "exit_code") for role in ("detector", "taught"))]
    assert [int(r[1]) for r in rows] == [12, 12, 8, 8, 8, 8]  # 5 of 8 problems per known lever fitted on
    assert all(0 <= float(x) <= 1 for r in rows for x in [*r[2:4], r[4].split()[0]])
