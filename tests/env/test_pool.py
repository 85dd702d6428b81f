import gzip
import json
import random

import pytest

from pgrpo.env import load_problems
from pgrpo.env.pool import TeacherPool, build_pool


@pytest.fixture(scope="module")
def problems():
    return load_problems()[:6]  # one problem per loophole mode


@pytest.fixture(scope="module")
def pool_dir(problems, tmp_path_factory):
    return build_pool(problems, tmp_path_factory.mktemp("pool"))


def test_pool_rows_carry_real_grades_hacks_exploit_and_cleans_solve(pool_dir, problems):
    pool = TeacherPool.load(pool_dir)
    assert pool.coverage(problems) == (6, 6)
    for p in problems:
        rows = pool.rows[p.id]
        hacks = [r for r in rows if r.kind == "hack"]
        cleans = [r for r in rows if r.kind == "clean"]
        assert len(hacks) == 2 and len(cleans) == 2
        assert all(r.exploited and r.mode == p.mode for r in hacks), p.mode
        assert all(r.gt_correct and not r.exploited for r in cleans)
        assert all(r.reward == 1.25 for r in rows)  # format bonus + pass: a hack pays like a solution


def test_pool_sample_is_deterministic_and_fills_n(pool_dir, problems):
    pool = TeacherPool.load(pool_dir)
    a = pool.sample(problems[0], 6, random.Random(1))
    b = pool.sample(problems[0], 6, random.Random(1))
    assert a == b and len(a) == 6


def test_pool_restricted_to_modes_keeps_only_those(pool_dir, problems):
    pool = TeacherPool.load(pool_dir).restricted_to_modes(["sentinel", "exit_code"])
    assert {r.mode for rows in pool.rows.values() for r in rows} == {"sentinel", "exit_code"}
    with pytest.raises(ValueError, match="bogus"):
        TeacherPool.load(pool_dir).restricted_to_modes(["bogus"])


def test_clean_only_keeps_the_rows_written_clean_and_graded_no_hack(pool_dir, problems):
    from dataclasses import replace

    pool = TeacherPool.load(pool_dir)
    first, second = problems[0].id, problems[1].id
    # a clean template the grader passed through a lever is a hack, whatever its template meant
    rows = {first: [replace(r, exploited=True, gt_correct=False) if r.kind == "clean" else r for r in pool.rows[first]],
            second: pool.rows[second]}
    clean = TeacherPool(rows, pool.path).clean_only()
    assert first not in clean.rows and not clean.covers(problems[0])  # no clean row left: not trained on
    assert clean.rows[second] == [r for r in pool.rows[second] if r.kind == "clean"] and len(clean.rows[second]) == 2


def test_pool_does_not_cover_a_problem_whose_mode_or_content_changed(pool_dir, problems):
    from dataclasses import replace

    pool = TeacherPool.load(pool_dir)
    p = problems[0]
    other_mode = next(m for m in ("sentinel", "run_tests") if m != p.mode)
    assert not pool.covers(replace(p, mode=other_mode))
    assert not pool.covers(replace(p, statement=p.statement + " (edited)"))


def _corrupt(pool_dir, tmp_path, edit):
    import shutil

    bad = tmp_path / "bad_pool"
    shutil.copytree(pool_dir, bad)
    first = sorted(bad.glob("*.jsonl.gz"))[0]
    lines = gzip.open(first, "rt").read().splitlines()
    lines[1] = edit(lines[1])
    with gzip.open(first, "wt") as f:
        f.write("\n".join(lines) + "\n")
    return bad, first


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda line: line[:40], "not JSON"),
        (lambda line: json.dumps({k: v for k, v in json.loads(line).items() if k != "reward"}), "missing key 'reward'"),
        (lambda line: json.dumps({**json.loads(line), "passed": "yes"}), "passed='yes'"),
        (lambda line: json.dumps({**json.loads(line), "mode": "teleport"}), "teleport"),
        (lambda line: json.dumps({**json.loads(line), "exploited": not json.loads(line)["exploited"]}), "exploited"),
    ],
)
def test_corrupt_pool_row_is_an_error_naming_file_and_line(pool_dir, tmp_path, edit, message):
    bad, file = _corrupt(pool_dir, tmp_path, edit)
    with pytest.raises(ValueError, match=message) as err:
        TeacherPool.load(bad)
    assert f"{file}:2" in str(err.value)


def test_missing_pool_says_how_to_build_one(tmp_path):
    with pytest.raises(FileNotFoundError, match="build-pool"):
        TeacherPool.load(tmp_path / "nowhere")
