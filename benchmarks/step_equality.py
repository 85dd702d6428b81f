"""Every arm's 6-step seed-0 cell, before and after a refactor of the step: equal in every logged scalar.

A change that only moves code (the step out of the LightningModule, a package regrouped) must leave each
arm's numbers as they were, bit for bit. Record the cells on the commit before the change, then on the
change, and compare:

    git worktree add /tmp/before <commit-before> && cd /tmp/before && make setup
    python -m benchmarks.step_equality record /tmp/before.json.gz       # in /tmp/before, ~15 min
    python -m benchmarks.step_equality record /tmp/after.json.gz        # in this checkout
    python -m benchmarks.step_equality compare /tmp/before.json.gz /tmp/after.json.gz

The cells run one thread each (a run's last bits depend on its thread count), two at a time, their
end-of-run evaluation at one sample a problem. Timings (`time/*`) differ from run to run and are left out;
every other scalar, the end-of-run evaluation's among them, must be equal. A slow check, not a CI test.
"""

import gzip
import json
import sys
import tempfile
from pathlib import Path

from jsonargparse import auto_cli

from pgrpo.commands.sweep import arm_name, sweep
from pgrpo.records.events import read_scalars, with_current_tags

HERE = Path(__file__).parent
# every arm of configs/ and of configs/placebos/, and the overlays that take another path through the step (a
# projection variant, the optimizer, the teacher rows' treatment, no teacher rows, a held-out mode), and the step's
# own settings that no arm changes (several optimizer steps a batch, micro-batches, a KL term every step):
# step_equality.yaml
CELLS = [
    "vanilla", "honest", "erase", "route", "placebos/random_v", "placebos/shuffled_v", "placebos/nonhack_v",
    "placebos/route_random_v", "adv_gate", "placebos/adv_gate_random_v", "adv_shortcut", "placebos/adv_shortcut_random",
    "adv_shortcut_v", "placebos/adv_shortcut_v_random", "clean_subspace", "placebos/clean_subspace_random",
    "gt_penalty", "gt_screen", "probe_penalty", "placebos/probe_penalty_random", "probe_penalty+probe_penalty/screen",
    *(f"erase+projection/{variant}" for variant in ("no_gate", "no_gate_max", "no_gate_raw", "one_sided",
                                                    "position", "second_moment_only", "update")),
    "erase+optim/sgd", "vanilla+teacher/teacher_importance", "vanilla+teacher/teacher_signed",
    "erase+teacher/no_teacher", "erase+lomo/lomo_sentinel", f"erase+{HERE / 'step_equality.yaml'}",
]
STEPS = 6
TIMING = "time/"


def record(out: Path, cells: list[str] = CELLS, workers: int = 2, logs: Path | None = None) -> None:
    """Run each cell for 6 steps at seed 0 and write every scalar it logged (timings aside) to `out` (gzip JSON)."""
    logs = logs or Path(tempfile.mkdtemp(prefix="step-equality-"))
    try:
        sweep("cells", arms=cells, seeds=[0], workers=workers, threads=1, logs=str(logs),
              overrides=[f"--trainer.max_steps={STEPS}", "--end_eval.samples_per_problem=1"])
    except SystemExit as failed:
        if failed.code:  # the cells that ran are still recorded: their numbers say where a change went wrong
            print(failed.code, file=sys.stderr)
    scalars = {}
    for cell in cells:
        run = logs / "cells" / arm_name(cell) / "seed0"
        try:
            scalars[arm_name(cell)] = {tag: points for tag, points in read_scalars(run).items()
                                       if not tag.startswith(TIMING)}
        except FileNotFoundError as missing:
            print(f"{cell}: {missing}", file=sys.stderr)
    out.write_bytes(gzip.compress(json.dumps(scalars, sort_keys=True).encode()))
    print(f"{len(scalars)} of {len(cells)} cells recorded in {out} (runs in {logs})")


def compare(before: Path, after: Path) -> None:
    """Exit non-zero unless every cell of `before` logged the same scalars, step for step, in `after`."""
    # a recording from before a tag's rename holds its old name: both read under today's
    old, new = ({cell: with_current_tags(scalars) for cell, scalars in recorded.items()}
                for recorded in (json.loads(gzip.decompress(path.read_bytes())) for path in (before, after)))
    differences = []
    for cell in sorted(old.keys() | new.keys()):
        if cell not in old or cell not in new:
            differences.append(f"{cell}: only in {before if cell in old else after}")
            continue
        for tag in sorted(old[cell].keys() | new[cell].keys()):
            was, now = old[cell].get(tag), new[cell].get(tag)
            if was != now:
                first = next((a, b) for a, b in zip(was or [None], now or [None]) if a != b) if was and now else None
                differences.append(f"{cell} {tag}: {'first differs ' + str(first) if first else 'logged in one only'}")
    for line in differences:
        print(line)
    cells = len(old.keys() & new.keys())
    tags = sum(len(old[c]) for c in old.keys() & new.keys())
    print(f"{cells} cells, {tags} tags compared: {len(differences)} differ")
    if differences:
        sys.exit(1)


if __name__ == "__main__":
    auto_cli([record, compare])
