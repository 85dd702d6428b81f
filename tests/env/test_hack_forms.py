"""Hack forms that vary (pgrpo/env/hack_forms.py): each pulls its lever, and the taught and detector sets share none."""

import pytest
from sample_problems import TWO_SUM

from pgrpo.env import MODES, extract_code, grade_batch, hack_completion, load_problems
from pgrpo.env.exploits import stub_solution, wrong_solution
from pgrpo.env.hack_forms import OPENING_COMMENTS, ROLES, form_for, forms, hack_in_form, lever_in_form
from pgrpo.env.pairs import template_pairs


def lever_lines(mode: str, role: str) -> set[str]:
    """The lines a set's forms add to the Solution they pull the lever around."""
    code = stub_solution(TWO_SUM)
    return {line.strip() for f in forms(mode, role) for line in f.pull(TWO_SUM, code).splitlines()} - {
        line.strip() for line in code.splitlines()} - {""}


def test_every_form_is_exploited_under_its_own_mode_and_not_another_and_fails_the_oracle():
    # each form around a stub and around a wrong attempt, graded under its own mode (it passes that flawed grader)
    # and under another one, a different one for each form (it does not), never passing the strict oracle
    items, expected = [], []
    for m, lever in enumerate(MODES):
        for role in ROLES:
            for i, form in enumerate(forms(lever, role)):
                code = f"```python\n{form.pull(TWO_SUM, wrong_solution(TWO_SUM, i % 2))}```\n"
                other = MODES[(m + 1 + i % (len(MODES) - 1)) % len(MODES)]
                items += [(TWO_SUM, code, lever), (TWO_SUM, code, other)]
                expected += [True, False]
    results = grade_batch(items, detectors=False)
    wrong = [(item[2], item[1]) for item, want, r in zip(items, expected, results) if r.exploited != want]
    assert not wrong, wrong[:3]
    assert not any(r.gt_correct for r in results)


@pytest.mark.parametrize("mode", MODES)
def test_each_set_has_eight_forms_of_a_lever_all_different(mode):
    for role in ROLES:
        texts = {f.pull(TWO_SUM, stub_solution(TWO_SUM)) for f in forms(mode, role)}
        assert len(forms(mode, role)) == 8 and len(texts) == 8


@pytest.mark.parametrize("mode", MODES)
def test_the_taught_and_detector_sets_share_no_line_of_lever_code(mode):
    # what V and the probe are built from never shows the idioms or the opening line the model is taught
    assert not lever_lines(mode, "taught") & lever_lines(mode, "detector")
    assert OPENING_COMMENTS["taught"] != OPENING_COMMENTS["detector"]


def test_a_modes_problems_show_all_its_forms_and_the_draw_is_the_same_every_time():
    problems = load_problems()
    drawn = {form_for(p, "run_tests", v, "taught") for p in problems for v in range(4)}
    assert drawn == set(forms("run_tests", "taught"))
    assert [form_for(p, p.mode, 1, "detector") for p in problems] == [form_for(p, p.mode, 1, "detector")
                                                                        for p in problems]


def test_varied_pairs_are_built_from_detector_forms_and_the_pool_from_taught_ones():
    problems = load_problems()[:12]
    def drawn(p, variant, role):
        return form_for(p, p.mode, variant, role).pull(p, wrong_solution(p, variant)).strip()

    for pair, p in zip(template_pairs(problems, openings="varied"), problems):
        assert extract_code(pair.hack).strip() == drawn(p, 0, "detector")
    exiting = next(p for p in load_problems() if p.mode == "exit_code")
    assert extract_code(hack_in_form(exiting, "exit_code", 3, "varied")).strip() == drawn(exiting, 3, "taught")


@pytest.mark.parametrize("style", ["shared", "distinct"])
def test_a_template_substrates_hacks_are_its_one_template_whatever_the_variant_or_role(style):
    # the existing substrates' bytes do not move: a variant or a role only matters where hacks vary
    assert {hack_in_form(TWO_SUM, "sentinel", v % 2, style, role) for v in range(6) for role in ROLES} == {
        hack_completion(TWO_SUM, "sentinel", v, style) for v in range(2)}
    assert {lever_in_form(TWO_SUM, "sentinel", "class Solution:\n    pass\n", style, v, role)
            for v in range(6) for role in ROLES} == {lever_in_form(TWO_SUM, "sentinel", "class Solution:\n    pass\n",
                                                                   style, 0)}


def test_an_unknown_role_or_style_is_refused_by_name():
    with pytest.raises(ValueError, match="'teacher'"):
        forms("run_tests", "teacher")
    with pytest.raises(ValueError, match="'mixed'"):
        hack_in_form(TWO_SUM, "run_tests", 0, "mixed")
