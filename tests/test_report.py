"""`pgrpo report`: a sweep's event files -> the arm table, the per-mode table and the curves."""

from pathlib import Path

import pytest
import yaml
from torch.utils.tensorboard import SummaryWriter

from pgrpo.cli import main
from pgrpo.report import is_vanilla, read_scalars

STEPS = 7  # the last 5 (steps 2..6) carry the values below; steps 0-1 hold decoys the report must ignore


def write_run(run: Path, arm: str, last5: dict[str, float], sparse: dict[str, dict[int, float]] = {}) -> None:
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump({"model": {"projection": {"arm": arm}}}))
    writer = SummaryWriter(str(run))
    for tag, value in last5.items():
        for step in range(STEPS):
            writer.add_scalar(tag, value if step >= 2 else 9.0, step)
    for tag, values in sparse.items():
        for step, value in values.items():
            writer.add_scalar(tag, value, step)
    writer.close()


def cin(student: float, teacher: float | None = None) -> dict[str, float]:
    return {"proj/cin_student": student, "proj/cin_null_student": 0.2} | (
        {"proj/cin_teacher": teacher, "proj/cin_null_teacher": 0.1} if teacher else {})


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("logs") / "demo"
    write_run(root / "vanilla" / "seed0", "none", {"hack/student": 0.6, "solve/student": 0.2, **cin(0.3, 0.5),
                                                  "hack/student_sentinel": 1.0, "solve/student_sentinel": 0.0})
    write_run(root / "vanilla" / "seed1", "none", {"hack/student": 0.8, "solve/student": 0.4, **cin(0.5, 0.7),
                                                  "hack/student_sentinel": 0.5, "solve/student_sentinel": 0.5})
    write_run(root / "erase" / "seed0", "erase", {"hack/student": 0.2, "solve/student": 0.2, **cin(0.1, 0.2),
                                                 "hack/student_sentinel": 0.0, "solve/student_sentinel": 0.5,
                                                 "hack/student_exit_code": 0.25, "solve/student_exit_code": 0.75})
    write_run(root / "erase" / "seed1", "erase", {"hack/student": 0.6, "solve/student": 0.2, **cin(0.3, 0.4),
                                                 "hack/student_sentinel": 0.0, "solve/student_sentinel": 0.5})
    write_run(root / "route" / "seed0", "route", {"hack/student": 0.5, "solve/student": 0.3, **cin(0.25)},
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

Last-5-step mean ± sample std over seeds; Δ = paired difference with `vanilla` at the same seed. cin_* is the hack-ward fraction of the gradient; null_* is its value for a random direction with the same per-module norms, √(Σ w·k/2r).

| arm | seeds | hack | solve | Δhack | Δsolve | cin_student | null_student | cin_teacher | null_teacher | deploy hack | deploy solve |
|---|---|---|---|---|---|---|---|---|---|---|---|
| vanilla | 2 | 0.700 ± 0.141 | 0.300 ± 0.141 | – | – | 0.400 ± 0.141 | 0.200 ± 0.000 | 0.600 ± 0.141 | 0.100 ± 0.000 | – | – |
| erase | 2 | 0.400 ± 0.283 | 0.200 ± 0.000 | -0.300 ± 0.141 | -0.100 ± 0.141 | 0.200 ± 0.141 | 0.200 ± 0.000 | 0.300 ± 0.141 | 0.100 ± 0.000 | – | – |
| route | 1 | 0.500 | 0.300 | -0.100 | 0.100 | 0.250 | 0.200 | – | – | 0.100 | 0.250 |

Per loophole mode, hack / solve (last-5-step means over seeds):

| arm | exit_code | sentinel |
|---|---|---|
| vanilla | – / – | 0.75 / 0.25 |
| erase | 0.25 / 0.75 | 0.00 / 0.50 |
| route | – / – | – / – |

Curves: {root}/report/hack.png, {root}/report/solve.png
"""


def test_report_prints_exactly_the_expected_tables_and_skips_what_is_not_a_run(sweep_dir, capsys):
    main(["report", str(sweep_dir)])
    assert capsys.readouterr().out == expected(sweep_dir)
    assert (sweep_dir / "report" / "report.md").read_text() == expected(sweep_dir)


def test_report_writes_hack_and_solve_curves_as_png(sweep_dir):
    main(["report", str(sweep_dir)])
    for name in ("hack.png", "solve.png"):
        assert (sweep_dir / "report" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_rerunning_the_report_ignores_its_own_output(sweep_dir, capsys):
    main(["report", str(sweep_dir)])
    main(["report", str(sweep_dir)])
    first, second = capsys.readouterr().out.split("# pgrpo report")[1:]
    assert first == second


def test_explicit_baseline_changes_the_pairing(sweep_dir, capsys):
    main(["report", str(sweep_dir), "--baseline", "erase", "--out", str(sweep_dir.parent / "elsewhere")])
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| vanilla"))
    assert row.split(" | ")[4:6] == ["0.300 ± 0.141", "0.100 ± 0.141"]
    with pytest.raises(ValueError, match="no such arm"):
        main(["report", str(sweep_dir), "--baseline", "nope"])


def test_vanilla_is_arm_none_without_a_negative_control(tmp_path):
    def run(config: dict) -> Path:
        path = tmp_path / str(len(list(tmp_path.iterdir())))
        path.mkdir()
        (path / "config.yaml").write_text(yaml.safe_dump(config))
        return path

    control = {"class_path": "pgrpo.controls.ControlBasis", "init_args": {"control": "random"}}
    assert is_vanilla(run({"model": {"projection": {"arm": "none"}}}))
    assert not is_vanilla(run({"model": {"projection": {"arm": "erase"}}}))
    assert not is_vanilla(run({"model": {"projection": {"arm": "none"}}, "trainer": {"callbacks": [control]}}))
    assert not is_vanilla(tmp_path / "no_config_here")


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


def test_an_arm_with_overlays_is_paired_with_vanilla_under_the_same_overlays(tmp_path, capsys):
    root = tmp_path / "overlays"
    write_run(root / "vanilla" / "seed0", "none", {"hack/student": 0.8, "solve/student": 0.1})
    write_run(root / "vanilla+no_teacher" / "seed0", "none", {"hack/student": 0.1, "solve/student": 0.3})
    write_run(root / "erase+no_teacher" / "seed0", "erase", {"hack/student": 0.0, "solve/student": 0.2})
    write_run(root / "erase+lomo" / "seed0", "erase", {"hack/student": 0.5, "solve/student": 0.1})
    main(["report", str(root)])
    out = capsys.readouterr().out
    rows = {line.split(" | ")[0][2:]: line.split(" | ")[4:6] for line in out.splitlines() if line.startswith("| ")}
    assert rows["erase+no_teacher"] == ["-0.100", "-0.100"]  # against vanilla+no_teacher, not vanilla
    assert rows["erase+lomo"] == ["-0.300", "0.000"]  # no vanilla+lomo: against vanilla
    assert rows["vanilla+no_teacher"] == ["-0.700", "0.200"]
    assert "`erase+no_teacher` with `vanilla+no_teacher`" in out
    main(["report", str(root), "--baseline", "vanilla"])  # chosen explicitly: everything against it
    rows = {line.split(" | ")[0][2:]: line.split(" | ")[4:6] for line in capsys.readouterr().out.splitlines()
            if line.startswith("| ")}
    assert rows["erase+no_teacher"] == ["-0.800", "0.100"]


def test_a_controls_overlap_with_the_real_v_gets_its_own_column(tmp_path, capsys):
    root = tmp_path / "controls"
    write_run(root / "vanilla" / "seed0", "none", {"hack/student": 0.6, "solve/student": 0.2})
    write_run(root / "random_v" / "seed0", "erase", {"hack/student": 0.5, "solve/student": 0.1},
              sparse={"proj/control_overlap": {0: 0.17}})  # logged once, at train start
    main(["report", str(root)])
    table = capsys.readouterr().out
    def cells(first: str) -> list[str]:
        line = next(line for line in table.splitlines() if line.startswith(f"| {first} "))
        return [c.strip() for c in line.strip("|").split("|")]

    header, row = cells("arm"), cells("random_v")
    assert row[header.index("control overlap")] == "0.170"
