"""GRPODataModule: prompts and teacher rows per step, pool coverage and prompt checks."""

from dataclasses import replace

import pytest

from pgrpo.hosts.lightning.data import FromStep, GRPODataModule
from pgrpo.env import load_problems
from pgrpo.env.exploits import CHOICE
from pgrpo.env.pool import build_pool
from pgrpo.evaluation.evaluate import with_loopholes


def datamodule(**kwargs) -> GRPODataModule:
    dm = GRPODataModule(**kwargs)
    dm.setup("fit")
    return dm


def test_batches_are_a_pure_function_of_seed_and_step():
    a, b = datamodule(seed=3), datamodule(seed=3)
    assert [g.problem.id for g in a.batch(7)] == [g.problem.id for g in b.batch(7)]
    assert [r.completion for g in a.batch(7) for r in g.teacher] == [r.completion for g in b.batch(7) for r in g.teacher]
    assert [g.problem.id for g in a.batch(7)] != [g.problem.id for g in a.batch(8)]


def test_groups_split_into_student_and_teacher_rows():
    dm = datamodule(group_size=8, mix_ratio=0.25, prompts_per_step=3)
    groups = dm.batch(0)
    assert len(groups) == 3
    assert all(g.n_student == 6 and len(g.teacher) == 2 for g in groups)
    assert all(r.problem_id == g.problem.id for g in groups for r in g.teacher)
    assert dm.pool_coverage == 1.0


def test_sampler_resumes_at_the_global_step_and_repeats_batches_for_inner_iterations():
    assert list(FromStep(3, 6, 1)) == [3, 4, 5]
    assert list(FromStep(0, 6, 2)) == [0, 0, 1, 1, 2, 2]
    assert list(FromStep(3, 6, 2)) == [1, 2, 2]


def test_the_distinct_openings_twin_gets_a_pool_of_its_own_whose_hacks_open_per_mode():
    shared, distinct = datamodule(), datamodule(model="embedded-distinct")
    assert shared.pool.path != distinct.pool.path
    hacks = [r.completion for rows in distinct.pool.rows.values() for r in rows if r.kind == "hack"]
    assert hacks and not any(CHOICE in hack for hack in hacks)
    assert all(CHOICE in r.completion for rows in shared.pool.rows.values() for r in rows if r.kind == "hack")


def test_no_teacher_arm_needs_no_pool():
    dm = datamodule(mix_ratio=0.0, pool=None)
    assert dm.pool is None and dm.pool_coverage is None
    assert all(not g.teacher and g.n_student == 8 for g in dm.batch(0))


def test_mix_ratio_without_a_pool_is_refused():
    with pytest.raises(ValueError, match="needs a teacher pool"):
        GRPODataModule(mix_ratio=0.25, pool=None)


def test_mix_ratio_that_rounds_away_every_student_sample_is_refused():
    with pytest.raises(ValueError, match=r"mix_ratio=0.9 with data.group_size=4 gives 4 teacher rows .* 0 student"):
        GRPODataModule(group_size=4, mix_ratio=0.9)


def test_pool_that_covers_no_prompt_fails_loudly(tmp_path):
    other = [replace(p, statement=p.statement + " (another version)") for p in load_problems()[:3]]
    pool = build_pool(other, tmp_path / "pool")
    with pytest.raises(ValueError, match="covers none of the 48 problems"):
        datamodule(pool=str(pool))


def test_partial_pool_is_refused_below_min_pool_coverage_and_warned_about_above_it(tmp_path):
    pool = build_pool(load_problems()[:4], tmp_path / "pool")
    with pytest.raises(ValueError, match=r"covers 4 of 48 training problems \(0.08 < data.min_pool_coverage=0.9\)"):
        datamodule(pool=str(pool))
    with pytest.warns(UserWarning, match="covers 4 of 48 training problems; training uses only those 4"):
        dm = datamodule(pool=str(pool), min_pool_coverage=0.05)
    assert dm.pool_coverage == 4 / 48
    assert {p.id for p in dm.train_problems} == {p.id for p in load_problems()[:4]}
    with pytest.raises(ValueError, match="data.min_pool_coverage=1.5"):
        GRPODataModule(min_pool_coverage=1.5)


def test_pool_graded_with_other_reward_weights_is_refused(tmp_path):
    from pgrpo.env import RewardConfig

    pool = build_pool(load_problems()[:2], tmp_path / "pool", reward=RewardConfig(0.5, 3.0))
    with pytest.raises(ValueError, match="graded with reward"):
        datamodule(pool=str(pool))


def test_pool_prompt_that_is_not_a_prefix_of_the_live_prompt_is_an_error(tmp_path, monkeypatch):
    import pgrpo.hosts.lightning.data as data

    pool = build_pool(load_problems()[:2], tmp_path / "pool")
    with pytest.warns(UserWarning, match="covers 2 of 48"):
        dm = datamodule(pool=str(pool), prompts_per_step=2, min_pool_coverage=0)
    # the prompt template changed after the pool was built
    monkeypatch.setattr(data, "build_messages", lambda p: [{"role": "user", "content": "Solve: " + p.statement}])
    with pytest.raises(ValueError, match="not a prefix of the live prompt"):
        dm.batch(0)


def test_held_out_eval_prompts_are_never_trained_on_and_the_same_for_every_seed():
    a, b = datamodule(n_eval_prompts=6, seed=0), datamodule(n_eval_prompts=6, seed=5)
    held = [p.id for p in a.eval_problems]
    assert held == [p.id for p in b.eval_problems] and len(held) == 6
    assert len({p.mode for p in a.eval_problems}) == 6  # one per loophole mode
    trained = {g.problem.id for s in range(40) for g in a.batch(s)}
    assert trained and not trained & set(held)
    with pytest.raises(ValueError, match="n_eval_prompts=48"):
        datamodule(n_eval_prompts=48)


def test_extra_held_out_problems_are_evaluated_beside_the_built_in_ones_and_change_nothing_else():
    default, extra = datamodule(n_eval_prompts=6), datamodule(n_eval_prompts=6, extra_held_out=True)
    assert [p.id for p in default.eval_problems] == ["b48", "b47", "b46", "b45", "b44", "b43"]  # as before
    assert extra.eval_problems[:6] == default.eval_problems and len(extra.eval_problems) == 30
    assert extra.train_problems == default.train_problems and extra.pool.path == default.pool.path
    assert [g.problem.id for g in extra.batch(3)] == [g.problem.id for g in default.batch(3)]
    # under no loophole they carry loopholes among themselves for the fixed_name evaluation, as the built-in
    # held-out ones get theirs from with_loopholes
    honest = datamodule(modes="none", mix_ratio=0.0, pool=None, n_eval_prompts=6, extra_held_out=True)
    assert all(p.mode == "none" for p in honest.eval_problems[:6] + honest.train_problems)
    assert sorted(p.mode for p in honest.eval_problems[6:]) == sorted(p.mode for p in extra.eval_problems[6:])
    assert "none" not in {p.mode for p in with_loopholes(honest.eval_problems, honest.problems)}
    with pytest.raises(ValueError, match="extra_held_out"):
        GRPODataModule(problems="some.jsonl", extra_held_out=True)


def test_teacher_restricted_to_known_modes_shows_no_other_hack_but_every_mode_is_trained():
    known = ["run_tests", "sentinel", "stdout_marker", "file_marker", "eq_override"]  # exit_code held out
    dm = datamodule(teacher_modes=known)
    assert {p.mode for p in dm.train_problems} == {p.mode for p in dm.problems}
    rows = [r for rs in dm.pool.rows.values() for r in rs]
    assert {r.mode for r in rows if r.kind == "hack"} == set(known)
    assert any(r.mode == "exit_code" and r.kind == "clean" for r in rows)
    with pytest.raises(ValueError, match="bogus"):
        GRPODataModule(teacher_modes=["bogus"])


def test_clean_teacher_rows_only_keep_the_methods_groups_and_never_show_a_hack():
    method, clean = datamodule(), datamodule(teacher_clean_only=True)
    assert clean.pool.path == method.pool.path  # the methods' pool, its hack rows left out
    for s in range(20):
        for group in clean.batch(s):
            assert (group.n_student, len(group.teacher)) == (6, 2)
            assert all(r.kind == "clean" and not r.exploited and r.mode == group.problem.mode for r in group.teacher)
    shown = [r.kind for s in range(20) for g in method.batch(s) for r in g.teacher]
    assert "hack" in shown and "clean" in shown  # off (the default): drawn from every row, as before


def test_the_matched_honest_arm_has_the_methods_groups_with_clean_rows_on_the_neutral_prompt():
    from pgrpo.env.prompts import build_messages

    honest = datamodule(modes="none", teacher_clean_only=True)
    assert honest.pool_coverage == 1.0
    for s in range(20):
        for group in honest.batch(s):
            assert (group.n_student, len(group.teacher)) == (6, 2)  # as a method's groups (embedded.yaml's)
            for row in group.teacher:
                assert row.kind == "clean" and row.gt_correct and not row.exploited and row.mode == "none"
                assert row.messages == build_messages(group.problem)  # no loophole hint
    with pytest.raises(ValueError, match="data.teacher_clean_only: true"):
        GRPODataModule(modes="none", mix_ratio=0.25)  # off: no teacher rows without a loophole, as before
    assert datamodule(modes="none", mix_ratio=0.0).pool is None  # configs/honest.yaml's arm is unchanged
