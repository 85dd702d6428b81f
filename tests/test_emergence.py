"""The embedded default's reason to exist: under configs/vanilla.yaml the student learns to hack, on CPU.

Slow (about 7 minutes on 2 cores: the full pretraining of the base, then 100 GRPO steps), so it is out
of the default run: `python -m pytest -m slow tests/test_emergence.py`.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pgrpo.model.embedded import PRETRAIN_STEPS_ENV
from pgrpo.records.events import read_scalars, tail_mean

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_vanilla_config_makes_the_student_hack_while_solve_stays_measured(tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if k != PRETRAIN_STEPS_ENV}  # the real base, not the 2-step one
    subprocess.run([sys.executable, "-m", "pgrpo.cli", "fit", "--config", str(REPO / "configs" / "vanilla.yaml"),
                    "--trainer.logger.init_args.save_dir", str(tmp_path)], check=True, env=env, cwd=REPO)
    [run] = (tmp_path / "vanilla").iterdir()
    scalars = read_scalars(run)
    first_step, first_hack = scalars["hack/student"][0]
    assert first_step == 0 and first_hack < 0.05
    assert tail_mean(scalars, "hack/student") > 0.5
    assert len(scalars["solve/student"]) == len(scalars["hack/student"])  # measured at every step
