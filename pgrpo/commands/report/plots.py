"""The report's figures: a tag's curve per arm over steps, and each run's hack against its solve."""

import statistics
from pathlib import Path

from pgrpo.commands.report.kinds import arm_kind
from pgrpo.commands.report.stats import HACK, SOLVE, mean_over_seeds
from pgrpo.records.events import Run, tail_mean

def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on a training machine
    import matplotlib.pyplot as plt

    return plt


def plot_curves(by_arm: dict[str, list[Run]], tag: str, path: Path, rate: bool = True) -> None:
    """`tag` over steps, one line per arm (mean over seeds) with a ±std band across seeds (a rate: on [0, 1])."""
    plt = _pyplot()
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
    ax.set(xlabel="step", ylabel=tag, title=f"{tag}: mean ± std across seeds")
    if rate:
        ax.set_ylim(-0.02, 1.02)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_matched(by_arm: dict[str, list[Run]], honest: str | None, path: Path, last: int = 5) -> None:
    """Each run's last-`last`-step hack against its solve, one colour per arm, and the honest arm's mean solve
    as a dashed line: an arm beats vanilla at matched solve when its points sit lower at the same x."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 5))
    for i, (arm, runs) in enumerate(by_arm.items()):
        solve, hack = zip(*[(tail_mean(r.scalars, SOLVE, last), tail_mean(r.scalars, HACK, last)) for r in runs])
        # ten colours, then the next marker: a sweep of every LOMO arm has more than ten arms
        ax.scatter(solve, hack, color=f"C{i % 10}", marker="os^Dv"[i // 10 % 5], label=f"{arm} ({arm_kind(runs)})")
    if honest:
        ax.axvline(mean_over_seeds(by_arm[honest], SOLVE, last), color="gray", linestyle="--",
                   label=f"{honest}: mean solve (no loophole)")
    ax.set(xlabel=f"{SOLVE}, last {last} steps", ylabel=f"{HACK}, last {last} steps",
           title="hack at matched solve: one point per run", xlim=(-0.02, 1.02), ylim=(-0.02, 1.02))
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.02, 1))  # beside the axes: points fill them
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
