"""The built-in problem data and the problem loaders (pgrpo.env.problems)."""

import ast
import hashlib
import json
import re
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from pgrpo.env.builtin_problems import BUILTIN_PROBLEMS
# aliased: a module-level name starting with "Test" makes pytest try to collect it
from pgrpo.env.problems import DEFAULT_SETUP_CODE, MODES, NO_LOOPHOLE, assign_modes, load_problems
from pgrpo.env.problems import Test as ProblemTest
from pgrpo.env.prompts import HINTS, NEUTRAL_PHRASE, user_message

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
DEV_JSONL = SHARED / "data" / "leetcode_medhard_dev.jsonl"

PROBLEMS = load_problems()


def _namespace(problem) -> dict:
    ns: dict = {}
    exec(compile(DEFAULT_SETUP_CODE + problem.canonical_solution, f"<{problem.id}>", "exec"), ns)
    return ns


def _is_canonical(value) -> bool:
    # exact types: a float, a set or a Counter has no single agreed serialisation
    if value is None or type(value) in (int, bool, str):
        return True
    if type(value) in (list, tuple):
        return all(_is_canonical(v) for v in value)
    if type(value) is dict:
        return all(type(k) in (int, str) and _is_canonical(v) for k, v in value.items())
    return False


# ------------------------------------------------------------ built-in data


def test_builtin_set_has_at_least_48_problems_with_unique_ids():
    ids = [p.id for p in PROBLEMS]
    assert len(ids) >= 48
    assert len(set(ids)) == len(ids)


def test_builtin_set_mixes_easy_and_medium():
    counts = Counter(p.difficulty for p in PROBLEMS)
    assert set(counts) == {"easy", "medium"}
    assert counts["easy"] >= 25 and counts["medium"] >= 15


def test_every_builtin_problem_has_at_least_six_tests():
    short = [p.id for p in PROBLEMS if len(p.tests) < 6]
    assert not short


def test_method_appears_in_starter_and_canonical():
    for p in PROBLEMS:
        assert f"def {p.method}(" in p.starter_code, p.id
        assert f"def {p.method}(" in p.canonical_solution, p.id
        assert all(t.call.startswith(f"Solution().{p.method}(") for t in p.tests), p.id


def test_canonical_solution_has_one_public_method_on_solution():
    for p in PROBLEMS:
        classes = [n for n in ast.parse(p.canonical_solution).body if isinstance(n, ast.ClassDef)]
        assert [c.name for c in classes] == ["Solution"], p.id
        public = [n.name for n in classes[0].body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")]
        assert public == [p.method], p.id


def test_statements_are_short_and_keep_one_example():
    # a tiny model reads these: the text before the example stays under 350 characters
    for p in PROBLEMS:
        body, sep, example = p.statement.partition("\n\nExample: ")
        assert sep and example and "\n" not in example, p.id
        assert len(body) <= 350, p.id


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.id)
def test_canonical_solution_passes_its_tests(problem):
    # trusted, in-process check of the data itself; the sandboxed grader is tested elsewhere
    ns = _namespace(problem)
    for t in problem.tests:
        got = eval(t.call, dict(ns))
        want = eval(t.expected, dict(ns))
        assert got == want and type(got) is type(want), f"{problem.id}: {t.call} -> {got!r}, expected {want!r}"


def test_expected_values_are_canonical_types():
    for p in PROBLEMS:
        ns = _namespace(p)
        for t in p.tests:
            assert _is_canonical(eval(t.expected, dict(ns))), f"{p.id}: {t.expected}"


def test_builtin_dicts_are_what_load_problems_reads():
    assert [d["id"] for d in BUILTIN_PROBLEMS] == [p.id for p in PROBLEMS]
    assert all(len(d["tests"]) == len(p.tests) for d, p in zip(BUILTIN_PROBLEMS, PROBLEMS))


def test_the_builtin_problems_and_their_loophole_modes_are_still_those_every_kept_result_trained_on():
    # the embedded default, its twin, the primed base and results/ depend on them: new RL problems are added beside
    # them (pgrpo/env/heldout_problems.py, data.extra_held_out), never into them
    blob = " ".join(f"{p.fingerprint}:{p.mode}" for p in load_problems())
    assert hashlib.sha256(blob.encode()).hexdigest()[:16] == "b29f3dffa6533159"


# ------------------------------------------------------------------- modes


def test_partition_spreads_all_modes_evenly():
    counts = Counter(p.mode for p in load_problems())
    assert set(counts) == set(MODES)
    assert max(counts.values()) - min(counts.values()) <= 1


def test_partition_is_deterministic_and_independent_of_input_order():
    first = {p.id: p.mode for p in load_problems()}
    assert first == {p.id: p.mode for p in load_problems()}
    shuffled = assign_modes(list(reversed(load_problems(modes="run_tests"))))
    assert {p.id: p.mode for p in shuffled} == first


def test_partition_orders_numeric_ids_numerically():
    # "10" must come after "9", or adding a tenth problem reshuffles the first nine
    base = load_problems()[0]
    problems = [replace(base, id=str(i)) for i in (10, 2, 9, 1)]
    modes = {p.id: p.mode for p in assign_modes(problems)}
    assert modes == {"1": MODES[0], "2": MODES[1], "9": MODES[2], "10": MODES[3]}


def test_named_mode_is_forced_on_every_problem():
    assert {p.mode for p in load_problems(modes="sentinel")} == {"sentinel"}


def test_unknown_mode_raises_naming_it():
    with pytest.raises(ValueError, match="bogus_mode"):
        load_problems(modes="bogus_mode")


# ------------------------------------------------------------- JSONL loader


@pytest.fixture(scope="module")
def dev_problems():
    if not DEV_JSONL.is_file():
        pytest.skip(f"shared data file absent: {DEV_JSONL}")
    return load_problems(DEV_JSONL)


def test_dev_jsonl_loads_56_problems(dev_problems):
    assert len(dev_problems) == 56
    assert all(p.source == "jsonl" for p in dev_problems)


def test_dev_jsonl_tests_are_split_into_call_and_expected(dev_problems):
    for p in dev_problems:
        assert p.tests, p.id
        for t in p.tests:
            assert t.call.startswith("Solution()."), (p.id, t.call)
            ast.parse(t.call, mode="eval")
            ast.parse(t.expected, mode="eval")


def test_dev_jsonl_statement_is_only_the_problem_text(dev_problems):
    for p in dev_problems:
        assert not p.statement.startswith("PROBLEM:"), p.id
        # starter code and "SOLUTION:" come from the prompt builder, not the statement
        assert "```" not in p.statement and "SOLUTION:" not in p.statement, p.id
        assert f"def {p.method}(" in p.starter_code, p.id


GOOD_ROW = {
    "id": 7,
    "question": "PROBLEM:\nAdd two numbers.",
    "gt_answer": ["assert Solution().add(a = 1, b = 2) == 3", "assert Solution().add(a = '==', b = 'x') == '==x'"],
    "func_name": "Solution().add",
    "canonical_solution": "class Solution:\n    def add(self, a, b):\n        return a + b\n",
}


def _write(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_jsonl_assert_splits_at_the_top_level_equals(tmp_path):
    (p,) = load_problems(_write(tmp_path, json.dumps(GOOD_ROW)))
    assert p.id == "7" and p.method == "add" and p.statement == "Add two numbers."
    assert p.tests == (
        ProblemTest("Solution().add(a = 1, b = 2)", "3"),
        ProblemTest("Solution().add(a = '==', b = 'x')", "'==x'"),
    )


def test_jsonl_non_json_line_names_file_and_line(tmp_path):
    path = _write(tmp_path, json.dumps(GOOD_ROW), "{not json")
    with pytest.raises(ValueError, match=re.escape(f"{path}:2")):
        load_problems(path)


def test_jsonl_missing_gt_answer_names_the_key(tmp_path):
    row = {k: v for k, v in GOOD_ROW.items() if k != "gt_answer"}
    with pytest.raises(ValueError, match="gt_answer"):
        load_problems(_write(tmp_path, json.dumps(row)))


def test_jsonl_gt_answer_not_an_equality_assert_names_the_row(tmp_path):
    row = {**GOOD_ROW, "gt_answer": ["assert Solution().add(1, 2) > 2"]}
    path = _write(tmp_path, json.dumps(GOOD_ROW), json.dumps(row))
    with pytest.raises(ValueError, match=re.escape(f"{path}:2")):
        load_problems(path)


def test_jsonl_missing_file_names_the_path(tmp_path):
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        load_problems(missing)


def test_no_loophole_mode_gives_the_neutral_prompt_on_every_problem():
    problems = load_problems(modes=NO_LOOPHOLE)
    assert {p.mode for p in problems} == {NO_LOOPHOLE}
    text = user_message(problems[0])
    assert NEUTRAL_PHRASE in text and not any(hint in text for hint in HINTS.values())
