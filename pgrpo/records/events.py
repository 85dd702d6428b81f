"""A run's numbers read back: its TensorBoard event files and the config.yaml the CLI saved beside them.

Layout: every directory under a log directory that holds event files (or, in a sweep's results store, the
scalars.json.gz kept in their place: `keep_scalars`) is one run; its arm is its parent's
path relative to the log directory and its seed is its own name. The sweep writes <sweep>/<arm>/seed<k>/,
so arms are the sweep's arms and runs of two arms with the same seed<k> are paired. Anything else there
(checkpoints, configs, logs, PNGs, unreadable event files) is skipped.
"""

import gzip
import json
import warnings
from dataclasses import dataclass
from pathlib import Path

import yaml
import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

Scalars = dict[str, list[tuple[int, float]]]
EVENTS = "events.out.tfevents.*"
KEPT_SCALARS = "scalars.json.gz"  # a run's scalars where its event files are not kept (pgrpo sweep --results)
HACK, SOLVE = "hack/student", "solve/student"
# logged at exactly the steps whose backward reached the knobs: the step engine measures nothing on an idle step,
# where every group had zero reward variance (its intervention/active_rate is then 0)
HAD_GRADIENT = "hackward_share/gradient"

# Tags as runs logged them before 2026-12-07, when their abbreviations were spelled out: a run read back (its event
# files or its kept scalars) gives today's names, so a report reads old and new runs alike.
RENAMED_TAGS = {
    "proj/cin": "hackward_share/gradient", "proj/cin_null": "hackward_share/gradient_null",
    "proj/cin_student": "hackward_share/student", "proj/cin_null_student": "hackward_share/student_null",
    "proj/cin_teacher": "hackward_share/teacher", "proj/cin_null_teacher": "hackward_share/teacher_null",
    "proj/cout": "hackward_share/edited_gradient", "proj/cout_update": "hackward_share/update",
    "proj/rollout_cin_exploited": "hackward_share/exploited_rollouts",
    "proj/rollout_cin_clean": "hackward_share/clean_rollouts",
    "proj/rollout_cin_exploit_corr": "hackward_share/exploit_correlation",
    "proj/fired": "basis/axes_pushed_hackward", "proj/control_overlap": "basis/control_overlap",
    "proj/basis_overlap": "basis/refresh_overlap", "proj/kept_dims_share": "basis/kept_dims_share",
    "proj/advantage_weight": "intervention/advantage_weight",
    "proj/advantage_weight_exploited": "intervention/advantage_weight_exploited",
    "proj/advantage_weight_clean": "intervention/advantage_weight_clean",
}


def current_tag(tag: str) -> str:
    """The name a tag has today (`RENAMED_TAGS`); a tag never renamed is its own."""
    return RENAMED_TAGS.get(tag, tag)


def with_current_tags(scalars: Scalars) -> Scalars:
    """The scalars under today's tags; a run resumed across a rename logged one tag under both names: its steps
    are merged, the newer name winning a step logged under both."""
    current: dict[str, dict[int, float]] = {}
    for tag in sorted(scalars, key=lambda tag: tag in RENAMED_TAGS, reverse=True):  # old names first
        current.setdefault(current_tag(tag), {}).update(scalars[tag])
    return {tag: sorted(steps.items()) for tag, steps in current.items()}


def read_scalars(run_dir: str | Path) -> Scalars:
    """Every scalar tag of a run directory: tag -> [(step, value)] sorted by step.

    A resumed run writes a second event file into the same directory; events of
    all files are merged and, for a step logged twice, the later write wins. A
    file that cannot be read is skipped with a warning.
    """
    run_dir = Path(run_dir)
    files = sorted((p for p in run_dir.glob(EVENTS) if p.is_file()), key=lambda p: p.stat().st_mtime)
    if not files:
        if (run_dir / KEPT_SCALARS).is_file():
            return read_kept_scalars(run_dir / KEPT_SCALARS)
        raise FileNotFoundError(f"no TensorBoard event files (nor {KEPT_SCALARS}) in {run_dir}")
    merged: dict[str, dict[int, float]] = {}
    for file in files:
        try:
            acc = EventAccumulator(str(file), size_guidance={"scalars": 0})
            acc.Reload()
            events = {tag: acc.Scalars(tag) for tag in acc.Tags()["scalars"]}
        except Exception as e:  # one damaged file must not hide the rest of the run
            warnings.warn(f"skipping unreadable event file {file}: {e}")
            continue
        for tag, tag_events in events.items():
            for event in tag_events:
                merged.setdefault(tag, {})[event.step] = event.value
    return with_current_tags({tag: sorted(steps.items()) for tag, steps in merged.items()})


def keep_scalars(scalars: Scalars, path: Path) -> None:
    """Write a run's scalars as gzipped JSON, a small fraction of its event files, to be committed with a sweep's
    results.

    TensorBoard holds float32 values: each is written as the shortest decimal that reads back to the same
    float32, so a report from the kept file gives the very numbers the event files give. Gzipped because every
    cell commits one (255 cells' plain JSON, 22 MB, took the working tree past the 64 MiB a GPU machine is sent),
    with no time stamp in the header, so the same scalars give the same bytes.
    """
    # float(str(float32)): a float64 whose shortest repr is the float32's, so json writes "0.3", not 0.30000001...
    kept = {tag: [[step for step, _ in values], [float(str(np.float32(v))) for _, v in values]]
            for tag, values in sorted(scalars.items())}
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(gzip.compress(json.dumps(kept, separators=(",", ":")).encode(), compresslevel=9, mtime=0))
    tmp.rename(path)


def read_kept_scalars(path: Path) -> Scalars:
    """The scalars `keep_scalars` wrote, each value the float32 TensorBoard held (as read_scalars gives it)."""
    try:
        kept = json.loads(gzip.decompress(path.read_bytes()))
        return with_current_tags({tag: [(int(step), float(np.float32(v))) for step, v in zip(steps, values)]
                                  for tag, (steps, values) in kept.items()})
    except (OSError, ValueError, TypeError) as err:
        raise ValueError(f"{path}: not a run's kept scalars ({err})") from err


@dataclass
class Run:
    arm: str
    seed: str  # the run directory's name: seed<k> in a sweep
    path: Path
    scalars: Scalars
    config: dict | None  # the config.yaml the CLI saved beside the event files; None if missing or unreadable
    base: dict | None = None  # the base it recorded (load_base); None for a run from before runs recorded it
    code: list[dict] | None = None  # the code each part of it ran (load_code); None from before runs recorded it


def find_runs(logdir: str | Path) -> list[Run]:
    """Every run under `logdir` with hack and solve curves, sorted by (arm, seed)."""
    logdir = Path(logdir)
    if not logdir.is_dir():
        raise FileNotFoundError(f"no log directory {logdir}")
    runs = []
    run_dirs = {p.parent for pattern in (EVENTS, KEPT_SCALARS) for p in logdir.rglob(pattern) if p.is_file()}
    for run_dir in sorted(run_dirs):
        scalars = read_scalars(run_dir)
        if HACK not in scalars or SOLVE not in scalars:
            continue  # e.g. a run that died before its first step
        arm = run_dir.parent.relative_to(logdir).as_posix() if run_dir != logdir else run_dir.parent.name
        runs.append(Run(arm, run_dir.name, run_dir, scalars, load_config(run_dir), load_base(run_dir),
                        load_code(run_dir)))
    return sorted(runs, key=lambda r: (r.arm, r.seed))


def tail_mean(scalars: Scalars, tag: str, last: int = 5) -> float | None:
    """Mean of the last `last` logged values of `tag` (None if never logged)."""
    values = [v for _, v in scalars.get(tag, [])][-last:]
    return sum(values) / len(values) if values else None


def run_length(run: Run) -> int:
    """How many optimizer steps the run logged: its last logged step + 1, over every tag."""
    return 1 + max((values[-1][0] for values in run.scalars.values() if values), default=-1)


def first_steps(scalars: Scalars, n: int) -> Scalars:
    """The scalars of steps 0..n-1 only: the run as it stood when it had taken n optimizer steps."""
    return {tag: [(step, v) for step, v in values if step < n] for tag, values in scalars.items()}


BASE_FILE = "base.json"  # what a run records of its base (pgrpo.records.summary.RunSummary, models.base_record)
BASIS_FILE = "basis.json"  # which V it trained with: digest, k and how it was built (pgrpo.records.summary.RunSummary)
CODE_FILE = "code.json"  # the code it ran, a record per part of it (pgrpo.records.summary.RunSummary, pgrpo.records.provenance)
POOL_FILE = "teacher_pool.json"  # the teacher pool it trained with: its path and rows' digest (pgrpo.records.summary)


def load_base(run_dir: Path) -> dict | None:
    """The base a run recorded; None for a run from before runs recorded it, or an unreadable file."""
    try:
        base = json.loads((run_dir / BASE_FILE).read_text())
    except (OSError, ValueError):
        return None
    return base if isinstance(base, dict) and "digest" in base else None


def load_basis(run_dir: Path) -> dict | None:
    """The V a run recorded ({digest, k_total, meta}); None for a run from before runs recorded it. A file of another
    shape is refused, naming it."""
    path = run_dir / BASIS_FILE
    basis = _read_record(path, "V")
    if basis is not None and not (isinstance(basis, dict) and "digest" in basis
                                  and isinstance(basis.get("meta"), dict)):
        raise ValueError(f"{path}: not a run's V record ({{digest, k_total, meta}}): {basis!r:.200}")
    return basis


def load_code(run_dir: Path) -> list[dict] | None:
    """The code each part of a run ran (a resumed run's later steps ran the code of its resume), as
    pgrpo.records.provenance.code_record gives it; None for a run from before runs recorded it. A file of another shape is
    refused, naming it: a run whose code cannot be read is not one whose code went unrecorded."""
    path = run_dir / CODE_FILE
    parts = _read_record(path, "code")
    if parts is not None and not (isinstance(parts, list) and parts and all(
            isinstance(p, dict) and ("commit" in p or "version" in p) for p in parts)):
        raise ValueError(f"{path}: not a run's code record (a list of {{commit, clean, changed}} or {{version}} "
                         f"records): {parts!r:.200}")
    return parts


def _read_record(path: Path, what: str):
    """A run's JSON record; None where the run has none (it is from before runs recorded it)."""
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ValueError(f"{path}: not a run's {what} record ({err})") from err


def load_config(run_dir: Path) -> dict | None:
    """The config.yaml the CLI saved in a run directory; None if it is missing or unreadable."""
    try:
        config = yaml.safe_load((run_dir / "config.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return None
    return config if isinstance(config, dict) else {}


def setting(config: dict, dotted: str, default):
    """The config's value at a dotted key, or `default` where it is unset (a run older than the key)."""
    node = config
    for key in dotted.split("."):
        if not isinstance(node, dict) or node.get(key) is None:
            return default
        node = node[key]
    return node
