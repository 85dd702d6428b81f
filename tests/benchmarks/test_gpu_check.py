import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # the whole check at tiny sizes: about 6 minutes on 2 cores
def test_the_gpu_check_rehearses_end_to_end_on_the_cpu(tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "PGRPO_CACHE": str(tmp_path / "cache")}
    done = subprocess.run(["make", "gpu-check", "DEVICE=cpu", f"OUT={out}", f"GPU_PYTHON={sys.executable}"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((out / "gpu_check.json").read_text())
    assert result["failures"] == []
    parts = result["parts"]
    assert all(part["wall_s"] >= 0 for part in parts.values())  # which part took the budget
    assert parts["cuda_tests"]["passed"] >= 11 and parts["cuda_tests"]["skipped"] == 0  # run on the CPU, not skipped
    assert parts["cuda_tests"]["exit"] == 0 and parts["lab_cell"]["beside"] == "after"  # 2 cores: one, then the other
    assert set(parts["real_size"]["shapes"]) == {"smollm2-135m", "qwen3-0.6b"}
    assert {a: parts["lab_cell"]["arms"][a]["steps"] for a in ("vanilla", "erase")} == {"vanilla": 3, "erase": 3}
    assert parts["environment"]["lower_bounds"] and all(b["ok"] for b in parts["environment"]["lower_bounds"])
    page = (out / "gpu_check.md").read_text()
    for heading in ("## What ran where", "## CUDA tests: ", "## The step at real-model size", "## The embedded lab cell",
                    "### `pgrpo report`"):
        assert heading in page
    assert "- seconds per part: install " in page
    assert (out / "hack.png").is_file() and (out / "gpu_check.log").is_file()
    assert len(list(out.iterdir())) <= 8  # what comes back from a GPU machine: at most 8 files
