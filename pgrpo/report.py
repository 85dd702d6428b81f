"""Read TensorBoard event files back into numbers, and `pgrpo report`: a sweep's table and curves.

Layout: every directory under LOGDIR that holds event files is one run; its
arm is its parent's path relative to LOGDIR and its seed is its own name. The
sweep writes <sweep>/<arm>/seed<k>/, so arms are the sweep's arms and runs of
two arms with the same seed<k> are paired. Anything else in LOGDIR (checkpoints,
configs, logs, PNGs, unreadable event files) is skipped.
"""

import math
import statistics
import warnings
from dataclasses import dataclass
from pathlib import Path

import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

Scalars = dict[str, list[tuple[int, float]]]
EVENTS = "events.out.tfevents.*"
HACK, SOLVE = "hack/student", "solve/student"
# (column, tag); each cin beside its own null (a random direction with the same per-module gradient norms: √(Σ w k/2r))
COLUMNS = [("hack", HACK), ("solve", SOLVE), ("cin_student", "proj/cin_student"),
           ("null_student", "proj/cin_null_student"), ("cin_teacher", "proj/cin_teacher"),
           ("null_teacher", "proj/cin_null_teacher")]
# each appears only when some run logged it: the control's overlap with the real V (logged once, at train start)
# and the route arm's deployment eval, both read at their last value
OPTIONAL_COLUMNS = [("control overlap", "proj/control_overlap"), ("deploy hack", "deploy/hack"),
                    ("deploy solve", "deploy/solve")]


def read_scalars(run_dir: str | Path) -> Scalars:
    """Every scalar tag of a run directory: tag -> [(step, value)] sorted by step.

    A resumed run writes a second event file into the same directory; events of
    all files are merged and, for a step logged twice, the later write wins. A
    file that cannot be read is skipped with a warning.
    """
    run_dir = Path(run_dir)
    files = sorted((p for p in run_dir.glob(EVENTS) if p.is_file()), key=lambda p: p.stat().st_mtime)
    if not files:
        raise FileNotFoundError(f"no TensorBoard event files in {run_dir}")
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
    return {tag: sorted(steps.items()) for tag, steps in merged.items()}


@dataclass
class Run:
    arm: str
    seed: str  # the run directory's name: seed<k> in a sweep
    path: Path
    scalars: Scalars


def find_runs(logdir: str | Path) -> list[Run]:
    """Every run under `logdir` with hack and solve curves, sorted by (arm, seed)."""
    logdir = Path(logdir)
    if not logdir.is_dir():
        raise FileNotFoundError(f"no log directory {logdir}")
    runs = []
    for run_dir in sorted({p.parent for p in logdir.rglob(EVENTS) if p.is_file()}):
        scalars = read_scalars(run_dir)
        if HACK not in scalars or SOLVE not in scalars:
            continue  # e.g. a run that died before its first step
        arm = run_dir.parent.relative_to(logdir).as_posix() if run_dir != logdir else run_dir.parent.name
        runs.append(Run(arm, run_dir.name, run_dir, scalars))
    return sorted(runs, key=lambda r: (r.arm, r.seed))


def tail_mean(scalars: Scalars, tag: str, last: int = 5) -> float | None:
    """Mean of the last `last` logged values of `tag` (None if never logged)."""
    values = [v for _, v in scalars.get(tag, [])][-last:]
    return sum(values) / len(values) if values else None


def is_vanilla(run_dir: Path) -> bool:
    """Projection arm none and no negative-control callback, per the config.yaml the CLI saved."""
    try:
        config = yaml.safe_load((run_dir / "config.yaml").read_text()) or {}
    except (OSError, yaml.YAMLError):
        return False
    arm = ((config.get("model") or {}).get("projection") or {}).get("arm")
    callbacks = (config.get("trainer") or {}).get("callbacks") or []
    control = any("ControlBasis" in str(cb.get("class_path", "")) for cb in callbacks if isinstance(cb, dict))
    return arm == "none" and not control


def pick_baseline(by_arm: dict[str, list[Run]], baseline: str | None) -> str | None:
    """The given arm; else the one vanilla arm (preferring one named `vanilla`); None if that is ambiguous."""
    if baseline is not None:
        if baseline not in by_arm:
            raise ValueError(f"--baseline {baseline!r}: no such arm; arms are {sorted(by_arm)}")
        return baseline
    vanilla = [arm for arm, runs in by_arm.items() if all(is_vanilla(r.path) for r in runs)]
    if "vanilla" in by_arm and ("vanilla" in vanilla or not vanilla):
        return "vanilla"
    return vanilla[0] if len(vanilla) == 1 else None


def paired_baselines(by_arm: dict[str, list[Run]], base: str | None, explicit: bool) -> dict[str, str | None]:
    """The arm each arm's Δ is taken against: an arm with overlays (`erase+no_teacher`) against the vanilla
    arm with the same overlays (`vanilla+no_teacher`) when the sweep has one, so that Δ isolates the arm;
    otherwise, or when the baseline was chosen explicitly, against `base`."""
    pairs = {}
    for arm in by_arm:
        _, *overlays = arm.split("+")
        twin = "+".join([base.split("+")[0], *overlays]) if base and overlays and not explicit else None
        if twin in by_arm and twin != arm and all(is_vanilla(r.path) for r in by_arm[twin]):
            pairs[arm] = twin
        else:
            pairs[arm] = base if arm != base else None
    return pairs


def mean_std(values: list[float]) -> str:
    """'m ± s' with the sample std over seeds; just 'm' for one seed; '–' for none."""
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}"


def arm_table(by_arm: dict[str, list[Run]], pairs: dict[str, str | None], last: int = 5) -> str:
    """One markdown row per arm: seeds, last-`last`-step mean ± std of hack, solve, their deltas paired with
    `pairs[arm]` at the same seed, cin."""
    logged = {tag for runs in by_arm.values() for r in runs for tag in r.scalars}
    columns = list(COLUMNS) + [(c, tag) for c, tag in OPTIONAL_COLUMNS if tag in logged]
    read_last = {tag for _, tag in OPTIONAL_COLUMNS}
    header = ["arm", "seeds", "hack", "solve", "Δhack", "Δsolve", *[c for c, _ in columns[2:]]]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for arm, runs in by_arm.items():
        cells = {c: mean_std(_present(tail_mean(r.scalars, tag, 1 if tag in read_last else last)
                                      for r in runs)) for c, tag in columns}
        deltas = ["–", "–"]
        if pairs.get(arm) is not None:
            base = {r.seed: r for r in by_arm[pairs[arm]]}
            paired = [(r, base[r.seed]) for r in runs if r.seed in base]
            deltas = [mean_std(_present(_diff(tail_mean(r.scalars, tag, last), tail_mean(b.scalars, tag, last))
                                        for r, b in paired)) for tag in (HACK, SOLVE)]
        row = [arm, str(len(runs)), cells["hack"], cells["solve"], *deltas, *[cells[c] for c, _ in columns[2:]]]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def mode_table(by_arm: dict[str, list[Run]], last: int = 5) -> str | None:
    """hack / solve per loophole mode and arm (means over seeds), from hack/student_<mode>, solve/student_<mode>."""
    prefix = HACK + "_"
    modes = sorted({t[len(prefix):] for runs in by_arm.values() for r in runs for t in r.scalars if t.startswith(prefix)})
    if not modes:
        return None
    lines = ["| arm | " + " | ".join(modes) + " |", "|" + "---|" * (len(modes) + 1)]
    for arm, runs in by_arm.items():
        cells = []
        for mode in modes:
            hack, solve = (_present(tail_mean(r.scalars, f"{tag}_{mode}", last) for r in runs) for tag in (HACK, SOLVE))
            cells.append(" / ".join(f"{statistics.mean(v):.2f}" if v else "–" for v in (hack, solve)))
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_curves(by_arm: dict[str, list[Run]], tag: str, path: Path) -> None:
    """A rate `tag` over steps, one line per arm (mean over seeds) with a ±std band across seeds."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on a training machine
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for arm, runs in by_arm.items():
        by_step: dict[int, list[float]] = {}
        for r in runs:
            for step, value in r.scalars.get(tag, []):
                by_step.setdefault(step, []).append(value)
        steps = sorted(by_step)
        mean = [statistics.mean(by_step[s]) for s in steps]
        std = [statistics.stdev(by_step[s]) if len(by_step[s]) > 1 else 0.0 for s in steps]
        (line,) = ax.plot(steps, mean, label=f"{arm} (n={len(runs)})")
        ax.fill_between(steps, [m - s for m, s in zip(mean, std)], [m + s for m, s in zip(mean, std)],
                        color=line.get_color(), alpha=0.2, linewidth=0)
    ax.set(xlabel="step", ylabel=tag, title=f"{tag}: mean ± std across seeds", ylim=(-0.02, 1.02))  # a rate
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def report(logdir: str, baseline: str | None = None, out: str | None = None, last: int = 5) -> None:
    """Print a markdown table per arm (hack, solve, paired deltas vs vanilla, cin) and write PNG curves.

    Per arm: hack and solve of the student samples as the mean over seeds of each run's last-5-step
    mean ± the sample std across seeds, the paired difference with vanilla at the same seed (Δ),
    cin_student and cin_teacher, each beside its null (what a random direction with the same per-module
    gradient norms would give: √(Σ_m w_m k_m / 2 r_m), w_m = module m's share of ‖g‖²); then hack / solve
    per loophole mode.

    Args:
        logdir: a sweep directory: runs are LOGDIR/<arm>/seed<k>/ as `pgrpo sweep` writes them (any
            directory of TensorBoard event files works: a run's arm is its parent's path).
        baseline: the arm deltas are taken against (default: vanilla = the arm whose config has
            projection arm none and no negative control, preferring one named vanilla; an arm with
            overlays, `erase+no_teacher`, is then paired with `vanilla+no_teacher` if the sweep has it).
        out: where hack.png, solve.png and report.md go (default: LOGDIR/report).
        last: steps averaged at the end of each run.
    """
    runs = find_runs(logdir)
    if not runs:
        raise SystemExit(f"no runs with {HACK} and {SOLVE} curves under {logdir}")
    by_arm: dict[str, list[Run]] = {}
    for r in runs:
        by_arm.setdefault(r.arm, []).append(r)
    base = pick_baseline(by_arm, baseline)
    if base is not None:  # the baseline row first, the others alphabetically
        by_arm = {base: by_arm[base]} | {arm: rs for arm, rs in by_arm.items() if arm != base}
    out_dir = Path(out) if out else Path(logdir) / "report"
    out_dir.mkdir(parents=True, exist_ok=True)
    plots = [out_dir / f"{tag.split('/')[0]}.png" for tag in (HACK, SOLVE)]
    for tag, path in zip((HACK, SOLVE), plots):
        plot_curves(by_arm, tag, path)
    pairs = paired_baselines(by_arm, base, explicit=baseline is not None)
    against = f"`{base}` at the same seed" if base else "nothing (no unique vanilla arm: pass --baseline)"
    twins = [f"`{arm}` with `{twin}`" for arm, twin in pairs.items() if twin not in (None, base)]
    if twins:
        against += " (an arm with overlays with the vanilla arm of the same overlays: " + ", ".join(twins) + ")"
    parts = [f"# pgrpo report: {logdir}",
             f"Last-{last}-step mean ± sample std over seeds; Δ = paired difference with {against}. "
             f"cin_* is the hack-ward fraction of the gradient; null_* is its value for a random direction "
             f"with the same per-module norms, √(Σ w·k/2r).",
             arm_table(by_arm, pairs, last)]
    modes = mode_table(by_arm, last)
    if modes:
        parts += [f"Per loophole mode, hack / solve (last-{last}-step means over seeds):", modes]
    parts.append("Curves: " + ", ".join(str(p) for p in plots))
    text = "\n\n".join(parts) + "\n"
    (out_dir / "report.md").write_text(text)
    print(text, end="")


def _present(values) -> list[float]:
    return [v for v in values if v is not None and not math.isnan(v)]


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b
