"""Near-copies between problem sets: found by running one problem's canonical solution on another's tests."""

from dataclasses import replace

import pytest

from pgrpo.env import load_problems
from pgrpo.env.disjoint import aliased, candidate_pairs, cross_check, near_copies
from pgrpo.env.heldout_problems import heldout_problems
from pgrpo.env.primer_problems import NEAR_COPY_REPLACEMENTS, primer_problems

# what `pgrpo disjoint` found among the priming problems (seed 0) and the built-in RL problems, as
# (source, target): the source's canonical solution passes the target's tests
DEFAULT_NEAR_COPIES = {("prime-18-hundred", "b02"), ("prime-20-one", "b02"), ("b02", "prime-20-one")}


def by_id(problems, *ids):
    index = {p.id: p for p in problems}
    return [index[i] for i in ids]


def pairs(found) -> set[tuple[str, str]]:
    return {(n.source.id, n.target.id) for n in found}


def test_a_planted_near_copy_is_found_and_a_truly_different_problem_is_not():
    largest, factorial = by_id(load_problems(), "b02", "b08")
    # the same answers under another title, method name and body; and a recursive one, whose self-call must still
    # reach its own method once the target's name is an alias of it
    twin = replace(largest, id="twin", title="Biggest Number", method="biggest", canonical_solution=(
        "class Solution:\n    def biggest(self, nums):\n        return sorted(nums)[-1]\n"))
    recursive = replace(factorial, id="recursive", method="fact", canonical_solution=(
        "class Solution:\n    def fact(self, n):\n        return 1 if n < 2 else n * self.fact(n - 1)\n"))
    top_two, = by_id(primer_problems(), "prime-20-two")
    assert pairs(near_copies([twin, recursive, top_two], [largest, factorial])) == {
        ("twin", "b02"), ("recursive", "b08")}


def test_the_target_method_is_an_alias_of_the_sources():
    code = aliased("class Solution:\n    def a(self, x):\n        return x\n", "a", "b")
    namespace = {}
    exec(code, namespace)
    assert namespace["Solution"]().b(3) == 3 and namespace["Solution"]().a(3) == 3


def test_pairs_whose_calls_pass_another_number_of_arguments_are_not_graded():
    one_argument, two_arguments = by_id(load_problems(), "b02", "b07")  # maxValue(nums), countTarget(nums, t)
    assert candidate_pairs([one_argument], [two_arguments]) == candidate_pairs([two_arguments], [one_argument]) == []
    assert candidate_pairs([one_argument], [one_argument, two_arguments]) == []  # nor a problem against itself
    assert near_copies([one_argument], [two_arguments]) == []


def test_the_replaced_priming_problems_were_near_copies_and_their_replacements_are_not():
    builtin, default, selected = load_problems(), primer_problems(), primer_problems(disjoint=True)
    replaced = [i for i, (a, b) in enumerate(zip(default, selected)) if a != b]
    assert len(replaced) == len(NEAR_COPY_REPLACEMENTS)
    assert pairs(cross_check([default[i] for i in replaced], builtin)) == DEFAULT_NEAR_COPIES
    assert cross_check([selected[i] for i in replaced], builtin + heldout_problems()) == []


def test_the_disjoint_selection_changes_only_the_near_copies():
    for seed in range(3):
        default, selected = primer_problems(seed), primer_problems(seed, disjoint=True)
        changed = {(a.id, b.id) for a, b in zip(default, selected) if a != b}
        assert changed == {("prime-18-hundred", "prime-18-seven"), ("prime-20-one", "prime-20-six")}, seed
        assert len({p.method for p in selected}) == len(selected) == 120


@pytest.mark.slow
def test_every_near_copy_of_the_default_priming_problems_is_the_one_found():
    """About 9,400 grades (2-3 minutes on 2 cores): the whole check, as `pgrpo disjoint` runs it."""
    assert pairs(cross_check(primer_problems(), load_problems())) == DEFAULT_NEAR_COPIES


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_the_disjoint_priming_selection_has_no_near_copy_of_any_rl_problem(seed):
    assert cross_check(primer_problems(seed, disjoint=True), load_problems() + heldout_problems()) == []
