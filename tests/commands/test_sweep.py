"""`pgrpo sweep`: arms x seeds into named cells, finished cells skipped, interrupted ones resumed."""

import json
from pathlib import Path

import pytest

import pgrpo.commands.sweep as sweep_mod
from pgrpo.cli import main

REPO = Path(__file__).resolve().parents[2]


class FakeFit:
    """Stands in for the `pgrpo fit` child process: records argv, writes what a run writes, can fail."""

    def __init__(self, fail: set[str] = frozenset(), checkpoint_then_fail: set[str] = frozenset()):
        self.calls: list[list[str]] = []
        self.fail, self.checkpoint_then_fail = fail, checkpoint_then_fail

    def __call__(self, argv: list[str], log: Path) -> int:
        self.calls.append(argv)
        cell = log.parent
        (cell / "events.out.tfevents.0").write_bytes(b"")
        steps = [a.split("=", 1)[1] for a in argv if a.startswith("--trainer.max_steps=")]
        (cell / "config.yaml").write_text(f"trainer:\n  max_steps: {steps[-1] if steps else 100}\n")
        if cell.parent.name in self.fail:
            return 1
        (cell / "checkpoints").mkdir(exist_ok=True)
        (cell / "checkpoints" / "last.ckpt").write_bytes(b"ckpt")
        return 1 if cell.parent.name in self.checkpoint_then_fail else 0


def run_sweep(tmp_path: Path, fake: FakeFit, monkeypatch, *extra: str, arms: str = "[vanilla, erase]") -> None:
    monkeypatch.setattr(sweep_mod, "run_fit", fake)
    main(["sweep", "--name", "demo", "--arms", arms, "--seeds", "[0, 1]", "--logs", str(tmp_path),
          "--configs", str(REPO / "configs"), *extra])


def cell_of(argv: list[str]) -> str:
    logger = json.loads(next(a for a in argv if a.startswith("--trainer.logger=")).split("=", 1)[1])["init_args"]
    return f"{logger['name']}/{logger['version']}"


def test_every_arm_runs_at_every_seed_into_its_own_directory(tmp_path, monkeypatch):
    fake = FakeFit()
    run_sweep(tmp_path, fake, monkeypatch, "--overrides", "[--trainer.max_steps=3]")
    assert [cell_of(a) for a in fake.calls] == ["vanilla/seed0", "vanilla/seed1", "erase/seed0", "erase/seed1"]
    first = fake.calls[0]
    assert first[:3] == ["fit", "--config", str(REPO / "configs" / "vanilla.yaml")]
    assert {"--seed_everything=0", "--data.seed=0"} <= set(first) and first[-1] == "--trainer.max_steps=3"
    assert json.loads((tmp_path / "demo" / "erase" / "seed1" / "cell.json").read_text())["status"] == "done"


def test_rerunning_the_sweep_skips_finished_cells(tmp_path, monkeypatch, capsys):
    run_sweep(tmp_path, FakeFit(), monkeypatch)
    again = FakeFit()
    run_sweep(tmp_path, again, monkeypatch)
    assert again.calls == []
    assert capsys.readouterr().out.count("skipped (finished)") == 4


def test_a_crashed_cell_does_not_stop_the_others_and_resumes_from_its_checkpoint(tmp_path, monkeypatch):
    crashing = FakeFit(checkpoint_then_fail={"vanilla"})
    with pytest.raises(SystemExit, match="2 of 4 cells failed: vanilla seed0, vanilla seed1"):
        run_sweep(tmp_path, crashing, monkeypatch)
    assert len(crashing.calls) == 4
    retry = FakeFit()
    run_sweep(tmp_path, retry, monkeypatch)
    assert [cell_of(a) for a in retry.calls] == ["vanilla/seed0", "vanilla/seed1"]
    last = tmp_path / "demo" / "vanilla" / "seed0" / "checkpoints" / "last.ckpt"
    assert retry.calls[0][-1] == f"--ckpt_path={last}"


def test_a_cell_that_never_checkpointed_restarts_from_a_clean_directory(tmp_path, monkeypatch):
    with pytest.raises(SystemExit):
        run_sweep(tmp_path, FakeFit(fail={"erase"}), monkeypatch)
    stale = tmp_path / "demo" / "erase" / "seed0" / "stale.txt"
    stale.write_text("left by the crashed attempt")
    retry = FakeFit()
    run_sweep(tmp_path, retry, monkeypatch)
    assert [cell_of(a) for a in retry.calls] == ["erase/seed0", "erase/seed1"]
    assert not any(a.startswith("--ckpt_path") for a in retry.calls[0])
    assert not stale.exists()


def test_a_finished_cell_run_with_other_arguments_is_refused(tmp_path, monkeypatch):
    run_sweep(tmp_path, FakeFit(), monkeypatch, "--overrides", "[--trainer.max_steps=3]")
    with pytest.raises(SystemExit, match="other arguments"):
        run_sweep(tmp_path, FakeFit(), monkeypatch, "--overrides", "[--trainer.max_steps=3, --data.mix_ratio=0]")
    with pytest.raises(SystemExit, match="other arguments"):  # a run cannot be shortened after the fact
        run_sweep(tmp_path, FakeFit(), monkeypatch, "--overrides", "[--trainer.max_steps=2]")


def test_a_finished_sweep_rerun_with_more_steps_goes_on_from_each_cells_checkpoint(tmp_path, monkeypatch):
    run_sweep(tmp_path, FakeFit(), monkeypatch)  # the configs' own max_steps
    longer = FakeFit()
    run_sweep(tmp_path, longer, monkeypatch, "--overrides", "[--trainer.max_steps=300]")
    assert len(longer.calls) == 4
    for argv in longer.calls:
        assert "--trainer.max_steps=300" in argv
        assert argv[-1] == f"--ckpt_path={tmp_path / 'demo' / cell_of(argv) / 'checkpoints' / 'last.ckpt'}"
    again = FakeFit()
    run_sweep(tmp_path, again, monkeypatch, "--overrides", "[--trainer.max_steps=300]")
    assert again.calls == []  # now finished at 300


def test_overlays_join_configs_in_order_and_a_misspelt_arm_fails_before_anything_runs(tmp_path, monkeypatch):
    fake = FakeFit()
    run_sweep(tmp_path, fake, monkeypatch, arms="[vanilla+no_teacher]")
    configs = [a for a in fake.calls[0] if a.endswith(".yaml")]
    assert configs == [str(REPO / "configs" / "vanilla.yaml"), str(REPO / "configs" / "no_teacher.yaml")]
    assert (tmp_path / "demo" / "vanilla+no_teacher" / "seed1").is_dir()
    run_sweep(tmp_path, FakeFit(), monkeypatch, arms=f"[{REPO / 'configs' / 'erase.yaml'}]")
    assert (tmp_path / "demo" / "erase" / "seed0" / "cell.json").is_file()  # a path arm is named by its stem
    nothing = FakeFit()
    with pytest.raises(FileNotFoundError, match="eraze"):
        run_sweep(tmp_path, nothing, monkeypatch, arms="[vanilla, eraze]")
    assert nothing.calls == []


@pytest.mark.slow
def test_a_real_sweep_runs_every_cell_and_reports(tmp_path, capsys):
    fast = ["--trainer.max_steps=2", "--model.generation.max_new_tokens=16", "--data.group_size=4",
            "--data.prompts_per_step=2"]
    main(["sweep", "--name", "real", "--arms", "[vanilla, random_v]", "--seeds", "[0]", "--logs", str(tmp_path),
          "--configs", str(REPO / "configs"), "--overrides", json.dumps(fast)])
    main(["report", str(tmp_path / "real")])
    out = capsys.readouterr().out
    assert "| vanilla | 1 |" in out and "| random_v | 1 |" in out
