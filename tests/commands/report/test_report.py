"""`pgrpo report`: a sweep's event files -> the arm table, the per-mode table and the curves."""

import gzip
import json
import shutil
from itertools import takewhile
from pathlib import Path

import pytest
import yaml
from torch.utils.tensorboard import SummaryWriter

from pgrpo.cli import main
from pgrpo.env.problems import MODES
from pgrpo.records.events import RENAMED_TAGS
from pgrpo.commands.report.kinds import honest_rows_note, kind_label, pick_honest, run_kind
from pgrpo.commands.report.stats import separated
from pgrpo.records.events import HACK, KEPT_SCALARS, SOLVE, Run, find_runs, keep_scalars, load_config, read_scalars

# each arm's intervention, as a saved config names it
CLASS = {"none": "pgrpo.interventions.Vanilla", "erase": "pgrpo.interventions.Erase",
         "route": "pgrpo.interventions.Route", "screen": "pgrpo.interventions.GtScreen"}
STEPS = 7  # the last 5 (steps 2..6) carry the values below; steps 0-1 hold decoys the report must ignore


def write_run(run: Path, arm: str, last5: dict[str, float], sparse: dict[str, dict[int, float]] = {},
              config: dict | None = None) -> None:
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump(config or {"model": {"intervention": {"class_path": CLASS[arm]}}}))
    writer = SummaryWriter(str(run))
    for tag, value in last5.items():
        for step in range(STEPS):
            writer.add_scalar(tag, value if step >= 2 else 9.0, step)
    for tag, values in sparse.items():
        for step, value in values.items():
            writer.add_scalar(tag, value, step)
    writer.close()


def table(text: str, first: str) -> dict[str, dict[str, str]]:
    """The markdown table in `text` whose header begins with column `first`: row name -> column -> cell."""
    def cells(line: str) -> list[str]:
        return [c.strip() for c in line.strip().strip("|").split("|")]

    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first} |"))
    header = cells(lines[start])
    rows = takewhile(lambda line: line.startswith("| "), lines[start + 2:])
    return {row[0]: dict(zip(header, row)) for row in map(cells, rows)}


def deltas(text: str) -> dict[str, list[str]]:
    return {arm: [row["Δhack"], row["Δsolve"]] for arm, row in table(text, "arm").items()}


def shares(student: float, teacher: float | None = None, logged_before_the_rename: bool = False) -> dict[str, float]:
    """The hack-ward shares and their nulls, under today's tags or those of a run from before 2026-12-07."""
    tags = {"hackward_share/student": student, "hackward_share/student_null": 0.2} | (
        {"hackward_share/teacher": teacher, "hackward_share/teacher_null": 0.1} if teacher else {})
    old = {new: old for old, new in RENAMED_TAGS.items()}
    return {old[tag]: value for tag, value in tags.items()} if logged_before_the_rename else tags


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("logs") / "demo"
    # vanilla's seed 0 logged its shares under the tags of before 2026-12-07: the report reads them all the same
    write_run(root / "vanilla" / "seed0", "none", {"hack/student": 0.6, "solve/student": 0.2,
                                                  **shares(0.3, 0.5, logged_before_the_rename=True),
                                                  "hack/student_sentinel": 1.0, "solve/student_sentinel": 0.0})
    write_run(root / "vanilla" / "seed1", "none", {"hack/student": 0.8, "solve/student": 0.4, **shares(0.5, 0.7),
                                                  "hack/student_sentinel": 0.5, "solve/student_sentinel": 0.5})
    write_run(root / "erase" / "seed0", "erase", {"hack/student": 0.2, "solve/student": 0.2, **shares(0.1, 0.2),
                                                 "hack/student_sentinel": 0.0, "solve/student_sentinel": 0.5,
                                                 "hack/student_exit_code": 0.25, "solve/student_exit_code": 0.75})
    write_run(root / "erase" / "seed1", "erase", {"hack/student": 0.6, "solve/student": 0.2, **shares(0.3, 0.4),
                                                 "hack/student_sentinel": 0.0, "solve/student_sentinel": 0.5})
    write_run(root / "route" / "seed0", "route", {"hack/student": 0.5, "solve/student": 0.3, **shares(0.25)},
              sparse={"deploy/hack": {3: 0.9, 6: 0.1}, "deploy/solve": {3: 0.5, 6: 0.25}})
    # what else lives in a sweep directory, and must not break or change the report
    write_run(root / "erase" / "seed2", "erase", {"lr": 0.01})  # died before its first step: no hack curve
    (root / "erase" / "seed0" / "events.out.tfevents.9.garbage").write_bytes(b"\x00not a record\xff" * 20)
    (root / "erase" / "seed0" / "checkpoints").mkdir()
    (root / "erase" / "seed0" / "checkpoints" / "last.ckpt").write_bytes(b"\x80junk")
    (root / "erase" / "seed0" / "fit.log").write_text("Traceback (most recent call last): ...\n")
    (root / "erase" / "seed0" / "cell.json").write_text('{"status": "done"')  # truncated JSON
    (root / "notes.txt").write_text("not a run\n")
    return root


def expected(root: Path) -> str:
    return f"""# pgrpo report: {root}

Code: not recorded by 5 runs (from before runs recorded their code).

Last-5-step mean ± sample std over seeds; Δ = paired difference with `vanilla` at the same seed; (n.s.): the 95% t-interval of the paired differences contains 0, or fewer than 2 seeds pair up: these seeds cannot separate the two arms. solve − honest: – (this sweep has no honest arm, data.modes none). hacked = runs that at some step hacked more samples than they solved. placebo gap = hack of the arm's own placebo (the same intervention on a random detector; of several, the one that hacks least) minus the arm's, paired by seed, and (k/n): the seeds at which the arm hacks less. hack-ward * is the hack-ward share of the gradient, ‖relu(V g)‖/‖g‖; null * is its value for a random direction with the same per-module norms, √(Σ w·k/2r).

| arm | kind | seeds | hack | solve | Δhack | Δsolve | solve − honest | hacked | placebo gap | hack-ward student | null student | hack-ward teacher | null teacher | deploy hack | deploy solve |
|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|
| vanilla | vanilla | 2 | 0.700 ± 0.141 | 0.300 ± 0.141 | – | – | – | 2/2 | – | 0.400 ± 0.141 | 0.200 ± 0.000 | 0.600 ± 0.141 | 0.100 ± 0.000 | – | – |
| erase | method | 2 | 0.400 ± 0.283 | 0.200 ± 0.000 | -0.300 ± 0.141 (n.s.) | -0.100 ± 0.141 (n.s.) | – | 1/2 | – | 0.200 ± 0.141 | 0.200 ± 0.000 | 0.300 ± 0.141 | 0.100 ± 0.000 | – | – |
| route | method | 1 | 0.500 | 0.300 | -0.100 (n.s.) | 0.100 (n.s.) | – | 1/1 | – | 0.250 | 0.200 | – | – | 0.100 | 0.250 |

Per loophole mode, hack / solve (last-5-step means over seeds):

| arm | exit_code | sentinel |
|---|---|---|
| vanilla | – / – | 0.75 / 0.25 |
| erase | 0.25 / 0.75 | 0.00 / 0.50 |
| route | – / – | – / – |

Curves: {root}/report/hack.png, {root}/report/solve.png; hack against solve per run: {root}/report/matched.png; drawn from the runs under {root} that figures.json names
"""


def test_report_prints_exactly_the_expected_tables_and_skips_what_is_not_a_run(sweep_dir, capsys):
    main(["report", str(sweep_dir), "--full"])
    assert capsys.readouterr().out == expected(sweep_dir)
    assert (sweep_dir / "report" / "report.md").read_text() == expected(sweep_dir)


def test_by_default_the_terminal_gets_the_end_rates_their_differences_the_figures_and_where_the_rest_is(tmp_path,
                                                                                                        capsys):
    # as `make demo` leaves logs/demo: one seed of each arm, each ending on its end-of-run evaluation
    root = tmp_path / "demo"
    for arm, hacks, solves in (("vanilla", 199, 18), ("erase", 133, 27)):
        write_run(root / arm / "seed0", "none" if arm == "vanilla" else "erase",
                  {"hack/student": 0.5, "solve/student": 0.2},
                  sparse={"end/hack": {STEPS - 1: hacks / 336}, "end/solve": {STEPS - 1: solves / 336},
                          "end/samples": {STEPS - 1: 336.0}})
    main(["report", str(root)])
    out = capsys.readouterr().out
    report = root / "report"
    assert out == f"""vanilla vs erase: 1 seed each, {STEPS} steps, end-of-run evaluation on 336 samples per run

arm          end hack                 end solve
vanilla      0.592 [0.539, 0.643]     0.054 [0.034, 0.083]
erase        0.396 [0.345, 0.449]     0.080 [0.056, 0.114]
  − vanilla  -0.196 [-0.269, -0.121]  +0.027 [-0.012, +0.066]

− ARM: the arm above minus ARM, paired by seed.
[..]: 95% intervals (Wilson's for a run, t over seeds, Newcombe's for one seed's difference).

{report}/hack.png     hack rate per step, one line per arm (mean ± std over seeds)
{report}/solve.png    solve rate per step, one line per arm (mean ± std over seeds)
{report}/matched.png  each run's hack against its solve over its last steps
the full report, every table: {report}/report.md (--full prints it)
"""
    assert max(len(line.replace(str(report), "logs/demo/report")) for line in out.splitlines()) <= 100
    assert table((report / "report.md").read_text(), "arm")["erase"]["end hack"] == "0.396 [0.345, 0.449]"


def test_runs_without_an_end_of_run_evaluation_get_their_last_steps_and_the_heading_says_so(sweep_dir, capsys):
    main(["report", str(sweep_dir)])
    out = capsys.readouterr().out
    assert "| arm | kind |" not in out and "Per loophole mode" not in out
    assert out.splitlines()[:9] == [
        f"vanilla vs erase vs route: 1–2 seeds per arm, {STEPS} steps, last-5-step means (no end-of-run evaluation)",
        "",
        "arm          last-5 hack              last-5 solve",
        "vanilla      0.700 [0.000, 1.000]     0.300 [0.000, 1.000]",  # t(1) = 12.706: two seeds say little
        "erase        0.400 [0.000, 1.000]     0.200 [0.200, 0.200]",
        "  − vanilla  -0.300 [-1.571, +0.971]  -0.100 [-1.371, +1.171]",
        "route        0.500                    0.300",
        "  − vanilla  -0.100 (one seed)        +0.100 (one seed)",
        ""]
    assert "[..]: 95% intervals (t over seeds, none for one seed)." in out
    assert (sweep_dir / "report" / "report.md").read_text() == expected(sweep_dir)


def test_report_writes_hack_and_solve_curves_as_png(sweep_dir):
    main(["report", str(sweep_dir)])
    for name in ("hack.png", "solve.png"):
        assert (sweep_dir / "report" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_reports_figures_are_drawn_again_from_the_runs_its_figures_json_names(sweep_dir, tmp_path, monkeypatch):
    """The docs keep no PNG whose runs are kept: `make docs` draws them again, and they must be the same figures."""
    from pgrpo.commands.report.figures import FIGURES_FILE, figures_missing, redraw

    monkeypatch.chdir(sweep_dir.parent)  # a report names its LOGDIR as given: relative to where it ran
    out = tmp_path / "page"
    main(["report", sweep_dir.name, "--steps", "6", "--arms", "[erase, vanilla]", "--out", str(out)])
    record = json.loads((out / FIGURES_FILE).read_text())
    assert record == {"source": "demo", "runs": {"erase": ["seed0", "seed1"], "vanilla": ["seed0", "seed1"]},
                      "steps": 6, "last": 5, "honest": None,
                      "figures": ["hack.png", "solve.png", "matched.png"]}
    drawn = {name: (out / name).read_bytes() for name in record["figures"]}
    for name in drawn:
        (out / name).unlink()
    assert figures_missing(out)
    assert [p.name for p in redraw(out, root=sweep_dir.parent)] == record["figures"]
    assert {name: (out / name).read_bytes() for name in drawn} == drawn and not figures_missing(out)
    shutil.copytree(sweep_dir, tmp_path / "demo")
    shutil.rmtree(tmp_path / "demo" / "erase" / "seed1")
    missing = rf"{out / FIGURES_FILE}: runs not under {tmp_path / 'demo'}: erase/seed1"
    with pytest.raises(FileNotFoundError, match=missing):
        redraw(out, root=tmp_path)


def test_rerunning_the_report_ignores_its_own_output(sweep_dir, capsys):
    main(["report", str(sweep_dir), "--full"])
    main(["report", str(sweep_dir), "--full"])
    first, second = capsys.readouterr().out.split("# pgrpo report")[1:]
    assert first == second


def test_explicit_baseline_changes_the_pairing(sweep_dir, capsys):
    main(["report", str(sweep_dir), "--baseline", "erase", "--out", str(sweep_dir.parent / "elsewhere"), "--full"])
    assert deltas(capsys.readouterr().out)["vanilla"] == ["0.300 ± 0.141 (n.s.)", "0.100 ± 0.141 (n.s.)"]
    with pytest.raises(ValueError, match="no such arm"):
        main(["report", str(sweep_dir), "--baseline", "nope"])


def test_a_runs_kind_comes_from_its_config_and_missing_keys_mean_the_default(tmp_path):
    def kind(config: dict) -> str | None:
        path = tmp_path / str(len(list(tmp_path.iterdir())))
        path.mkdir()
        (path / "config.yaml").write_text(yaml.safe_dump(config))
        return run_kind(load_config(path))

    def chosen(name: str, **init_args) -> dict:
        return {"model": {"intervention": {"class_path": f"pgrpo.interventions.{name}", "init_args": init_args}}}

    # what the intervention declares: reads_oracle, measures_only, placebo (a V-reading one given a placebo V,
    assert kind(chosen("Vanilla")) == "vanilla"
    assert kind(chosen("AdvGate")) == kind(chosen("Route", target="position")) == "method"
    assert kind(chosen("Erase", v="random")) == kind(chosen("AdvGate", v="shuffled")) == "control"
    # ... or a placebo probe, direction or subspace
    assert kind(chosen("ProbePenalty")) == kind(chosen("AdvShortcut")) == kind(chosen("CleanSubspace")) == "method"
    assert kind(chosen("ProbePenalty", detector="random")) == kind(chosen("AdvShortcut", detector="random")) == \
        kind(chosen("CleanSubspace", subspace="random")) == "control"
    assert kind(chosen("GtScreen")) == kind(chosen("GtPenalty", penalty=2.0)) == "oracle skyline"
    assert kind({"model": {}}) == "vanilla"  # the default intervention
    # a run saved before the interventions: its projection arm, skyline and control callback
    control = {"class_path": "pgrpo.directions.controls.ControlBasis", "init_args": {"control": "random"}}
    assert kind({"model": {"projection": {"arm": "none"}}}) == "vanilla"
    assert kind({"model": {"projection": {"arm": None}, "skyline": {"kind": "none"}}}) == "vanilla"
    assert kind({"model": {"projection": {"arm": "adv_gate"}}}) == "method"
    assert kind({"model": {"projection": {"arm": "none"}}, "trainer": {"callbacks": [control]}}) == "control"
    assert kind({"model": {"skyline": {"kind": "penalty"}}}) == "oracle skyline"
    assert kind({"data": {"modes": "none"}}) == "positive control"
    assert run_kind(load_config(tmp_path / "no_config_here")) is None


def test_read_scalars_merges_a_resumed_run_and_survives_a_damaged_file(tmp_path):
    first = SummaryWriter(str(tmp_path))
    for step in range(3):
        first.add_scalar("hack/student", 1.0, step)
    first.close()
    second = SummaryWriter(str(tmp_path), filename_suffix=".resumed")
    for step in range(2, 4):  # the resumed process repeats step 2
        second.add_scalar("hack/student", 0.5, step)
    second.close()
    (tmp_path / "events.out.tfevents.zz.damaged").write_bytes(b"\xde\xad" * 50)
    assert read_scalars(tmp_path)["hack/student"] == [(0, 1.0), (1, 1.0), (2, 0.5), (3, 0.5)]


def test_a_report_from_a_sweeps_kept_scalars_gives_the_numbers_its_event_files_give(sweep_dir, tmp_path, capsys):
    kept = tmp_path / "results" / "demo"
    for run in find_runs(sweep_dir):  # as pgrpo sweep --results keeps each cell: no event files
        (kept / run.arm / run.seed).mkdir(parents=True)
        keep_scalars(run.scalars, kept / run.arm / run.seed / KEPT_SCALARS)
        shutil.copyfile(run.path / "config.yaml", kept / run.arm / run.seed / "config.yaml")
        assert read_scalars(kept / run.arm / run.seed) == run.scalars  # float32 values, bit for bit
    # committed with every cell: compressed (255 cells' JSON made a working tree too big to send to a GPU machine),
    # and the same scalars give the same bytes, so that a cell kept again leaves git nothing to commit
    path = kept / run.arm / run.seed / KEPT_SCALARS
    text = json.dumps(json.loads(gzip.decompress(path.read_bytes())), separators=(",", ":"))
    assert path.stat().st_size < len(text) / 2
    keep_scalars(run.scalars, tmp_path / "again.gz")
    assert (tmp_path / "again.gz").read_bytes() == path.read_bytes()
    main(["report", str(sweep_dir), "--out", str(tmp_path / "from_events")])
    main(["report", str(kept), "--out", str(tmp_path / "from_kept")])
    capsys.readouterr()
    for table_file in ("arms.md", "summary.md"):
        assert (tmp_path / "from_kept" / table_file).read_text() == (tmp_path / "from_events" / table_file).read_text()
    (kept / "vanilla" / "seed0" / KEPT_SCALARS).write_text("{not json")
    with pytest.raises(ValueError, match=f"vanilla/seed0/{KEPT_SCALARS}: not a run's kept scalars"):
        read_scalars(kept / "vanilla" / "seed0")


def test_an_arm_with_overlays_is_paired_with_vanilla_under_the_same_overlays(tmp_path, capsys):
    root = tmp_path / "overlays"
    write_run(root / "vanilla" / "seed0", "none", {"hack/student": 0.8, "solve/student": 0.1})
    write_run(root / "vanilla+no_teacher" / "seed0", "none", {"hack/student": 0.1, "solve/student": 0.3})
    write_run(root / "erase+no_teacher" / "seed0", "erase", {"hack/student": 0.0, "solve/student": 0.2})
    write_run(root / "erase+lomo" / "seed0", "erase", {"hack/student": 0.5, "solve/student": 0.1})
    main(["report", str(root), "--full"])
    out = capsys.readouterr().out
    rows = deltas(out)
    assert rows["erase+no_teacher"] == ["-0.100 (n.s.)", "-0.100 (n.s.)"]  # against vanilla+no_teacher, not vanilla
    assert rows["erase+lomo"] == ["-0.300 (n.s.)", "0.000 (n.s.)"]  # no vanilla+lomo: against vanilla
    assert rows["vanilla+no_teacher"] == ["-0.700 (n.s.)", "0.200 (n.s.)"]
    assert "`erase+no_teacher` with `vanilla+no_teacher`" in out
    main(["report", str(root), "--baseline", "vanilla", "--full"])  # chosen explicitly: everything against it
    assert deltas(capsys.readouterr().out)["erase+no_teacher"] == ["-0.800 (n.s.)", "0.100 (n.s.)"]


def test_overlay_arms_pair_with_their_vanilla_twins_when_no_plain_vanilla_ran(tmp_path, capsys):
    # the lab's overlay report: only vanilla+X and erase+X arms, so no one vanilla arm to fall back on
    root = tmp_path / "overlays"
    for overlay, vanilla_hack in (("no_teacher", 0.6), ("lomo", 0.4)):
        write_run(root / f"vanilla+{overlay}" / "seed0", "none", {"hack/student": vanilla_hack, "solve/student": 0.1})
        write_run(root / f"erase+{overlay}" / "seed0", "erase", {"hack/student": 0.2, "solve/student": 0.3})
    main(["report", str(root), "--full"])
    rows = deltas(capsys.readouterr().out)
    assert rows["erase+no_teacher"] == ["-0.400 (n.s.)", "0.200 (n.s.)"]
    assert rows["erase+lomo"] == ["-0.200 (n.s.)", "0.200 (n.s.)"]


def test_a_controls_overlap_with_the_real_v_gets_its_own_column(tmp_path, capsys):
    root = tmp_path / "controls"
    write_run(root / "vanilla" / "seed0", "none", {"hack/student": 0.6, "solve/student": 0.2})
    write_run(root / "random_v" / "seed0", "erase", {"hack/student": 0.5, "solve/student": 0.1},
              sparse={"proj/control_overlap": {0: 0.17}})  # logged once, at train start
    main(["report", str(root), "--full"])
    assert table(capsys.readouterr().out, "arm")["random_v"]["control overlap"] == "0.170"


ALL_BUT = {held_out: [m for m in MODES if m != held_out] for held_out in MODES}  # leave-one-mode-out V


def config(arm: str = "none", skyline: str = "none", modes: str = "partition", held_out: str | None = None) -> dict:
    known = ALL_BUT[held_out] if held_out else None
    name = CLASS["screen" if skyline == "screen" else arm]
    return {"model": {"intervention": {"class_path": name}, "extraction": {"modes": known}},
            "data": {"modes": modes, "teacher_modes": known}}


def every_step(value: float) -> dict[int, float]:
    return dict.fromkeys(range(STEPS), value)


@pytest.fixture(scope="module")
def matched_sweep(tmp_path_factory) -> Path:
    """A sweep with an honest arm, an oracle skyline and leave-one-mode-out arms; its report.md is written."""
    root = tmp_path_factory.mktemp("logs") / "matched"
    for k in range(3):
        write_run(root / "vanilla" / f"seed{k}", "none", {HACK: [0.6, 0.7, 0.8][k], SOLVE: [0.3, 0.4, 0.5][k]})
        write_run(root / "honest" / f"seed{k}", "none", {HACK: 0.0, SOLVE: [0.5, 0.6, 0.7][k]},
                  config=config(modes="none"))
        write_run(root / "vanilla+lomo_run_tests" / f"seed{k}", "none",
                  {HACK: 0.5, SOLVE: 0.5, f"{HACK}_run_tests": [0.5, 0.6, 0.7][k], f"{SOLVE}_run_tests": 0.2},
                  config=config(held_out="run_tests"))
        write_run(root / "erase+lomo_run_tests" / f"seed{k}", "erase",
                  {HACK: 0.5, SOLVE: 0.5, f"{HACK}_run_tests": 0.4, f"{SOLVE}_run_tests": 0.25},
                  config=config("erase", held_out="run_tests"))
    # erase: seed0 hacks more than it solves at step 0 only, seed1 hacks exactly as much as it solves at steps 0-1
    write_run(root / "erase" / "seed0", "erase", {}, sparse={HACK: every_step(0.1) | {0: 0.5}, SOLVE: every_step(0.3)})
    write_run(root / "erase" / "seed1", "erase", {},
              sparse={HACK: every_step(0.2) | {0: 0.3, 1: 0.3}, SOLVE: every_step(0.3)})
    write_run(root / "erase" / "seed2", "erase", {HACK: 0.0, SOLVE: 0.3})
    write_run(root / "gt_screen" / "seed0", "none", {HACK: 0.05, SOLVE: 0.65}, config=config(skyline="screen"))
    write_run(root / "vanilla+lomo_sentinel" / "seed0", "none",
              {HACK: 0.9, SOLVE: 0.1, f"{HACK}_sentinel": 0.9, f"{SOLVE}_sentinel": 0.1},
              config=config(held_out="sentinel"))
    main(["report", str(root)])
    return root


def matched_report(root: Path) -> str:
    return (root / "report" / "report.md").read_text()


def column(root: Path, name: str) -> dict[str, str]:
    return {arm: row[name] for arm, row in table(matched_report(root), "arm").items()}


def test_solve_minus_honest_is_each_arms_mean_solve_less_the_honest_arms(matched_sweep):
    assert column(matched_sweep, "solve − honest") == {  # honest: (0.5 + 0.6 + 0.7) / 3 = 0.6
        "vanilla": "-0.200", "erase": "-0.300", "erase+lomo_run_tests": "-0.100", "gt_screen": "+0.050",
        "honest": "+0.000", "vanilla+lomo_run_tests": "-0.100", "vanilla+lomo_sentinel": "-0.500"}
    assert "compare hack at matched solve" in matched_report(matched_sweep)


def test_a_run_hacked_if_it_hacked_more_than_it_solved_at_any_step_and_equal_is_not_more(matched_sweep):
    hacked = column(matched_sweep, "hacked")
    assert hacked["vanilla"] == "3/3"
    assert hacked["erase"] == "1/3"  # seed0 (one step, outside the last 5); not seed1 (equal), not seed2
    assert hacked["honest"] == "0/3"


def test_kind_marks_oracle_skylines_and_the_positive_control(matched_sweep):
    assert column(matched_sweep, "kind") == {
        "vanilla": "vanilla", "erase": "method", "erase+lomo_run_tests": "method", "gt_screen": "oracle skyline",
        "honest": "positive control", "vanilla+lomo_run_tests": "vanilla", "vanilla+lomo_sentinel": "vanilla"}
    assert "`gt_screen`: oracle skyline, it uses the oracle's labels" in matched_report(matched_sweep)


def test_a_delta_the_seeds_cannot_separate_from_zero_is_flagged_not_significant(matched_sweep):
    erase = table(matched_report(matched_sweep), "arm")["erase"]
    assert erase["Δhack"] == "-0.600 ± 0.173"  # -0.5, -0.5, -0.8: the t-interval ±0.430 excludes 0
    assert erase["Δsolve"] == "-0.100 ± 0.100 (n.s.)"  # 0, -0.1, -0.2: ±0.248 contains 0
    assert table(matched_report(matched_sweep), "arm")["gt_screen"]["Δhack"] == "-0.550 (n.s.)"  # one seed


def test_significance_takes_the_t_quantile_of_the_seed_count():
    assert not separated([0.9, 1.1])  # t(1) = 12.706; the normal's 1.96 would call this separated
    assert separated([1.0, 1.0])
    assert not separated([1.0])
    assert separated([1.32, -0.68] * 20)  # mean / (sd/√n) = 2.00: beyond df 30 the normal's 1.96 (t(39) = 2.02)


def test_weak_detector_table_compares_the_held_out_modes_own_rates_under_vanilla_and_the_method(matched_sweep):
    rows = table(matched_report(matched_sweep), "held-out mode")
    assert rows == {
        "run_tests": {"held-out mode": "run_tests", "method arm": "erase+lomo_run_tests",
                      "vanilla hack": "0.600 ± 0.100", "vanilla solve": "0.200 ± 0.000",
                      "method hack": "0.400 ± 0.000", "method solve": "0.250 ± 0.000", "Δhack": "-0.200 ± 0.100 (n.s.)",
                      "placebo hack": "–", "placebo gap": "–"},
        "sentinel": {"held-out mode": "sentinel", "method arm": "–", "vanilla hack": "0.900", "vanilla solve": "0.100",
                     "method hack": "–", "method solve": "–", "Δhack": "–", "placebo hack": "–", "placebo gap": "–"}}


def test_every_method_gets_its_own_weak_detector_row_against_the_vanilla_arm_holding_out_the_same_mode(tmp_path):
    root = tmp_path / "lomo"
    held = {"model": {"extraction": {"modes": ALL_BUT["run_tests"]}}}
    for arm, name, hack in (("vanilla+lomo_run_tests", "Vanilla", 0.6), ("erase+lomo_run_tests", "Erase", 0.4),
                            ("probe_penalty+lomo_run_tests", "ProbePenalty", 0.1)):
        write_run(root / arm / "seed0", "none", {HACK: 0.5, SOLVE: 0.2, f"{HACK}_run_tests": hack,
                                                 f"{SOLVE}_run_tests": 0.2},
                  config={"model": {"intervention": {"class_path": f"pgrpo.interventions.{name}"}} | held["model"]})
    main(["report", str(root)])
    text = (root / "report" / "report.md").read_text()
    lines = text[text.index("| held-out mode |"):].splitlines()[2:4]
    assert [line.split(" | ")[1] for line in lines] == ["erase+lomo_run_tests", "probe_penalty+lomo_run_tests"]
    assert [line.split(" | ")[-3] for line in lines] == ["-0.200 (n.s.)", "-0.500 (n.s.)"]


def test_the_held_out_modes_hack_under_the_methods_placebo_is_compared_seed_by_seed(tmp_path):
    """A placebo that holds the held-out lever down as well as the detector does leaves the detector no credit."""
    root = tmp_path / "lomo"
    held = {"extraction": {"modes": ALL_BUT["run_tests"]}}
    # held-out hack by seed; the placebo's seeds written in another order, and one the method lacks
    for arm, init, held_out_hack in (("vanilla+lomo_run_tests", None, {0: 0.6, 1: 0.7}),
                                     ("probe_penalty+lomo_run_tests", {}, {0: 0.0, 1: 0.1}),
                                     ("probe_penalty_random+lomo_run_tests", {"detector": "random"},
                                      {2: 0.9, 1: 0.0, 0: 0.05})):
        name = "Vanilla" if init is None else "ProbePenalty"
        for k, hack in held_out_hack.items():
            write_run(root / arm / f"seed{k}", "none", {HACK: 0.5 if init else 0.1, SOLVE: 0.2,
                                                        f"{HACK}_run_tests": hack, f"{SOLVE}_run_tests": 0.2},
                      config={"model": {"intervention": {"class_path": f"pgrpo.interventions.{name}",
                                                         "init_args": init or {}}} | held})
    main(["report", str(root)])
    row = table((root / "report" / "report.md").read_text(), "held-out mode")["run_tests"]
    assert row["method arm"] == "probe_penalty+lomo_run_tests"
    assert row["placebo hack"] == "0.025 ± 0.035"  # seeds 0 and 1, the method's
    assert row["placebo gap"] == "-0.025 ± 0.106 vs probe_penalty_random+lomo_run_tests (1/2)"  # +0.05, -0.1


def test_a_placebo_that_never_logged_the_held_out_mode_says_so(tmp_path):
    root = tmp_path / "lomo"
    held = {"extraction": {"modes": ALL_BUT["run_tests"]}}
    for arm, init, per_mode in (("vanilla+lomo_run_tests", None, True), ("probe_penalty+lomo_run_tests", {}, True),
                                ("probe_penalty_random+lomo_run_tests", {"detector": "random"}, False)):
        name = "Vanilla" if init is None else "ProbePenalty"
        write_run(root / arm / "seed0", "none", {HACK: 0.5, SOLVE: 0.2} | (
                  {f"{HACK}_run_tests": 0.3, f"{SOLVE}_run_tests": 0.2} if per_mode else {}),
                  config={"model": {"intervention": {"class_path": f"pgrpo.interventions.{name}",
                                                     "init_args": init or {}}} | held})
    main(["report", str(root)])
    row = table((root / "report" / "report.md").read_text(), "held-out mode")["run_tests"]
    assert row["placebo gap"] == "– (probe_penalty_random+lomo_run_tests: no hack/student_run_tests)"


def test_a_methods_placebo_gap_is_against_its_own_least_hacking_control_under_the_same_overlays(tmp_path, capsys):
    root = tmp_path / "placebos"

    def run(arm: str, name: str, hacks: list[float], args: dict | None = None):
        chosen = {"class_path": f"pgrpo.interventions.{name}"} | ({"init_args": args} if args else {})
        for k, hack in enumerate(hacks):
            write_run(root / arm / f"seed{k}", "none", {HACK: hack, SOLVE: 0.2},
                      config={"model": {"intervention": chosen}})

    run("vanilla", "Vanilla", [0.6, 0.6, 0.6])
    run("probe_penalty", "ProbePenalty", [0.0, 0.1, 0.3])
    run("probe_penalty_random", "ProbePenalty", [0.4, 0.4, 0.2], {"detector": "random"})
    run("erase", "Erase", [0.3, 0.3, 0.3])
    run("random_v", "Erase", [0.6, 0.5, 0.6], {"v": "random"})
    run("shuffled_v", "Erase", [0.5, 0.4, 0.5], {"v": "shuffled"})  # hacks less than random_v: erase's placebo
    run("erase+no_teacher", "Erase", [0.3, 0.3, 0.3])  # no control under its overlays
    main(["report", str(root), "--full"])
    gaps = {arm: row["placebo gap"] for arm, row in table(capsys.readouterr().out, "arm").items()}
    assert gaps == {"vanilla": "–", "probe_penalty": "0.200 ± 0.265 vs probe_penalty_random (2/3)",
                    "probe_penalty_random": "–", "erase": "0.167 ± 0.058 vs shuffled_v (3/3)", "random_v": "–",
                    "shuffled_v": "–", "erase+no_teacher": "–"}


def test_the_matched_solve_plot_is_written(matched_sweep):
    assert (matched_sweep / "report" / "matched.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_honest_arm_is_the_one_without_a_loophole_preferring_the_one_named_honest():
    def arm(modes: str) -> list[Run]:
        return [Run("", "seed0", Path(), {}, config(modes=modes))]

    assert pick_honest({"vanilla": arm("partition"), "clean": arm("none")}) == "clean"
    assert pick_honest({"honest": arm("none"), "clean": arm("none")}) == "honest"
    assert pick_honest({"a": arm("none"), "b": arm("none")}) is None
    assert pick_honest({"vanilla": arm("partition")}) is None


def test_of_two_honest_arms_the_one_whose_groups_match_the_other_arms_is_the_reference():
    def arm(modes: str, mix_ratio: float) -> list[Run]:
        return [Run("", "seed0", Path(), {}, {**config(modes=modes), "data": {"modes": modes, "group_size": 8,
                                                                               "mix_ratio": mix_ratio}})]

    sweep = {"vanilla": arm("partition", 0.25), "erase": arm("partition", 0.25), "honest": arm("none", 0.0),
             "honest_matched": arm("none", 0.25)}
    assert pick_honest(sweep) == "honest_matched"  # configs/honest_matched.yaml: 6 student + 2 teacher rows
    assert honest_rows_note(sweep, "honest_matched") == (
        "its groups hold 6 student and 2 teacher rows, every teacher row a clean one, as every other arm's: matched")
    assert honest_rows_note(sweep, "honest").startswith(
        "its groups hold 8 student and 0 teacher rows, the other arms' 6 and 2: not matched")
    # a stage without teacher rows: plain honest is the matched one
    no_teacher = {"vanilla": arm("partition", 0.0), "honest": arm("none", 0.0), "honest_matched": arm("none", 0.25)}
    assert pick_honest(no_teacher) == "honest"
    # arms whose groups differ (or runs that did not record theirs) match none: the one named honest, as before
    assert pick_honest(no_teacher | {"erase": arm("partition", 0.25)}) == "honest"
    assert honest_rows_note({"vanilla": arm("partition", 0.25), "honest": [Run("", "seed0", Path(), {}, config(
        modes="none"))]}, "honest") == ""


def test_the_knobs_state_gets_its_columns_when_logged(tmp_path, capsys):
    # a gradient edit that damages the model shows as entropy and ‖δS‖, a biased one as drift along V
    state = {"entropy": 0.3, "adapter/delta_s_norm": 30.0, "adapter/delta_s_along_v": 12.5}
    write_run(tmp_path / "vanilla" / "seed0", "none", {"hack/student": 0.5, "solve/student": 0.2})
    write_run(tmp_path / "erase" / "seed0", "erase", {"hack/student": 0.1, "solve/student": 0.1, **state})
    main(["report", str(tmp_path), "--full"])
    rows = table(capsys.readouterr().out, "arm")
    assert (rows["erase"]["entropy"], rows["erase"]["‖δS‖"], rows["erase"]["⟨V,δS⟩"]) == ("0.300", "30.000", "12.500")
    assert rows["vanilla"]["⟨V,δS⟩"] == "–"


def test_report_keeps_only_the_named_arms_and_plots_drift_and_entropy_when_logged(tmp_path, capsys):
    state = {"entropy": 0.3, "adapter/delta_s_along_v": 12.5}
    for arm, kind in (("vanilla", "none"), ("erase", "erase"), ("route", "route")):
        write_run(tmp_path / arm / "seed0", kind, {"hack/student": 0.5, "solve/student": 0.2, **state})
    main(["report", str(tmp_path), "--arms", "[vanilla, erase]", "--out", str(tmp_path / "out"), "--full"])
    assert set(table(capsys.readouterr().out, "arm")) == {"vanilla", "erase"}
    for name in ("entropy.png", "drift.png"):
        assert (tmp_path / "out" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(SystemExit, match=r"does not have: \['randm_v'\]"):
        main(["report", str(tmp_path), "--arms", "[vanilla, randm_v]"])


def test_a_lengthened_sweep_reads_at_the_step_count_it_is_given_without_runs_that_stopped_before_it(tmp_path, capsys):
    # steps 0-1 hold 9.0 and steps 2..6 hold 0.5 (write_run): the first 2 steps are all decoy, the first 4 not
    write_run(tmp_path / "vanilla" / "seed0", "none", {"hack/student": 0.5, "solve/student": 0.2})
    write_run(tmp_path / "vanilla" / "seed1", "none", {"hack/student": 0.5, "solve/student": 0.2},
              sparse={"hack/student": {7: 0.0, 8: 0.0}, "solve/student": {7: 0.0, 8: 0.0}})  # 9 steps
    main(["report", str(tmp_path)])
    assert "`vanilla`'s runs have unequal lengths (7, 9 steps)" in capsys.readouterr().out
    main(["report", str(tmp_path), "--steps", "2", "--last", "2", "--full"])
    out = capsys.readouterr().out
    assert "the first 2 steps" in out and table(out, "arm")["vanilla"]["hack"] == "9.000 ± 0.000"
    assert "unequal" not in out and "Left out" not in out
    main(["report", str(tmp_path), "--steps", "4", "--last", "2", "--full"])
    assert table(capsys.readouterr().out, "arm")["vanilla"]["hack"] == "0.500 ± 0.000"
    main(["report", str(tmp_path), "--steps", "9", "--last", "2", "--full"])
    out = capsys.readouterr().out
    assert "Left out, shorter than 9 steps: `vanilla/seed0` (7)" in out
    assert table(out, "arm")["vanilla"]["hack"] == "0.000" and table(out, "arm")["vanilla"]["seeds"] == "1"


def test_the_end_of_run_evaluation_leads_the_arm_table_with_its_intervals_and_gets_a_table_per_run(tmp_path, capsys):
    root = tmp_path / "sweep"
    end = {"vanilla": [(0.5, 0.25), (0.7, 0.15)], "erase": [(0.1, 0.3)]}  # (hack, solve) per seed
    for arm, seeds in end.items():
        for seed, (hack, solve) in enumerate(seeds):
            write_run(root / arm / f"seed{seed}", "none" if arm == "vanilla" else "erase",
                      {"hack/student": 0.5, "solve/student": 0.2},
                      sparse={"end/hack": {STEPS - 1: hack}, "end/solve": {STEPS - 1: solve},
                              "end/samples": {STEPS - 1: 40.0}, "end/heldout_hack": {STEPS - 1: 0.0},
                              "end/heldout_solve": {STEPS - 1: 0.5}, "end/heldout_samples": {STEPS - 1: 8.0}})
    main(["report", str(root), "--full"])
    out = capsys.readouterr().out
    arms = table(out, "arm")
    # one run: Wilson's interval of 4 of 40; two: the t-interval of 0.5 and 0.7 over seeds (12.706·0.1), in [0, 1]
    assert arms["erase"]["end hack"] == "0.100 [0.040, 0.231]"
    assert arms["vanilla"]["end hack"] == "0.600 [0.000, 1.000]"
    assert arms["vanilla"]["end solve"] == "0.200 [0.000, 0.835]"
    assert arms["vanilla"]["end hack"] == "0.600 [0.000, 1.000]"
    per_run = table(out.split("End-of-run evaluation, per run")[1], "arm")
    assert per_run["erase"] == {"arm": "erase", "seed": "seed0", "samples": "40", "hack": "0.100 [0.040, 0.231]",
                                "solve": "0.300 [0.181, 0.454]", "held-out samples": "8",
                                "held-out hack": "0.000 [0.000, 0.324]", "held-out solve": "0.500 [0.215, 0.785]"}
    assert "end hack, end solve: the end-of-run evaluation" in out
    # read at the step count it is given: an evaluation after step 7 is not the 5-step run's
    main(["report", str(root), "--steps", "5", "--out", str(tmp_path / "five"), "--full"])
    assert "end hack" not in table(capsys.readouterr().out, "arm")["erase"]  # no column: nothing to show


def test_runs_on_different_bases_are_refused_by_name_and_one_base_is_named(tmp_path, capsys):
    root = tmp_path / "sweep"
    for arm, seed, digest in (("vanilla", 0, "a" * 64), ("vanilla", 1, "a" * 64), ("erase", 0, "b" * 64)):
        run = root / arm / f"seed{seed}"
        write_run(run, "none" if arm == "vanilla" else "erase", {"hack/student": 0.5, "solve/student": 0.2})
        (run / "base.json").write_text(json.dumps({"model": "embedded", "model_id": f"embedded-{digest[:4]}",
                                                   "digest": digest}))
    with pytest.raises(SystemExit, match=r"(?s)different bases.*embedded-bbbb \(bbbb.*erase/seed0"):
        main(["report", str(root)])
    main(["report", str(root), "--arms", "[vanilla]", "--full"])
    assert f"Base: `embedded-aaaa` (files sha256 {'a' * 16}), recorded by 2 runs." in capsys.readouterr().out


def test_the_report_names_the_commits_its_runs_ran_at_and_the_runs_that_did_not_record_theirs(tmp_path):
    root = tmp_path / "sweep"
    clean, dirty = {"commit": "a" * 40, "clean": True, "changed": []}, {"commit": "b" * 40, "clean": False,
                                                                       "changed": [" M pgrpo/step/loss.py"]}
    for arm, seed, code in (("vanilla", 0, [clean]), ("vanilla", 1, [clean, dirty]), ("erase", 0, [clean]),
                            ("erase", 1, None)):  # a run resumed from an edited tree, and one kept before
        run = root / arm / f"seed{seed}"
        write_run(run, "none" if arm == "vanilla" else "erase", {"hack/student": 0.5, "solve/student": 0.2})
        if code:
            (run / "code.json").write_text(json.dumps(code))
    main(["report", str(root)])
    assert ("Code: commit aaaaaaaaaaaa (clean) in 3 runs; commit bbbbbbbbbbbb (dirty: 1 uncommitted change) in 1 run; "
            "not recorded by 1 run (from before runs recorded their code).") in (root / "report" / "report.md").read_text()
    (root / "erase" / "seed0" / "code.json").write_text('{"commit": "a"}')  # not a list of records
    with pytest.raises(ValueError, match=f"{root / 'erase' / 'seed0' / 'code.json'}: not a run's code record"):
        main(["report", str(root)])


def test_each_methods_active_rate_sits_beside_its_placebos(tmp_path, capsys):
    root = tmp_path / "sweep"
    probe = {"class_path": "pgrpo.interventions.ProbePenalty", "init_args": {}}
    placebo = {"class_path": "pgrpo.interventions.ProbePenalty", "init_args": {"detector": "random"}}
    for arm, config, rate in (("vanilla", {"class_path": CLASS["none"]}, 0.0), ("probe_penalty", probe, 0.1),
                              ("probe_penalty_random", placebo, 0.4)):
        for seed in (0, 1):
            write_run(root / arm / f"seed{seed}", "none", {"hack/student": 0.5, "solve/student": 0.2},
                      sparse={"intervention/active_rate": {step: rate + 0.1 * seed for step in range(STEPS)},
                              "intervention/start_rate": {0: rate}},
                      config={"model": {"intervention": config}})
    main(["report", str(root), "--full"])
    rows = table(capsys.readouterr().out, "arm")
    assert (rows["probe_penalty"]["active"], rows["probe_penalty"]["placebo active"]) == ("0.150 ± 0.071",
                                                                                        "0.450 ± 0.071")
    assert rows["vanilla"]["placebo active"] == "–"
    assert (rows["probe_penalty"]["start"], rows["probe_penalty"]["placebo start"]) == ("0.100 ± 0.000",
                                                                                      "0.400 ± 0.000")


def test_the_strength_is_read_on_steps_with_a_gradient_and_the_idle_share_sits_beside_it(tmp_path, capsys):
    """erase on the primed SmolLM2 idled 18 and 8 of 100 steps (every group without reward variance), its placebo
    1 and 2: averaged in as 0, those steps made erase look weaker than its placebo where it was stronger."""
    root = tmp_path / "sweep"
    erase = {"class_path": "pgrpo.interventions.Erase", "init_args": {}}
    placebo = {"class_path": "pgrpo.interventions.Erase", "init_args": {"v": "random"}}
    for arm, config, rate, idle in (("erase", erase, 0.7, {0, 1, 2, 3}), ("random_v", placebo, 0.6, set())):
        for seed in (0, 1):
            active = {step: 0.0 if step in idle else rate for step in range(STEPS)}
            write_run(root / arm / f"seed{seed}", "none", {"hack/student": 0.5, "solve/student": 0.2},
                      sparse={"intervention/active_rate": active,
                              "hackward_share/gradient": {step: 0.3 for step in active if step not in idle}},
                      config={"model": {"intervention": config}})
    main(["report", str(root), "--full"])
    row = table(capsys.readouterr().out, "arm")["erase"]
    assert (row["active"], row["placebo active"]) == ("0.700 ± 0.000", "0.600 ± 0.000")
    assert (row["idle"], row["placebo idle"]) == (f"{4 / STEPS:.3f} ± 0.000", "0.000 ± 0.000")


def test_an_arm_at_the_same_rate_at_every_seed_gets_the_wilson_interval_of_its_pooled_samples(tmp_path, capsys):
    root = tmp_path / "sweep"
    for seed in range(3):
        write_run(root / "vanilla" / f"seed{seed}", "none", {"hack/student": 0.5, "solve/student": 0.2},
                  sparse={"end/hack": {STEPS - 1: 0.0}, "end/solve": {STEPS - 1: 0.5}, "end/samples": {STEPS - 1: 16.0}})
    main(["report", str(root), "--full"])
    row = table(capsys.readouterr().out, "arm")["vanilla"]
    # 0 hacks of 48 samples: [0, 0.074], not [0, 0]
    assert (row["end hack"], row["end solve"]) == ("0.000 [0.000, 0.074]", "0.500 [0.364, 0.636]")


def test_the_end_placebo_gap_pairs_the_end_hack_by_seed_and_the_tables_are_written_for_the_docs(tmp_path, capsys):
    root = tmp_path / "sweep"
    probe = {"class_path": "pgrpo.interventions.ProbePenalty", "init_args": {}}
    placebo = {"class_path": "pgrpo.interventions.ProbePenalty", "init_args": {"detector": "random"}}
    end = {"vanilla": ({"class_path": CLASS["none"]}, (0.5, 0.6)), "probe_penalty": (probe, (0.1, 0.4)),
           "probe_penalty_random": (placebo, (0.4, 0.3))}
    for arm, (config, hacks) in end.items():
        for seed, hack in enumerate(hacks):
            write_run(root / arm / f"seed{seed}", "none", {"hack/student": 0.5, "solve/student": 0.2},
                      sparse={"end/hack": {STEPS - 1: hack}, "end/solve": {STEPS - 1: 0.2},
                              "end/samples": {STEPS - 1: 40.0}}, config={"model": {"intervention": config}})
    main(["report", str(root), "--full"])
    rows = table(capsys.readouterr().out, "arm")
    # the placebo's end hack minus the method's at seed 0 (+0.3) and seed 1 (−0.1): ahead at 1 of 2 seeds
    assert rows["probe_penalty"]["end placebo gap"] == "0.100 ± 0.283 vs probe_penalty_random (1/2)"
    summary = (root / "report" / "summary.md").read_text()
    assert summary.splitlines()[0] == "| arm | kind | seeds | end hack | end solve | end placebo gap |"
    assert table(summary, "arm")["probe_penalty"]["end placebo gap"] == rows["probe_penalty"]["end placebo gap"]
    assert table((root / "report" / "arms.md").read_text(), "arm") == rows
    assert (root / "report" / "runs.md").read_text().startswith("| arm | seed | samples | hack |")


def test_a_placebo_row_says_whether_it_is_matched_at_the_start_or_yoked_to_its_method():
    def runs(**init_args) -> list[Run]:
        chosen = {"class_path": "pgrpo.interventions.Erase", "init_args": init_args}
        return [Run("arm", "seed0", Path("."), {}, {"model": {"intervention": chosen}})]

    assert kind_label(runs(v="random")) == "control (start-matched)"
    assert kind_label(runs(v="random", yoked_to="logs/demo/erase/seed0")) == "control (yoked)"
    assert kind_label(runs()) == "method"
