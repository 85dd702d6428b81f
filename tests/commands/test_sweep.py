"""`pgrpo sweep`: arms x seeds into named cells, finished cells skipped, interrupted ones resumed."""

import json
import re
import shutil
import threading
import time
from pathlib import Path

import pytest
import torch
import yaml
from torch.utils.tensorboard import SummaryWriter

import pgrpo.commands.sweep as sweep_mod
from pgrpo.commands.sweep import run_fit
from pgrpo.cli import main
from pgrpo.model.embedded import MARKER
from pgrpo.records.events import read_scalars
from pgrpo.model.load import model_id
from test_configs import base_of, contains, flatten, merged, own

REPO = Path(__file__).resolve().parents[2]


class FakeFit:
    """Stands in for the `pgrpo fit` child process: records argv, writes what a run writes, can fail."""

    def __init__(self, fail: set[str] = frozenset(), checkpoint_then_fail: set[str] = frozenset(),
                 base_digest: str | None = None, base_model: str = "embedded", base_id: str | None = None,
                 curve: float = 0.5, unevaluated: set[str] = frozenset(), stop_at: int | None = None,
                 sparse_steps: frozenset[int] = frozenset(), code: dict | None = None, v: dict | None = None):
        self.calls: list[list[str]] = []
        self.threads: list[int | None] = []
        self.fail, self.checkpoint_then_fail = fail, checkpoint_then_fail
        self.unevaluated = unevaluated  # arms whose first run here exits 0 without writing its end-of-run evaluation
        self.stop_at = stop_at  # a cell asked for more steps fails before it writes anything: the machine went away
        self.base_digest, self.base_model, self.curve = base_digest, base_model, curve
        self.sparse_steps = sparse_steps  # the steps a tag logged only now and then (a loophole mode's rate) lands on
        self.base_id = base_id or model_id(base_model)  # as this checkout keys it, unless a test says otherwise
        self.code = code  # the code it records running (RunSummary: after a resumed run's earlier parts)
        self.v = v  # the record of the cached V it took, in basis.json's meta (pgrpo.directions.basis.save_to_cache)

    def __call__(self, argv: list[str], log: Path, threads: int | None = None) -> int:
        self.calls.append(argv)
        self.threads.append(threads)
        cell = log.parent
        steps = [a.split("=", 1)[1] for a in argv if a.startswith("--trainer.max_steps=")]
        max_steps = int(steps[-1]) if steps else 100
        if self.stop_at is not None and max_steps > self.stop_at:
            return 1
        (cell / "config.yaml").write_text(f"trainer:\n  max_steps: {max_steps}\nend_eval:\n  samples_per_problem: 8\n")
        with log.open("a") as out:
            out.write(f"{max_steps} steps\n")
        writer = SummaryWriter(str(cell))  # a step's curve, and the end-of-run evaluation at the last step
        for step in range(max_steps):
            writer.add_scalar("hack/student", self.curve, step)
            if step in self.sparse_steps:
                writer.add_scalar("hack/student_sentinel", self.curve, step)
        writer.add_scalar("end/hack", max_steps / 100, max_steps - 1)
        writer.close()
        first = [cell_of(c) for c in self.calls].count(cell_of(argv)) == 1
        if not (first and cell.parent.name in self.unevaluated):
            (cell / "end_eval.json").write_text(json.dumps({"step": max_steps, "train": {"samples": 336}}))
        (cell / "basis.json").write_text(json.dumps({"digest": "bb" * 32, "k_total": 4, "meta": self.v or {}}))
        if self.code:
            resumed = any(a.startswith("--ckpt_path=") for a in argv) and (cell / "code.json").is_file()
            earlier = json.loads((cell / "code.json").read_text()) if resumed else []
            (cell / "code.json").write_text(json.dumps(earlier + [self.code]))
        if self.base_digest:  # what models.base_record writes
            (cell / "base.json").write_text(json.dumps({"model": self.base_model, "model_id": self.base_id,
                                                        "digest": self.base_digest}))
        if cell.parent.name in self.fail:
            return 1
        (cell / "checkpoints").mkdir(exist_ok=True)
        (cell / "checkpoints" / "last.ckpt").write_bytes(b"ckpt")
        return 1 if cell.parent.name in self.checkpoint_then_fail else 0


def run_sweep(tmp_path: Path, fake: FakeFit, monkeypatch, *extra: str, arms: str = "[vanilla, erase]") -> None:
    monkeypatch.setattr(sweep_mod, "run_fit", fake)
    # the fake cells' bases are checked against this cache: the suite's own (a real build) is not theirs
    monkeypatch.setenv("PGRPO_CACHE", str(tmp_path / "cache"))
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


def test_a_cell_records_each_machine_that_ran_a_part_of_it(tmp_path, monkeypatch):
    monkeypatch.setattr(sweep_mod, "machine", lambda: "AMD EPYC (torch AVX512)")
    with pytest.raises(SystemExit):
        run_sweep(tmp_path, FakeFit(checkpoint_then_fail={"vanilla"}), monkeypatch)
    monkeypatch.setattr(sweep_mod, "machine", lambda: "Intel Xeon (torch AVX512) + NVIDIA H100")
    run_sweep(tmp_path, FakeFit(), monkeypatch)
    record = lambda arm: json.loads((tmp_path / "demo" / arm / "seed0" / "cell.json").read_text())["ran_on"]
    assert record("vanilla") == ["AMD EPYC (torch AVX512)", "Intel Xeon (torch AVX512) + NVIDIA H100"]  # resumed
    assert record("erase") == ["AMD EPYC (torch AVX512)"]  # finished on the first machine: skipped on the second


COMMIT_A = {"commit": "a" * 40, "clean": True, "changed": []}
COMMIT_B = {"commit": "b" * 40, "clean": False, "changed": [" M pgrpo/step/loss.py"]}


def test_a_cell_records_and_keeps_the_code_each_part_of_it_ran(tmp_path, monkeypatch):
    results = str(tmp_path / "results")
    with pytest.raises(SystemExit):
        run_sweep(tmp_path, FakeFit(checkpoint_then_fail={"vanilla"}, code=COMMIT_A), monkeypatch, "--results", results)
    run_sweep(tmp_path, FakeFit(code=COMMIT_B), monkeypatch, "--results", results)
    kept = tmp_path / "results" / "demo"
    for cell in (tmp_path / "demo" / "vanilla" / "seed0", kept / "vanilla" / "seed0"):  # resumed at another commit
        assert json.loads((cell / "cell.json").read_text())["code"] == [COMMIT_A, COMMIT_B]
    assert json.loads((kept / "vanilla" / "seed0" / "code.json").read_text()) == [COMMIT_A, COMMIT_B]
    assert json.loads((kept / "erase" / "seed0" / "cell.json").read_text())["code"] == [COMMIT_A]


def test_a_kept_cell_resumed_from_its_kept_checkpoint_keeps_the_code_of_its_earlier_part(tmp_path, monkeypatch):
    plan = write_plan(tmp_path, LENGTHENED, results=tmp_path / "results")
    with pytest.raises(SystemExit):  # the machine goes after stage 1
        run_plan(tmp_path, plan, FakeFit(stop_at=100, code=COMMIT_A), monkeypatch)
    shutil.rmtree(tmp_path / "demo")  # a fresh clone, at another commit
    run_plan(tmp_path, plan, FakeFit(code=COMMIT_B), monkeypatch)
    kept = tmp_path / "results" / "demo" / "erase" / "seed0"
    assert json.loads((kept / "cell.json").read_text())["code"] == [COMMIT_A, COMMIT_B]


def test_a_confirmatory_plan_refuses_to_start_from_uncommitted_code_naming_the_changes(tmp_path, monkeypatch):
    protocol = tmp_path / "protocol.md"
    protocol.write_text("the question, the settings, the decision rules\n")
    plan = write_plan(tmp_path, "  - arms: [vanilla]\n")
    plan.write_text(plan.read_text() + f"protocol: {protocol}\n")
    monkeypatch.setattr(sweep_mod, "code_record", lambda: COMMIT_B)
    nothing = FakeFit()
    with pytest.raises(SystemExit, match=r"runs committed code only, but the checkout .* has uncommitted changes "
                                         r"\(results/ aside\):\n   M pgrpo/step/loss.py\n"):
        run_plan(tmp_path, plan, nothing, monkeypatch)
    assert nothing.calls == []
    monkeypatch.setattr(sweep_mod, "code_record", lambda: {"version": "0.1.0"})
    with pytest.raises(SystemExit, match="pgrpo 0.1.0 does not run from its git checkout"):
        run_plan(tmp_path, plan, nothing, monkeypatch)
    monkeypatch.setattr(sweep_mod, "code_record", lambda: COMMIT_A)
    committed = FakeFit()
    run_plan(tmp_path, plan, committed, monkeypatch)
    assert len(committed.calls) == 2
    plan.write_text(plan.read_text().replace(str(protocol), str(tmp_path / "protocol-3.md")))
    with pytest.raises(SystemExit, match="protocol-3.md: no such file"):
        run_plan(tmp_path, plan, nothing, monkeypatch)


def test_the_confirmatory_plan_names_the_protocol_it_runs_under():
    plan = yaml.safe_load((REPO / "configs" / "sweeps" / "confirmatory-2.yaml").read_text())
    assert plan["protocol"] == "docs/bench/protocol-2.md" and (REPO / plan["protocol"]).is_file()


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


def test_a_cell_that_exits_without_its_end_of_run_evaluation_is_not_kept_and_a_rerun_resumes_it(tmp_path,
                                                                                                  monkeypatch):
    # a run killed between its last checkpoint and its evaluation, resumed by a pgrpo that then skipped it
    results = tmp_path / "results"
    with pytest.raises(SystemExit, match="2 of 4 cells failed: vanilla seed0, vanilla seed1"):
        run_sweep(tmp_path, FakeFit(unevaluated={"vanilla"}), monkeypatch, "--results", str(results))
    assert not (results / "demo" / "vanilla").exists() and (results / "demo" / "erase" / "seed0").is_dir()
    assert "without its end-of-run evaluation" in (tmp_path / "demo" / "vanilla" / "seed0" / "fit.log").read_text()
    retry = FakeFit()
    run_sweep(tmp_path, retry, monkeypatch, "--results", str(results))
    assert [cell_of(a) for a in retry.calls] == ["vanilla/seed0", "vanilla/seed1"]
    assert all(a[-1].startswith("--ckpt_path=") for a in retry.calls)
    assert json.loads((results / "demo" / "vanilla" / "seed0" / "end_eval.json").read_text())["step"] == 100


def test_a_cell_recorded_finished_without_its_end_of_run_evaluation_is_resumed_not_kept(tmp_path, monkeypatch):
    # logs left by a pgrpo that recorded such a run finished
    run_sweep(tmp_path, FakeFit(), monkeypatch)
    (tmp_path / "demo" / "vanilla" / "seed0" / "end_eval.json").unlink()
    again = FakeFit()
    run_sweep(tmp_path, again, monkeypatch, "--results", str(tmp_path / "results"))
    assert [cell_of(a) for a in again.calls] == ["vanilla/seed0"] and again.calls[0][-1].startswith("--ckpt_path=")
    assert (tmp_path / "results" / "demo" / "vanilla" / "seed0" / "end_eval.json").is_file()


def test_a_cell_kept_without_its_end_of_run_evaluation_runs_again(tmp_path, monkeypatch):
    # kept by a sweep before it checked: a fresh clone does not take it for finished
    results = tmp_path / "results"
    run_sweep(tmp_path, FakeFit(), monkeypatch, "--results", str(results))
    (results / "demo" / "vanilla" / "seed0" / "end_eval.json").unlink()
    shutil.rmtree(tmp_path / "demo")
    again = FakeFit()
    run_sweep(tmp_path, again, monkeypatch, "--results", str(results))
    assert [cell_of(a) for a in again.calls] == ["vanilla/seed0"]
    assert (results / "demo" / "vanilla" / "seed0" / "end_eval.json").is_file()


def test_a_lengthened_cell_whose_evaluation_is_still_the_shorter_runs_is_not_kept(tmp_path, monkeypatch):
    results = tmp_path / "results"
    run_sweep(tmp_path, FakeFit(), monkeypatch, "--results", str(results))  # 100 steps, evaluated at 100
    with pytest.raises(SystemExit, match="2 of 4 cells failed: vanilla seed0, vanilla seed1"):
        run_sweep(tmp_path, FakeFit(unevaluated={"vanilla"}), monkeypatch, "--results", str(results),
                  "--overrides", "[--trainer.max_steps=300]")
    kept = results / "demo" / "vanilla" / "seed0"
    assert json.loads((kept / "cell.json").read_text())["max_steps"] == 100  # still the 100-step run
    retry = FakeFit()
    run_sweep(tmp_path, retry, monkeypatch, "--results", str(results), "--overrides", "[--trainer.max_steps=300]")
    assert [cell_of(a) for a in retry.calls] == ["vanilla/seed0", "vanilla/seed1"]
    assert json.loads((kept / "end_eval.json").read_text())["step"] == 300


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


def test_a_finished_cell_is_kept_in_results_and_a_fresh_clone_does_not_run_it_again(tmp_path, monkeypatch, capsys):
    results = str(tmp_path / "results")
    run_sweep(tmp_path, FakeFit(), monkeypatch, "--results", results)
    kept = tmp_path / "results" / "demo" / "erase" / "seed1"
    assert {p.name for p in kept.iterdir()} == {"basis.json", "cell.json", "config.yaml", "end_eval.json", "fit.log",
                                              "scalars.json.gz"}
    assert not (kept / "checkpoints").exists()
    assert json.loads((kept / "cell.json").read_text())["status"] == "done"
    shutil.rmtree(tmp_path / "demo")  # a fresh clone: the logs are gone, the committed results are not
    again = FakeFit()
    run_sweep(tmp_path, again, monkeypatch, "--results", results)
    assert again.calls == [] and capsys.readouterr().out.count("skipped (finished; kept in") == 4
    with pytest.raises(SystemExit, match="other arguments"):  # the kept cells hold their arguments as logs do
        run_sweep(tmp_path, FakeFit(), monkeypatch, "--results", results, "--overrides", "[--data.mix_ratio=0]")


def test_a_cell_trained_on_other_base_bytes_than_the_kept_cells_is_not_kept_and_stops_the_sweep(tmp_path, monkeypatch,
                                                                                                  capsys):
    results = str(tmp_path / "results")
    run_sweep(tmp_path, FakeFit(base_digest="aa" * 32), monkeypatch, "--results", results, arms="[vanilla]")
    shutil.rmtree(tmp_path / "demo")  # the next session's machine builds the base to other bytes
    other = FakeFit(base_digest="bb" * 32)
    with pytest.raises(SystemExit, match="2 of 4 cells failed: erase seed0, erase seed1"):
        run_sweep(tmp_path, other, monkeypatch, "--results", results, arms="[vanilla, erase]")
    out = capsys.readouterr().out
    assert "with files sha256 bbbbbbbbbbbbbbbb, but" in out and "with aaaaaaaaaaaaaaaa: this machine built" in out
    assert len(other.calls) == 1 and out.count("not run (a cell above trained on another base or V") == 1
    assert not (tmp_path / "demo" / "erase" / "seed0").exists()  # a rerun on the kept base runs it again
    assert not (tmp_path / "results" / "demo" / "erase").exists()
    twin = FakeFit(base_digest="cc" * 32, base_model="embedded-distinct")  # a stage on another base is its own
    run_sweep(tmp_path, twin, monkeypatch, "--results", results, arms="[erase]")
    assert len(twin.calls) == 2 and (tmp_path / "results" / "demo" / "erase" / "seed1" / "cell.json").is_file()


def v_record(digest: str, threads: str = "1") -> dict:
    """A cached V's record in basis.json's meta: what it is extracted from, where, and its digest."""
    return {"inputs_key": "e065f3220fbbbaa8", "cache_key": f"e065f3220fbbbaa8-{threads}0000000", "threads": threads,
            "machine": "AMD EPYC 7B13 (torch AVX2)", "digest_as_extracted": digest}


def test_a_cell_trained_with_another_v_than_the_kept_cells_is_not_kept_and_stops_the_sweep(tmp_path, monkeypatch,
                                                                                          capsys):
    results = str(tmp_path / "results")
    run_sweep(tmp_path, FakeFit(v=v_record("aa" * 32)), monkeypatch, "--results", results, arms="[vanilla]")
    shutil.rmtree(tmp_path / "demo")  # the next session extracts V at two threads, to other numbers
    other = FakeFit(v=v_record("cc" * 32, threads="2"))
    with pytest.raises(SystemExit, match="2 of 4 cells failed: erase seed0, erase seed1"):
        run_sweep(tmp_path, other, monkeypatch, "--results", results, arms="[vanilla, erase]")
    out = capsys.readouterr().out
    assert (f"trained with V e065f3220fbbbaa8 of sha256 cccccccccccccccc (extracted at threads=2 on AMD EPYC 7B13 "
            f"(torch AVX2)), but {tmp_path / 'results' / 'demo' / 'vanilla' / 'seed0'} (kept) with sha256 "
            f"aaaaaaaaaaaaaaaa (extracted at threads=1") in out
    assert len(other.calls) == 1 and out.count("not run (a cell above trained on another base or V") == 1
    assert not (tmp_path / "demo" / "erase" / "seed0").exists()  # a rerun with the kept V runs it again
    assert not (tmp_path / "results" / "demo" / "erase").exists()
    longer = FakeFit(v=v_record("cc" * 32, threads="2"))  # a kept cell rerun from step 0 to go on: not joined
    with pytest.raises(SystemExit, match="2 of 2 cells failed: vanilla seed0, vanilla seed1"):
        run_sweep(tmp_path, longer, monkeypatch, "--results", results, "--overrides", "[--trainer.max_steps=200]",
                  arms="[vanilla]")
    assert "--trainer.max_steps=200" not in json.loads(
        (tmp_path / "results" / "demo" / "vanilla" / "seed0" / "cell.json").read_text())["argv"]
    placebo = FakeFit(v=v_record("aa" * 32))  # its own digest differs (bb...), the V it was drawn like does not
    run_sweep(tmp_path, placebo, monkeypatch, "--results", results, arms="[random_v]")
    assert (tmp_path / "results" / "demo" / "random_v" / "seed1" / "cell.json").is_file()


def test_the_v_the_kept_cells_took_from_the_cache_is_kept_once_where_it_is_small(tmp_path, monkeypatch):
    from pgrpo.directions.extraction import HackBasis

    v = HackBasis({"m": torch.eye(2, 4)}, {"m": torch.ones(2)})
    record = v_record(v.digest())
    v.meta |= record
    (tmp_path / "cache" / "bases").mkdir(parents=True)
    v.save(tmp_path / "cache" / "bases" / f"{record['cache_key']}.safetensors")  # as the fit cached it
    run_sweep(tmp_path, FakeFit(v=record), monkeypatch, "--results", str(tmp_path / "results"))
    (kept,) = (tmp_path / "results" / "bases").iterdir()
    assert kept.name == f"v-{v.digest()[:16]}.safetensors" and HackBasis.load(kept).digest() == v.digest()
    monkeypatch.setattr(sweep_mod, "KEPT_V_MAX_BYTES", 100)  # a larger V is extracted again where the plan resumes
    run_sweep(tmp_path, FakeFit(v=record), monkeypatch, "--results", str(tmp_path / "elsewhere"))
    assert not (tmp_path / "elsewhere" / "bases").exists()


def test_a_cache_holding_the_kept_cells_base_built_to_other_bytes_is_refused_before_any_cell_runs(tmp_path,
                                                                                                     monkeypatch):
    results = str(tmp_path / "results")
    run_sweep(tmp_path, FakeFit(base_digest="aa" * 32), monkeypatch, "--results", results, arms="[vanilla]")
    cache = tmp_path / "cache"
    build = cache / model_id("embedded")  # the kept cells' base, as another machine built it
    build.mkdir(parents=True)
    (build / "model.safetensors").write_bytes(b"other bytes")
    (build / MARKER).write_text("{}")
    nothing = FakeFit(base_digest="bb" * 32)
    with pytest.raises(SystemExit, match="the cache holds base embedded-.* with files sha256 .* trained on aaaa"):
        run_sweep(tmp_path, nothing, monkeypatch, "--results", results, arms="[vanilla, erase]")
    assert nothing.calls == []


def test_kept_cells_on_a_base_built_on_another_cpu_say_so_before_this_machine_builds_it(tmp_path, monkeypatch,
                                                                                        capsys):
    # a primed base trained here depends on the CPU (pgrpo.model.substrate): the build here may be in vain
    monkeypatch.setenv("PGRPO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(sweep_mod, "cpu_kind", lambda: "Intel Xeon (torch AVX512)")
    cell = tmp_path / "results" / "demo" / "vanilla" / "seed0"
    cell.mkdir(parents=True)
    (cell / "base.json").write_text(json.dumps({"model": "embedded", "model_id": model_id("embedded"),
                                                "digest": "aa" * 32, "built_on": "AMD EPYC 7B13 (torch AVX2)"}))
    sweep_mod.refuse_another_cached_base(cell.parent.parent)
    said = capsys.readouterr().err
    assert "as built on AMD EPYC 7B13 (torch AVX2); this machine is Intel Xeon (torch AVX512)" in said
    build = tmp_path / "cache" / model_id("embedded")  # then built here, to other bytes
    build.mkdir(parents=True)
    (build / "model.safetensors").write_bytes(b"other bytes")
    (build / MARKER).write_text("{}")
    with pytest.raises(SystemExit, match=r"trained on aaaa.*, built on AMD EPYC 7B13 \(torch AVX2\).* this one is "
                                         r"Intel Xeon \(torch AVX512\)"):
        sweep_mod.refuse_another_cached_base(cell.parent.parent)
    monkeypatch.setattr(sweep_mod, "cpu_kind", lambda: "AMD EPYC 7B13 (torch AVX2)")
    shutil.rmtree(build)
    sweep_mod.refuse_another_cached_base(cell.parent.parent)  # the kept cells' CPU: nothing to say
    assert capsys.readouterr().err == ""


def test_a_checkout_that_keys_the_kept_cells_base_otherwise_is_refused_before_any_cell_runs(tmp_path, monkeypatch):
    results = str(tmp_path / "results")  # kept by a checkout whose recipe (sources, torch) keyed the base otherwise
    run_sweep(tmp_path, FakeFit(base_digest="aa" * 32, base_id="embedded-0123"), monkeypatch, "--results", results,
              arms="[vanilla]")
    nothing = FakeFit(base_digest="aa" * 32)
    with pytest.raises(SystemExit, match="key base 'embedded' as embedded-.* trained on embedded-0123"):
        run_sweep(tmp_path, nothing, monkeypatch, "--results", results, arms="[vanilla, erase]")
    assert nothing.calls == []


def test_a_cell_on_another_recipe_of_the_kept_cells_model_is_not_kept(tmp_path, monkeypatch, capsys):
    results = str(tmp_path / "results")
    run_sweep(tmp_path, FakeFit(base_digest="aa" * 32), monkeypatch, "--results", results, arms="[vanilla]")
    other = FakeFit(base_digest="aa" * 32, base_id="embedded-4567")  # e.g. a cell's process saw another torch
    with pytest.raises(SystemExit, match="2 of 4 cells failed: erase seed0, erase seed1"):
        run_sweep(tmp_path, other, monkeypatch, "--results", results, arms="[vanilla, erase]")
    assert "trained on base embedded-4567" in capsys.readouterr().out
    assert not (tmp_path / "results" / "demo" / "erase").exists()


def test_a_kept_cell_is_lengthened_from_step_0_where_its_checkpoint_did_not_outlive_the_logs(tmp_path, monkeypatch):
    results = str(tmp_path / "results")
    run_sweep(tmp_path, FakeFit(), monkeypatch, "--results", results, "--overrides", "[--trainer.max_steps=3]")
    shutil.rmtree(tmp_path / "demo")
    longer = FakeFit()
    run_sweep(tmp_path, longer, monkeypatch, "--results", results, "--overrides", "[--trainer.max_steps=5]")
    assert len(longer.calls) == 4 and not any(a.startswith("--ckpt_path") for argv in longer.calls for a in argv)
    kept = tmp_path / "results" / "demo" / "vanilla" / "seed0"
    assert "--trainer.max_steps=5" in json.loads((kept / "cell.json").read_text())["argv"]
    # the 3-step run's end-of-run evaluation is kept beside the 5-step run's: the stage it belongs to reads it
    assert read_scalars(kept)["end/hack"] == [(2, pytest.approx(0.03)), (4, pytest.approx(0.05))]
    assert (kept / "end_eval.3steps.json").is_file() and (kept / "fit.3steps.log").read_text() == "3 steps\n"


LENGTHENED = "  - arms: [vanilla, erase]\n  - {arms: [erase], overrides: [--trainer.max_steps=300]}\n"


def test_a_kept_cell_a_later_stage_lengthens_keeps_its_checkpoint_and_a_fresh_clone_goes_on_from_it(tmp_path,
                                                                                                     monkeypatch):
    plan = write_plan(tmp_path, LENGTHENED, results=tmp_path / "results")
    with pytest.raises(SystemExit):  # the machine goes after stage 1
        run_plan(tmp_path, plan, FakeFit(stop_at=100), monkeypatch)
    kept = tmp_path / "results" / "demo"
    assert (kept / "erase" / "seed0" / "last.ckpt").read_bytes() == b"ckpt"
    assert not (kept / "vanilla" / "seed0" / "last.ckpt").exists()  # no later stage goes on from it
    shutil.rmtree(tmp_path / "demo")  # a fresh clone
    fresh = FakeFit()
    run_plan(tmp_path, plan, fresh, monkeypatch)
    assert [cell_of(a) for a in fresh.calls] == ["erase/seed0", "erase/seed1"]
    assert fresh.calls[0][-1] == f"--ckpt_path={tmp_path / 'demo' / 'erase' / 'seed0' / 'checkpoints' / 'last.ckpt'}"
    assert json.loads((kept / "erase" / "seed0" / "end_eval.json").read_text())["step"] == 300
    assert not (kept / "erase" / "seed0" / "last.ckpt").exists()  # nothing goes on from the 300-step run


def test_a_cell_kept_before_checkpoints_were_kept_gets_its_own_from_the_logs(tmp_path, monkeypatch):
    plan = write_plan(tmp_path, LENGTHENED, results=tmp_path / "results")
    with pytest.raises(SystemExit):
        run_plan(tmp_path, plan, FakeFit(stop_at=100), monkeypatch)
    kept = tmp_path / "results" / "demo" / "erase"
    for k in (0, 1):
        (kept / f"seed{k}" / "last.ckpt").unlink()
    (tmp_path / "demo" / "erase" / "seed1" / "fit.log").write_text("another run of these arguments\n")
    with pytest.raises(SystemExit):
        run_plan(tmp_path, plan, FakeFit(stop_at=100), monkeypatch)
    assert (kept / "seed0" / "last.ckpt").is_file()
    assert not (kept / "seed1" / "last.ckpt").exists()  # the checkpoint in the logs is not of the kept run


def test_a_kept_cell_lengthened_on_another_machine_keeps_its_published_steps(tmp_path, monkeypatch):
    results = str(tmp_path / "results")
    run_sweep(tmp_path, FakeFit(curve=0.5), monkeypatch, "--results", results, "--overrides", "[--trainer.max_steps=3]")
    shutil.rmtree(tmp_path / "demo")  # a new machine reruns the cell from step 0, to other last bits
    run_sweep(tmp_path, FakeFit(curve=0.7), monkeypatch, "--results", results, "--overrides", "[--trainer.max_steps=5]")
    kept = tmp_path / "results" / "demo" / "vanilla" / "seed0"
    assert read_scalars(kept)["hack/student"] == [(0, 0.5), (1, 0.5), (2, 0.5), (3, pytest.approx(0.7)),
                                                  (4, pytest.approx(0.7))]


def test_a_kept_cell_rerun_from_step_0_adds_nothing_to_its_published_steps(tmp_path, monkeypatch):
    results = str(tmp_path / "results")
    shorter = FakeFit(curve=0.5, sparse_steps=frozenset({0}))
    run_sweep(tmp_path, shorter, monkeypatch, "--results", results, "--overrides", "[--trainer.max_steps=3]")
    shutil.rmtree(tmp_path / "demo")  # the rerun samples the mode at other steps, published ones among them
    longer = FakeFit(curve=0.7, sparse_steps=frozenset({1, 3}))
    run_sweep(tmp_path, longer, monkeypatch, "--results", results, "--overrides", "[--trainer.max_steps=5]")
    kept = read_scalars(tmp_path / "results" / "demo" / "vanilla" / "seed0")
    assert kept["hack/student_sentinel"] == [(0, 0.5), (3, pytest.approx(0.7))]


def test_a_keep_cut_short_after_the_config_still_knows_the_kept_runs_steps(tmp_path, monkeypatch):
    results = str(tmp_path / "results")
    run_sweep(tmp_path, FakeFit(), monkeypatch, "--results", results, "--overrides", "[--trainer.max_steps=3]")
    shutil.rmtree(tmp_path / "demo")
    kept = tmp_path / "results" / "demo" / "vanilla" / "seed0"
    (kept / "config.yaml").write_text("trainer:\n  max_steps: 5\n")  # the 5-step keep was cut before its record
    run_sweep(tmp_path, FakeFit(), monkeypatch, "--results", results, "--overrides", "[--trainer.max_steps=5]")
    assert (kept / "end_eval.3steps.json").is_file()
    assert read_scalars(kept)["end/hack"] == [(2, pytest.approx(0.03)), (4, pytest.approx(0.05))]


def test_a_cell_that_cannot_be_kept_fails_alone_and_the_others_are_kept(tmp_path, monkeypatch, capsys):
    def keep_scalars(scalars, path):
        if path.parent.parent.name == "erase":
            raise OSError(28, "No space left on device")
        return real(scalars, path)
    real = sweep_mod.keep_scalars
    monkeypatch.setattr(sweep_mod, "keep_scalars", keep_scalars)
    with pytest.raises(SystemExit, match="2 of 4 cells failed: erase seed0, erase seed1"):
        run_sweep(tmp_path, FakeFit(), monkeypatch, "--results", str(tmp_path / "results"))
    assert "FAILED: OSError(28, 'No space left on device')" in capsys.readouterr().out
    assert (tmp_path / "results" / "demo" / "vanilla" / "seed1" / "cell.json").is_file()
    assert not (tmp_path / "results" / "demo" / "erase" / "seed0" / "cell.json").exists()


def test_a_cell_finished_before_results_were_asked_for_is_kept_on_the_next_run(tmp_path, monkeypatch):
    run_sweep(tmp_path, FakeFit(), monkeypatch)
    again = FakeFit()
    run_sweep(tmp_path, again, monkeypatch, "--results", str(tmp_path / "results"))
    assert again.calls == [] and (tmp_path / "results" / "demo" / "vanilla" / "seed1" / "cell.json").is_file()


def test_overlays_join_configs_in_order_and_a_misspelt_arm_fails_before_anything_runs(tmp_path, monkeypatch):
    fake = FakeFit()
    run_sweep(tmp_path, fake, monkeypatch, arms="[vanilla+no_teacher]")
    configs = [a for a in fake.calls[0] if a.endswith(".yaml")]
    assert configs == [str(REPO / "configs" / "vanilla.yaml"), str(REPO / "configs" / "teacher" / "no_teacher.yaml")]
    assert (tmp_path / "demo" / "vanilla+no_teacher" / "seed1").is_dir()
    run_sweep(tmp_path, FakeFit(), monkeypatch, arms=f"[{REPO / 'configs' / 'erase.yaml'}]")
    assert (tmp_path / "demo" / "erase" / "seed0" / "cell.json").is_file()  # a path arm is named by its stem
    nothing = FakeFit()
    with pytest.raises(FileNotFoundError, match="eraze"):
        run_sweep(tmp_path, nothing, monkeypatch, arms="[vanilla, eraze]")
    assert nothing.calls == []


def write_plan(tmp_path: Path, stages: str, workers: int = 1, results: Path | None = None) -> Path:
    plan = tmp_path / "plan.yaml"
    kept = f"results: {results}\n" if results else ""
    plan.write_text(f"name: demo\nseeds: [0, 1]\nworkers: {workers}\n{kept}stages:\n{stages}")
    return plan


def run_plan(tmp_path: Path, plan: Path, fake, monkeypatch) -> None:
    monkeypatch.setattr(sweep_mod, "run_fit", fake)
    # the fake cells' bases are checked against this cache: the suite's own (a real build) is not theirs
    monkeypatch.setenv("PGRPO_CACHE", str(tmp_path / "cache"))
    main(["sweep", "--config", str(plan), "--logs", str(tmp_path), "--configs", str(REPO / "configs")])


def test_a_plans_later_stage_lengthens_the_cells_an_earlier_stage_finished_and_a_rerun_runs_nothing(
        tmp_path, monkeypatch, capsys):
    plan = write_plan(tmp_path, "  - arms: [vanilla, erase]\n"
                                "  - {arms: [erase], overrides: [--trainer.max_steps=300]}\n")
    fake = FakeFit()
    run_plan(tmp_path, plan, fake, monkeypatch)
    assert [cell_of(a) for a in fake.calls] == ["vanilla/seed0", "vanilla/seed1", "erase/seed0", "erase/seed1",
                                                "erase/seed0", "erase/seed1"]
    for argv in fake.calls[4:]:  # the second stage goes on from the first's checkpoints
        assert "--trainer.max_steps=300" in argv and argv[-1].startswith("--ckpt_path=")
    capsys.readouterr()
    again = FakeFit()
    run_plan(tmp_path, plan, again, monkeypatch)
    assert again.calls == []
    out = capsys.readouterr().out
    assert out.count("skipped (finished)") == 4 and out.count("skipped (a later stage went on from it)") == 2


class SlowFit(FakeFit):
    """A fit that takes a while and records how many ran at once and when each started and ended."""

    def __init__(self):
        super().__init__()
        self.running, self.most, self.spans, self.lock = 0, 0, {}, threading.Lock()

    def __call__(self, argv, log, threads=None):
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        start = time.monotonic()
        time.sleep(0.2)
        rc = super().__call__(argv, log, threads)
        with self.lock:
            self.running -= 1
            self.spans.setdefault(cell_of(argv), []).append((start, time.monotonic()))
        return rc


def test_a_stage_with_its_own_seeds_runs_every_arm_at_the_first_seed_before_any_at_the_next(tmp_path, monkeypatch):
    # a bench whose budget may end early: seed 0 of every arm first, then as much of seed 1 as the budget allows
    plan = write_plan(tmp_path, "  - {arms: [vanilla, erase], seeds: [5]}\n"
                                "  - {arms: [vanilla, erase], seeds: [6]}\n"
                                "  - arms: [random_v]\n")
    fake = FakeFit()
    run_plan(tmp_path, plan, fake, monkeypatch)
    assert [cell_of(a) for a in fake.calls] == ["vanilla/seed5", "erase/seed5", "vanilla/seed6", "erase/seed6",
                                                "random_v/seed0", "random_v/seed1"]  # the plan's seeds: [0, 1]


def test_workers_run_a_stages_cells_side_by_side_and_a_stage_waits_for_the_one_before(tmp_path, monkeypatch):
    plan = write_plan(tmp_path, "  - arms: [vanilla, erase]\n"
                                "  - {arms: [erase], overrides: [--trainer.max_steps=300]}\n", workers=2)
    fake = SlowFit()
    run_plan(tmp_path, plan, fake, monkeypatch)
    assert fake.most == 2 and len(fake.calls) == 6
    first_stage_end = max(end for spans in fake.spans.values() for _, end in spans[:1])
    second_stage_start = min(spans[1][0] for spans in fake.spans.values() if len(spans) > 1)
    assert second_stage_start >= first_stage_end


def test_a_plans_thread_count_reaches_every_cells_process(tmp_path, monkeypatch):
    plan = write_plan(tmp_path, "  - arms: [vanilla]\n")
    plan.write_text(plan.read_text() + "threads: 1\n")
    fake = FakeFit()
    run_plan(tmp_path, plan, fake, monkeypatch)
    assert fake.threads == [1, 1]
    seen = {}

    class Child:
        def __init__(self, args, stdout, stderr, env):
            seen.update(env)

        def wait(self):
            return 0

        def poll(self):
            return 0

    monkeypatch.setattr(sweep_mod.subprocess, "Popen", Child)
    run_fit(["fit"], tmp_path / "fit.log", threads=3)  # the real one, not the fake run_plan put in its place
    assert seen["OMP_NUM_THREADS"] == "3"


@pytest.mark.slow
def test_a_real_sweep_runs_every_cell_and_reports(tmp_path, capsys):
    fast = ["--trainer.max_steps=2", "--model.generation.max_new_tokens=16", "--data.group_size=4",
            "--data.prompts_per_step=2"]
    main(["sweep", "--name", "real", "--arms", "[vanilla, random_v]", "--seeds", "[0]", "--logs", str(tmp_path),
          "--configs", str(REPO / "configs"), "--overrides", json.dumps(fast)])
    main(["report", str(tmp_path / "real"), "--full"])
    out = capsys.readouterr().out
    assert "| vanilla | vanilla | 1 |" in out and "| random_v | control | 1 |" in out


PLANS = sorted((REPO / "configs" / "sweeps").glob("*.yaml"))


@pytest.mark.parametrize("plan", PLANS, ids=lambda p: p.name)
def test_a_shipped_plan_names_configs_that_exist_and_each_overlay_resolves_on_its_arm(plan, tmp_path, capsys):
    _, stages = sweep_mod.read_plan(str(plan))  # also refuses a key the sweep would refuse
    arms = [arm for stage in stages for arm in stage.arms]
    for arm in arms:  # raises, naming the arm, for a config that is not there
        sweep_mod.fit_args(arm, 0, tmp_path, REPO / "configs", [])
    resolved_overlays = set()
    for arm in dict.fromkeys(a for a in arms if "+" in a):
        configs = [a for a in sweep_mod.fit_args(arm, 0, tmp_path, REPO / "configs", []) if a.endswith(".yaml")]
        # an overlay swaps a substrate in (a model, held-out levers, no teacher): it leaves what makes the arm
        # (its intervention, an honest arm's loopholes) as the arm states it
        arm_states = set().union(*(leaves(own(c)) for c in chain(Path(configs[0])) if base_of(c)))
        overlays = set().union(*(leaves(merged(Path(c))) for c in configs[1:]))
        clash = {k for k in arm_states & overlays if not k.startswith("trainer.logger")}
        assert not clash, f"{plan.name}: in {arm}, an overlay restates the arm's own {sorted(clash)}"
        if tuple(configs[1:]) in resolved_overlays:
            continue  # jsonargparse's joining is checked once per set of overlays
        resolved_overlays.add(tuple(configs[1:]))
        with pytest.raises(SystemExit) as exit_:
            main(["fit", *[x for c in configs for x in ("--config", c)], "--print_config"])
        assert exit_.value.code in (None, 0), f"{plan.name}: {arm} does not resolve"
        resolved = yaml.safe_load(capsys.readouterr().out)
        # the arm's settings and each overlay's (with the files they build on) survive in the whole, a later
        # file winning only the settings it states
        expected = {}
        for config in configs:
            expected = setting_by_setting(expected, merged(Path(config)))
        assert contains(resolved, expected), f"{plan.name}: {arm} loses a setting of one of its configs"


def chain(path: Path) -> list[Path]:
    """A config and the files it builds on, up to its root."""
    return [path] + (chain(base_of(path)) if base_of(path) else [])


def leaves(tree: dict) -> set[str]:
    return {leaf for key, value in tree.items() if key != "config" for leaf, _ in flatten(key, value)}


def setting_by_setting(base: dict, later: dict) -> dict:
    """Two --config files as jsonargparse joins them: mapping by mapping, an object of another class replaced."""
    out = dict(base)
    for key, value in later.items():
        before = out.get(key)
        same_object = not (isinstance(value, dict) and "class_path" in value
                           and isinstance(before, dict) and before.get("class_path") != value["class_path"])
        out[key] = setting_by_setting(before, value) if isinstance(value, dict) and isinstance(before, dict) \
            and same_object else value
    return out


KEPT_PLANS = [plan for plan in PLANS if "results" in yaml.safe_load(plan.read_text())]


@pytest.mark.parametrize("plan", KEPT_PLANS, ids=lambda p: p.name)
def test_a_shipped_plans_kept_cells_are_recognised_as_finished(plan, tmp_path, monkeypatch):
    # `pgrpo sweep --config PLAN` from the repository root, as far as it goes before any cell would run: every
    # cell kept in results/<sweep>/ passes the refusal checks and is skipped as finished (a config moved into a
    # folder of configs/ since it ran is the same argument), without running a 30-minute cell
    raw = yaml.safe_load(plan.read_text())
    kept_root = REPO / raw["results"] / raw["name"]
    if not kept_root.is_dir():
        pytest.skip(f"no kept cells in {kept_root}")
    monkeypatch.chdir(REPO)  # the recorded arguments name configs/ and logs/ as the sweep gave them: relative
    seeds, stages = sweep_mod.read_plan(str(plan))
    root = Path(raw.get("logs", "logs")) / raw["name"]
    # as the sweep plans them: a yoked placebo reads its method's run in the results store, named relative to the root
    stage_cells = sweep_mod.cells_of(stages, seeds, root, Path(raw.get("configs", "configs")),
                                     raw.get("overrides", []), Path(raw["results"]) / raw["name"])
    planned = sweep_mod.arguments_by_cell(stage_cells, root)

    def no_run(argv, log, threads=None):
        raise AssertionError(f"{log.parent} would run again: its kept cell was not recognised")

    monkeypatch.setattr(sweep_mod, "run_fit", no_run)
    checked = 0
    for cell, argvs in planned.items():
        kept = kept_root / cell.relative_to(root)
        if not (kept / sweep_mod.CELL_FILE).is_file():
            continue  # a cell the plan has not run yet
        sweep_mod.refuse_other_arguments(kept, argvs, kept=True)
        for index, argv in enumerate(argvs):
            ok, status = sweep_mod.run_cell(tmp_path / cell.relative_to(root), argv, argvs[index + 1:], kept=kept)
            assert ok and status.startswith("skipped"), f"{kept}: {status}"
        checked += 1
    assert checked, f"no planned cell of {plan.name} is kept in {kept_root}"


def test_a_bare_arm_name_finds_its_config_in_a_folder_of_configs_and_an_ambiguous_one_names_both(tmp_path):
    configs = tmp_path / "configs"
    (configs / "placebos").mkdir(parents=True)
    (configs / "erase.yaml").write_text("")
    (configs / "placebos" / "random_v.yaml").write_text("")
    argv = sweep_mod.fit_args("erase+random_v", 0, tmp_path / "logs", configs, [])
    assert [a for a in argv if a.endswith(".yaml")] == [str(configs / "erase.yaml"),
                                                        str(configs / "placebos" / "random_v.yaml")]
    assert sweep_mod.arm_name("erase+placebos/random_v") == "erase+random_v"  # the cell's directory: the stems
    (configs / "lomo").mkdir()
    (configs / "lomo" / "random_v.yaml").write_text("")
    with pytest.raises(FileNotFoundError, match="lomo/random_v.yaml.*placebos/random_v.yaml"):
        sweep_mod.fit_args("random_v", 0, tmp_path / "logs", configs, [])
    named = sweep_mod.fit_args("placebos/random_v", 0, tmp_path / "logs", configs, [])  # by its folder: no doubt
    assert named[2] == str(configs / "placebos" / "random_v.yaml")


def test_a_cell_kept_before_its_config_moved_into_a_folder_is_the_same_cell(tmp_path, monkeypatch, capsys):
    configs = tmp_path / "configs"
    configs.mkdir()
    for arm in ("vanilla", "random_v"):
        (configs / f"{arm}.yaml").write_text("")
    results = tmp_path / "results"
    monkeypatch.setattr(sweep_mod, "run_fit", FakeFit())
    monkeypatch.setenv("PGRPO_CACHE", str(tmp_path / "cache"))
    args = ["sweep", "--name", "demo", "--arms", "[vanilla, random_v]", "--seeds", "[0]", "--logs",
            str(tmp_path / "logs"), "--configs", str(configs), "--results", str(results)]
    main(args)
    recorded = json.loads((results / "demo" / "random_v" / "seed0" / "cell.json").read_text())["argv"]
    assert str(configs / "random_v.yaml") in recorded
    (configs / "placebos").mkdir()
    (configs / "random_v.yaml").rename(configs / "placebos" / "random_v.yaml")
    shutil.rmtree(tmp_path / "logs")  # a fresh clone: only the kept cells
    again = FakeFit()
    monkeypatch.setattr(sweep_mod, "run_fit", again)
    capsys.readouterr()
    main(args)
    assert again.calls == [] and capsys.readouterr().out.count("skipped (finished; kept in") == 2
    # a longer run of the moved arm is the kept cell taken further, not another cell
    main(args + ["--overrides", "[--trainer.max_steps=300]"])
    assert [cell_of(a) for a in again.calls] == ["vanilla/seed0", "random_v/seed0"]
    assert str(configs / "placebos" / "random_v.yaml") in again.calls[1]


def test_a_yoked_placebo_runs_after_its_method_and_reads_its_run_at_the_same_seed(tmp_path, monkeypatch):
    fake = FakeFit()
    run_sweep(tmp_path, fake, monkeypatch, "--overrides", "[--trainer.max_steps=3]", arms="[random_v@erase, erase]")
    assert [cell_of(a) for a in fake.calls] == ["erase/seed0", "erase/seed1", "random_v@erase/seed0",
                                                "random_v@erase/seed1"]
    placebo = fake.calls[2]
    assert placebo[:3] == ["fit", "--config", str(REPO / "configs" / "placebos" / "random_v.yaml")]
    assert f"--model.intervention.init_args.yoked_to={tmp_path / 'demo' / 'erase' / 'seed0'}" in placebo


def test_a_yoked_placebo_whose_method_no_stage_runs_is_refused_naming_the_run(tmp_path, monkeypatch):
    method = tmp_path / "demo" / "erase+no_teacher"
    with pytest.raises(SystemExit, match=re.escape(f"yoked to its method's run {method}")):
        run_sweep(tmp_path, FakeFit(), monkeypatch, arms="[random_v@erase+no_teacher]")


def test_a_yoked_placebo_whose_method_failed_is_not_run(tmp_path, monkeypatch, capsys):
    fake = FakeFit(fail={"erase"})
    with pytest.raises(SystemExit):
        run_sweep(tmp_path, fake, monkeypatch, "--overrides", "[--trainer.max_steps=3]", arms="[erase, random_v@erase]")
    assert [cell_of(a) for a in fake.calls] == ["erase/seed0", "erase/seed1"]
    assert f"its method's run {tmp_path / 'demo' / 'erase' / 'seed0'} did not finish" in capsys.readouterr().out
