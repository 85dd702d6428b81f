"""A run's numbers read back: the tags renamed on 2026-12-07 read under today's names, from event files and from
kept scalars alike."""

from pathlib import Path

from pgrpo.records.events import RENAMED_TAGS, find_runs, keep_scalars, read_kept_scalars, with_current_tags

RESULTS = Path(__file__).resolve().parents[2] / "results"


def test_kept_scalars_logged_under_the_old_tags_read_under_todays(tmp_path):
    path = tmp_path / "scalars.json.gz"
    keep_scalars({"proj/cin_student": [(0, 0.25)], "proj/cout": [(0, 0.5)], "hack/student": [(0, 1.0)]}, path)
    assert read_kept_scalars(path) == {"hackward_share/student": [(0, 0.25)],
                                       "hackward_share/edited_gradient": [(0, 0.5)], "hack/student": [(0, 1.0)]}


def test_a_run_resumed_across_the_rename_joins_its_two_names_and_the_newer_wins_a_step_logged_under_both():
    scalars = {"hackward_share/gradient": [(2, 0.9), (3, 0.3)], "proj/cin": [(0, 0.1), (1, 0.2), (2, 0.8)]}
    assert with_current_tags(scalars) == {"hackward_share/gradient": [(0, 0.1), (1, 0.2), (2, 0.9), (3, 0.3)]}


def test_no_two_old_tags_share_a_new_name_and_no_new_name_is_itself_renamed():
    assert len(set(RENAMED_TAGS.values())) == len(RENAMED_TAGS)
    assert not set(RENAMED_TAGS.values()) & set(RENAMED_TAGS)


def test_the_committed_cells_kept_before_the_rename_read_under_todays_tags():
    runs = find_runs(RESULTS / "smollm2-primed")
    assert runs, "results/smollm2-primed holds kept cells"
    for run in runs:
        assert not set(run.scalars) & set(RENAMED_TAGS), run.path
        assert run.scalars["hackward_share/student"], run.path
