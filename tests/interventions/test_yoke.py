"""Yoked placebos: step by step as strong as their method's run at the same seed (pgrpo/interventions/yoke.py)."""

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from pgrpo.cli import main
from pgrpo.commands.sweep import config_of
from pgrpo.interventions import AdvShortcut, AdvShortcutV, Erase, ProbePenalty
from pgrpo.interventions.yoke import Yoke
from pgrpo.records.events import keep_scalars, read_scalars
from test_cli import REPO, fast


def yoke_of(tmp_path: Path, scalars: dict[str, list[tuple[int, float]]]) -> Yoke:
    """A yoke on a method's run that logged `scalars` (kept as a sweep keeps them)."""
    run = tmp_path / "method"
    run.mkdir()
    keep_scalars(scalars, run / "scalars.json.gz")
    return Yoke(str(run))


def test_it_flags_as_many_student_and_teacher_rows_as_its_method_those_it_scores_highest(tmp_path):
    yoke = yoke_of(tmp_path, {"loss": [(3, 0.1)], "intervention/rollout_rate_student": [(3, 0.5)],
                              "intervention/rollout_rate_teacher": [(3, 0.25)]})
    scores = torch.tensor([[0.9, 0.1, 0.2, 0.8, 0.3, 0.0], [0.4, 0.7, 0.6, 0.1, 0.2, 0.5]])  # 4 student, 2 teacher
    flags = yoke.flags(SimpleNamespace(n_student=4, global_step=3), scores)
    assert flags.tolist() == [[True, False, False, True, False, False], [False, True, True, False, False, True]]


def test_a_step_without_a_gradient_is_matched_by_acting_on_nothing_and_one_never_logged_is_an_error(tmp_path):
    yoke = yoke_of(tmp_path, {"loss": [(0, 0.1), (1, 0.0)], "hackward_share/gradient": [(0, 0.4)],
                              "intervention/gradient_removed": [(0, 0.3)]})
    assert yoke.rate("intervention/gradient_removed", 0) == pytest.approx(0.3)
    assert yoke.rate("intervention/gradient_removed", 1) == 0.0  # idle: every group without reward variance
    with pytest.raises(ValueError, match=rf"{tmp_path / 'method'}.*no step 2 \(its last: 1\)"):
        yoke.rate("intervention/gradient_removed", 2)


def test_a_missing_method_run_names_its_path_and_a_method_is_never_yoked(tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "no_such_run")):
        Erase(v="random", yoked_to=str(tmp_path / "no_such_run")).yoke.scalars()
    with pytest.raises(ValueError, match="only a placebo"):
        ProbePenalty(yoked_to=str(tmp_path))
    for refused in (lambda: AdvShortcut(detector="random", yoked_to="run"), lambda: AdvShortcutV(v="random",
                                                                                                  yoked_to="run")):
        with pytest.raises(ValueError, match="cannot be yoked.*penalty grows with each rollout's score"):
            refused()


def run_dir(logs: Path) -> Path:
    (events,) = logs.rglob("events.out.tfevents.*")
    return events.parent


@pytest.mark.parametrize("method, placebo, tags, tolerance, overlay", [
    # within one rollout of 8 student (2 prompts × 4) and of the teacher rows
    ("probe_penalty", "probe_penalty_random",
     ["intervention/rollout_rate_student", "intervention/rollout_rate_teacher"], 1 / 8, None),
    ("erase", "random_v", ["intervention/gradient_removed"], 1e-4, None),
    # the update hook runs after the optimizer's step, where Lightning's own step count has already moved on
    ("erase", "random_v", ["intervention/update_removed"], 1e-4, "projection/update"),
])
def test_a_yoked_placebo_acts_as_strongly_as_its_method_at_every_step(tmp_path, method, placebo, tags, tolerance,
                                                                      overlay):
    both = ["--config", str(config_of(overlay, overlay, REPO / "configs"))] if overlay else []
    main(fast(method, tmp_path / "method", 3, *both))
    method_run = run_dir(tmp_path / "method")
    main(fast(placebo, tmp_path / "placebo", 3, f"--model.intervention.init_args.yoked_to={method_run}", *both))
    theirs, ours = read_scalars(method_run), read_scalars(run_dir(tmp_path / "placebo"))
    for tag in tags:
        wanted = dict(theirs[tag])
        assert wanted and any(v > 0 for v in wanted.values()), f"the method never acted: {tag} {wanted}"
        for step, got in ours[tag]:
            if tag.startswith("intervention/rollout_rate") or step in dict(theirs["hackward_share/gradient"]):
                assert got == pytest.approx(wanted[step], abs=tolerance), (tag, step)
