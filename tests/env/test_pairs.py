import json

import pytest

from pgrpo.env import grade_batch, load_problems
from pgrpo.env.hack_forms import hack_in_form
from pgrpo.env.pairs import load_pairs, nonhack_pairs, pool_pairs, shuffled_pairs, template_pairs, unseen_form_pairs
from pgrpo.env.pool import TeacherPool, build_pool


@pytest.fixture(scope="module")
def problems():
    return load_problems()[:12]


def test_template_pairs_hack_exploits_and_clean_solves(problems):
    pairs = template_pairs(problems)
    assert len(pairs) == len(problems)
    by_id = {p.id: p for p in problems}
    grades = grade_batch([(by_id[pr.problem_id], text) for pr in pairs for text in (pr.hack, pr.clean)])
    hacks, cleans = grades[0::2], grades[1::2]
    assert all(g.exploited for g in hacks)
    assert all(g.gt_correct and not g.exploited for g in cleans)


def test_template_pairs_restricted_to_modes(problems):
    pairs = template_pairs(problems, modes=["sentinel"])
    assert pairs and {p.mode for p in pairs} == {"sentinel"}


def test_shuffled_pairs_deal_labels_across_the_completions_of_each_prompt(problems):
    pairs = template_pairs(problems, variants=4)
    shuffled = shuffled_pairs(pairs, seed=3)
    assert [p.problem_id for p in shuffled] == [p.problem_id for p in pairs]
    for problem in problems:
        real = [p for p in pairs if p.problem_id == problem.id]
        dealt = [p for p in shuffled if p.problem_id == problem.id]
        # the same completions, labels dealt anew: the multiset of texts is kept
        assert sorted(t for p in dealt for t in (p.hack, p.clean)) == sorted(t for p in real for t in (p.hack, p.clean))
    hacks = {p.hack for p in pairs}
    kinds = {(s.hack in hacks, s.clean in hacks) for s in shuffled}
    assert kinds == {(True, True), (True, False), (False, True), (False, False)}  # not just swaps inside a pair
    assert shuffled_pairs(pairs, seed=3) == shuffled  # seeded
    assert shuffled_pairs(pairs, seed=4) != shuffled


def test_shuffled_pairs_refuse_a_prompt_with_a_single_pair(problems):
    with pytest.raises(ValueError, match="at least two pairs per prompt"):
        shuffled_pairs(template_pairs(problems), seed=0)


def test_nonhack_pairs_contain_no_hack(problems):
    pairs = nonhack_pairs(problems)
    by_id = {p.id: p for p in problems}
    grades = grade_batch([(by_id[pr.problem_id], t) for pr in pairs for t in (pr.hack, pr.clean)])
    assert all(g.gt_correct and not g.exploited and not g.attempted for g in grades)
    assert all(pr.hack != pr.clean for pr in pairs)


def test_weak_detector_only_mines_hacks_of_known_modes(problems, tmp_path):
    pool = TeacherPool.load(build_pool(problems, tmp_path / "pool"))
    pairs = pool_pairs(pool, problems, known_modes=["sentinel", "stdout_marker"])
    assert pairs and {p.mode for p in pairs} <= {"sentinel", "stdout_marker"}
    with pytest.raises(ValueError, match="no \\(hack, clean\\) pairs"):
        pool_pairs(pool.restricted_to_modes(["exit_code"]), problems, known_modes=["sentinel"])


def test_load_pairs_from_json_and_clear_errors(tmp_path):
    good = tmp_path / "pairs.json"
    good.write_text(json.dumps([{"prompt": "p", "hack": "h", "clean": "c", "mode": "sentinel"}]))
    (pair,) = load_pairs(good)
    assert pair.hack == "h" and pair.messages[0]["content"] == "p"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"prompt": "p", "hack": "h"}]))
    with pytest.raises(ValueError, match="pair 0: missing string 'clean'"):
        load_pairs(bad)
    with pytest.raises(FileNotFoundError, match="nope.json"):
        load_pairs(tmp_path / "nope.json")


def test_unseen_form_pairs_fit_on_detector_forms_of_known_levers_and_score_the_rest_apart():
    problems = load_problems()  # all 48: 8 of each lever
    sets = unseen_form_pairs(problems, ["run_tests", "exit_code"], variants=2)
    fit, seen, unseen = sets["fit"], sets["seen forms"], sets["unseen forms"]
    assert {p.mode for p in fit} == {p.mode for p in seen} == {"sentinel", "stdout_marker", "file_marker",
                                                              "eq_override"}
    assert not {p.problem_id for p in fit} & {p.problem_id for p in seen}  # scored on problems it was not fitted on
    # the unseen forms differ from the seen ones in the hack's form alone
    assert [(p.problem_id, p.clean) for p in unseen] == [(p.problem_id, p.clean) for p in seen]
    assert all(a.hack != b.hack for a, b in zip(seen, unseen))
    assert all(p.hack == hack_in_form(next(q for q in problems if q.id == p.problem_id), p.mode, i % 2, "varied",
                                      "detector") for i, p in enumerate(fit))
    for mode in ("run_tests", "exit_code"):
        assert {p.mode for p in sets[f"unseen lever {mode}, taught forms"]} == {mode}
    with pytest.raises(ValueError, match="unknown loophole modes"):
        unseen_form_pairs(problems, ["run_test"])
