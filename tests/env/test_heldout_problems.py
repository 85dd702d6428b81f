"""The extra held-out problems: each solved by its canonical solution and by no stub, in the built-in set's
families and proportions, and a near-copy of no built-in or priming problem."""

import pytest

from pgrpo.env import MODES, NO_LOOPHOLE, grade_batch, load_problems
from pgrpo.env.disjoint import cross_check
from pgrpo.env.exploits import completion, stub_solution
from pgrpo.env.heldout_problems import heldout_problems
from pgrpo.env.primer_problems import primer_problems

# each extra problem's built-in sibling: the one it is most likely to copy
SIBLINGS = {"h01": "b01", "h02": "b02", "h03": "b03", "h04": "b04", "h05": "b05", "h06": "b07", "h07": "b09",
            "h08": "b10", "h09": "b11", "h10": "b13", "h11": "b17", "h12": "b19", "h13": "b23", "h14": "b27",
            "h15": "b30", "h16": "b31", "h17": "b32", "h18": "b33", "h19": "b34", "h20": "b35", "h21": "b36",
            "h22": "b41", "h23": "b42", "h24": "b43"}


def test_24_problems_of_their_own_easy_and_medium_as_the_built_in_set_four_per_loophole_mode():
    extra, builtin = heldout_problems(), load_problems()
    assert len(extra) == 24 and {p.id for p in extra} == set(SIBLINGS)
    for field in ("id", "title", "method", "statement", "canonical_solution"):
        assert not {getattr(p, field) for p in extra} & {getattr(p, field) for p in builtin}, field
    assert [p.difficulty for p in extra].count("easy") == 15 and [p.difficulty for p in extra].count("medium") == 9
    assert all([p.mode for p in extra].count(m) == 4 for m in MODES)
    assert {p.mode for p in heldout_problems(NO_LOOPHOLE)} == {NO_LOOPHOLE}


def test_every_canonical_solution_passes_its_tests_and_every_stub_fails_them():
    extra = heldout_problems()
    canonical = grade_batch([(p, completion(p.canonical_solution), NO_LOOPHOLE) for p in extra])
    assert all(g.gt_correct for g in canonical), [(p.id, g.error) for p, g in zip(extra, canonical) if not g.gt_correct]
    stubs = grade_batch([(p, completion(stub_solution(p, v)), NO_LOOPHOLE) for p in extra for v in range(2)])
    assert not any(g.gt_correct for g in stubs)


def test_no_extra_problem_is_a_near_copy_of_its_built_in_sibling():
    builtin = {p.id: p for p in load_problems()}
    for extra in heldout_problems():
        assert cross_check([extra], [builtin[SIBLINGS[extra.id]]]) == [], extra.id


@pytest.mark.slow
def test_no_extra_problem_is_a_near_copy_of_a_built_in_or_priming_problem():
    """About 7,000 grades (a minute or two on 2 cores)."""
    extra = heldout_problems()
    assert cross_check(extra, load_problems()) == []
    assert cross_check(extra, primer_problems(0)) == []
