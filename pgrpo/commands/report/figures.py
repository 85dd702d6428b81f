"""A report's figures and where they came from: `figures.json` beside them names the runs, their steps and the
arm order, so that they can be drawn again from the runs alone. The docs keep no PNG whose runs are kept in
results/: `make docs` draws them (docs/hooks/figures.py)."""

import json
from dataclasses import replace
from pathlib import Path

from pgrpo.commands.report.plots import plot_curves, plot_matched
from pgrpo.commands.report.stats import HACK, SOLVE
from pgrpo.records.events import Run, find_runs, first_steps

FIGURES_FILE = "figures.json"
# curves drawn when the runs logged them, beside hack.png and solve.png: the model's health, the knobs' drift along V
OPTIONAL_CURVES = (("entropy", "entropy.png"), ("adapter/delta_s_along_v", "drift.png"))


def draw_figures(by_arm: dict[str, list[Run]], honest: str | None, out_dir: Path, last: int) -> list[Path]:
    """hack.png and solve.png, entropy.png and drift.png where logged, then matched.png: their paths, in that order."""
    curves = [(HACK, "hack.png", True), (SOLVE, "solve.png", True)]
    curves += [(tag, name, False) for tag, name in OPTIONAL_CURVES if tag in logged_tags(by_arm)]
    for tag, name, rate in curves:
        plot_curves(by_arm, tag, out_dir / name, rate=rate)
    plot_matched(by_arm, honest, out_dir / "matched.png", last)
    return [out_dir / name for _, name, _ in curves] + [out_dir / "matched.png"]


def logged_tags(by_arm: dict[str, list[Run]]) -> set[str]:
    """The tags some run logged a value of."""
    return {tag for rs in by_arm.values() for r in rs for tag, values in r.scalars.items() if values}


def record_figures(out_dir: Path, source: str, by_arm: dict[str, list[Run]], steps: int | None, last: int,
                   honest: str | None, figures: list[Path]) -> None:
    """figures.json: what `redraw` needs to draw `figures` again from `source` (the report's LOGDIR)."""
    record = {"source": source, "runs": {arm: [r.seed for r in rs] for arm, rs in by_arm.items()}, "steps": steps,
              "last": last, "honest": honest, "figures": [p.name for p in figures]}
    (out_dir / FIGURES_FILE).write_text(json.dumps(record, indent=1) + "\n")


def redraw(out_dir: Path, root: Path = Path(".")) -> list[Path]:
    """Draw the figures out_dir/figures.json names again, from its runs under `root`/source."""
    path = out_dir / FIGURES_FILE
    record = json.loads(path.read_text())
    found = {(r.arm, r.seed): r for r in find_runs(root / record["source"])}
    missing = [f"{arm}/{seed}" for arm, seeds in record["runs"].items() for seed in seeds if (arm, seed) not in found]
    if missing:
        raise FileNotFoundError(f"{path}: runs not under {root / record['source']}: {', '.join(missing)}")
    steps = record["steps"]
    by_arm = {arm: [replace(r, scalars=first_steps(r.scalars, steps)) if steps else r
                    for r in (found[arm, seed] for seed in seeds)]
              for arm, seeds in record["runs"].items()}
    return draw_figures(by_arm, record["honest"], out_dir, record["last"])


def figures_missing(out_dir: Path) -> bool:
    """Whether a figure out_dir/figures.json names is not there."""
    names = json.loads((out_dir / FIGURES_FILE).read_text())["figures"]
    return not all((out_dir / name).is_file() for name in names)
