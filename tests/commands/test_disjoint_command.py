"""`pgrpo disjoint`: prints the near-copies it finds and fails on one (on a few problems; the whole check is slow,
tests/env/test_disjoint.py)."""

import pytest

from pgrpo.cli import main
from pgrpo.commands import disjoint as command
from pgrpo.env import load_problems
from pgrpo.env.heldout_problems import heldout_problems
from pgrpo.env.primer_problems import primer_problems


@pytest.fixture
def few_problems(monkeypatch):
    """The priming families of "Total of the k Largest" (k = 1, or 6 under disjoint) and 2, "Largest Value" and
    "Reverse a String", and the extra "Smallest Value"."""
    def few_primer(seed, disjoint=False):
        return [p for p in primer_problems(seed, disjoint) if p.id.startswith("prime-20-")][:2]

    monkeypatch.setattr(command, "primer_problems", few_primer)
    monkeypatch.setattr(command, "load_problems", lambda: [p for p in load_problems() if p.id in ("b02", "b03")])
    monkeypatch.setattr(command, "heldout_problems", lambda: [p for p in heldout_problems() if p.id == "h02"])


def test_a_near_copy_is_printed_and_fails_the_command(few_problems, capsys):
    with pytest.raises(SystemExit, match="disjoint FAILED"):
        main(["disjoint"])
    out = capsys.readouterr().out
    assert "prime-20-one 'Total of the 1 Largest' (topTotalOne) passes the tests of b02 'Largest Value'" in out
    assert "b02 'Largest Value' (maxValue) passes the tests of prime-20-one" in out  # and back, at seed 0
    assert out.splitlines()[-1].startswith("2 near-copies")


def test_the_disjoint_selection_passes(few_problems, capsys):
    main(["disjoint", "--primer-disjoint", "--seed", "1"])
    assert capsys.readouterr().out.splitlines()[-1].startswith("0 near-copies")
