"""What `pgrpo report` prints by default: each arm's end hack and solve, its difference from vanilla, the figures.

What a person reads first, report.md holding the rest: a heading that says what is compared, each arm's end hack
and end solve with their 95% intervals and, under it, its difference from its vanilla, a line per figure written,
and where the full report is."""

from pathlib import Path

from pgrpo.commands.report.decisions import interval
from pgrpo.commands.report.stats import HACK, SOLVE, _present, end_rate
from pgrpo.records.events import Run, run_length, tail_mean
from pgrpo.evaluation.intervals import newcombe, t_interval

FIGURES = {"hack": "hack rate per step, one line per arm (mean ± std over seeds)",
           "solve": "solve rate per step, one line per arm (mean ± std over seeds)",
           "entropy": "the policy's entropy per step",
           "drift": "the knobs' drift along V, ⟨V, δS⟩, per step",
           "matched": "each run's hack against its solve over its last steps"}
LAST_TAGS = {"hack": HACK, "solve": SOLVE}  # without an end-of-run evaluation: the training steps' rates


def brief(by_arm: dict[str, list[Run]], pairs: dict[str, str | None], last: int, cautions: list[str],
          figures: list[Path], report: Path) -> str:
    """The heading, one row per arm and one under it for its difference from `pairs[arm]` at the same seed, the
    `cautions` (runs left out, unequal lengths), a line per figure and the path of the full report."""
    end = any(r.scalars.get("end/hack") for runs in by_arm.values() for r in runs)
    rows = [("arm", "end hack", "end solve") if end else ("arm", f"last-{last} hack", f"last-{last} solve")]
    for arm, runs in by_arm.items():
        rows.append((arm, *(rate(runs, kind, end, last) for kind in ("hack", "solve"))))
        if pairs.get(arm):
            rows.append((f"  − {pairs[arm]}", *(difference(runs, by_arm[pairs[arm]], kind, end, last)
                                                 for kind in ("hack", "solve"))))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    table = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    intervals = ("Wilson's for a run, t over seeds, Newcombe's for one seed's difference" if end
                 else "t over seeds, none for one seed")
    width = max(len(str(f)) for f in figures) + 2
    lines = [heading(by_arm, pairs, end, last), "", *table, "",
             "− ARM: the arm above minus ARM, paired by seed.", f"[..]: 95% intervals ({intervals}).", *cautions, "",
             *(f"{str(f):<{width}}{FIGURES[f.stem]}" for f in figures),
             f"the full report, every table: {report} (--full prints it)"]
    return "\n".join(lines) + "\n"


def heading(by_arm: dict[str, list[Run]], pairs: dict[str, str | None], end: bool, last: int) -> str:
    """'vanilla vs erase: 1 seed each, 60 steps, end-of-run evaluation on 336 samples per run'; 'N arms against
    vanilla: ...' where the arms' names would take it past 100 columns."""
    runs = [r for rs in by_arm.values() for r in rs]
    counts = {len(rs) for rs in by_arm.values()}
    seeds = f"{spread(counts)} seed{'s' if max(counts) > 1 else ''} {'each' if len(counts) == 1 else 'per arm'}"
    if end:
        samples = {int(tail_mean(r.scalars, "end/samples", 1)) for r in runs if r.scalars.get("end/samples")}
        how = f"end-of-run evaluation on {spread(samples)} samples per run"
    else:
        how = f"last-{last}-step means (no end-of-run evaluation)"
    what = f": {seeds}, {spread({run_length(r) for r in runs})} steps, {how}"
    arms = " vs ".join(by_arm)
    if len(arms + what) > 100:
        refs = {ref for ref in pairs.values() if ref}
        arms = f"{len(by_arm)} arms" + (f" against {refs.pop()}" if len(refs) == 1 else "")
    return arms + what


def spread(values: set[int]) -> str:
    return f"{min(values)}" if len(values) == 1 else f"{min(values)}–{max(values)}"


def rate(runs: list[Run], kind: str, end: bool, last: int) -> str:
    """The arm's end-of-run rate with its interval; without one, its last steps' mean over seeds with its
    t-interval (a run's last steps have no sample count to give one run an interval)."""
    if end:
        return end_rate(runs, "train", kind)
    rates = _present(tail_mean(r.scalars, LAST_TAGS[kind], last) for r in runs)
    if len(rates) < 2:
        return f"{rates[0]:.3f}" if rates else "–"
    mean, half = t_interval(rates)
    return f"{mean:.3f} [{max(0.0, mean - half):.3f}, {min(1.0, mean + half):.3f}]"


def difference(runs: list[Run], base_runs: list[Run], kind: str, end: bool, last: int) -> str:
    """The arm's rate minus the base arm's, paired by seed: the t-interval of the differences over seeds; at one
    seed, Newcombe's interval of the two runs' end-of-run counts."""
    tag, n = (f"end/{kind}", 1) if end else (LAST_TAGS[kind], last)

    def value(run: Run) -> float | None:
        return tail_mean(run.scalars, tag, n)

    base = {r.seed: r for r in base_runs}
    pairs = [(r, base[r.seed]) for r in runs if r.seed in base and None not in (value(r), value(base[r.seed]))]
    if end and len(pairs) == 1:
        (a, m), (b, k) = (end_counts(r, tag) for r in pairs[0])
        if m and k:
            lo, hi = newcombe(a, m, b, k)
            return f"{a / m - b / k:+.3f} [{lo:+.3f}, {hi:+.3f}]"
    return interval([value(r) - value(b) for r, b in pairs])


def end_counts(run: Run, tag: str) -> tuple[int, int]:
    """(successes, samples) behind a run's end-of-run rate `tag`; samples 0 where the run did not log them."""
    samples = int(tail_mean(run.scalars, "end/samples", 1) or 0)
    return round(tail_mean(run.scalars, tag, 1) * samples), samples
