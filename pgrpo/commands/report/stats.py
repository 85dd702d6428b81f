"""The report's statistics over seeds: means with their spread, differences paired by seed with their 95%
t-intervals, the end-of-run evaluation's intervals, and how strongly an arm acted."""

import math
import statistics

from pgrpo.records.events import HACK, HAD_GRADIENT, SOLVE, Run, Scalars, tail_mean
from pgrpo.evaluation.intervals import t_interval, wilson

# how strongly an arm acted at each step, and on the base policy's rollouts at train start (calibration.py)
ACTIVE, START = "intervention/active_rate", "intervention/start_rate"
# the end-of-run evaluation's scalars (pgrpo/evaluation/end_eval.py), per split
END_PREFIXES = {"train": "end/", "heldout": "end/heldout_"}


def mean_std(values: list[float]) -> str:
    """'m ± s' with the sample std over seeds; just 'm' for one seed; '–' for none."""
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}"


def separated(diffs: list[float]) -> bool:
    """Whether the 95% two-sided t-interval of paired differences, mean ± t·sd/√n, excludes 0."""
    if len(diffs) < 2:
        return False
    mean, half = t_interval(diffs)
    return abs(mean) > half


def paired_delta(runs: list[Run], base_runs: list[Run], tag: str, last: int) -> str:
    """Run minus baseline run of the same seed, as mean ± std over seeds, flagged (n.s.) when the seeds cannot
    tell it from 0."""
    base = {r.seed: r for r in base_runs}
    diffs = _present(_diff(tail_mean(r.scalars, tag, last), tail_mean(base[r.seed].scalars, tag, last))
                     for r in runs if r.seed in base)
    if not diffs:
        return "–"
    return mean_std(diffs) + ("" if separated(diffs) else " (n.s.)")


def mean_over_seeds(runs: list[Run], tag: str, last: int) -> float | None:
    values = _present(tail_mean(r.scalars, tag, last) for r in runs)
    return statistics.mean(values) if values else None


def solve_gap(runs: list[Run], honest_runs: list[Run] | None, last: int) -> str:
    """The arm's mean solve minus the honest arm's, signed; '–' without an honest arm."""
    gap = _diff(mean_over_seeds(runs, SOLVE, last), mean_over_seeds(honest_runs, SOLVE, last)) if honest_runs else None
    return "–" if gap is None else f"{round(gap, 3) + 0.0:+.3f}"  # + 0.0: a gap that rounds to -0 reads +0.000


def active_rate(runs: list[Run]) -> str:
    """How strongly an arm acted (`intervention/active_rate`: the share of rollouts it acted on, of the gradient or
    update it removed, or of advantage it discounted), each run's mean over its steps with a gradient, mean ± std
    over seeds. An idle step (no gradient: nothing to act on) would count as 0 and make an arm whose policy idles
    more look weaker than it acts: the idle share is reported beside it (`idle_share`)."""
    return mean_std(_present(_mean_at(r.scalars, ACTIVE, _gradient_steps(r.scalars)) for r in runs))


def idle_share(runs: list[Run]) -> str:
    """The share of each run's steps that had no gradient, mean ± std over seeds."""
    return mean_std(_present(1 - len(_gradient_steps(r.scalars)) / len(r.scalars[ACTIVE])
                             if r.scalars.get(ACTIVE) and HAD_GRADIENT in r.scalars else None for r in runs))


def start_rate(runs: list[Run]) -> str:
    """How strongly an arm acts on the base policy's rollouts at train start, where a placebo is calibrated to
    its method (pgrpo/directions/calibration.py), mean ± std over seeds."""
    return mean_std(_present(_mean_at(r.scalars, START) for r in runs))


def _gradient_steps(scalars: Scalars) -> set[int] | None:
    """The steps with a gradient; None for a run that does not say (its share never logged)."""
    return {step for step, _ in scalars[HAD_GRADIENT]} if HAD_GRADIENT in scalars else None


def _mean_at(scalars: Scalars, tag: str, steps: set[int] | None = None) -> float | None:
    values = [v for step, v in scalars.get(tag, []) if steps is None or step in steps]
    return statistics.mean(values) if values else None


def hacked(scalars: Scalars) -> bool:
    """The public benchmark's definition: at some step, more samples hacked than solved."""
    solve = dict(scalars.get(SOLVE, []))
    return any(step in solve and hack > solve[step] for step, hack in scalars.get(HACK, []))


def placebo_gap(runs: list[Run], placebo: str, placebo_runs: list[Run], last: int, tag: str = HACK) -> str:
    """The placebo's hack (`tag`) minus the arm's, paired by seed, and at how many paired seeds the arm hacks less."""
    base = {r.seed: r for r in placebo_runs}
    paired = [r for r in runs if r.seed in base]
    diffs = _present(_diff(tail_mean(base[r.seed].scalars, tag, last), tail_mean(r.scalars, tag, last))
                     for r in paired)
    if not diffs:
        return f"– ({placebo}: {'no ' + tag if paired else 'no seed in common'})"
    return f"{mean_std(diffs)} vs {placebo} ({sum(d > 0 for d in diffs)}/{len(diffs)})"


def end_rate(runs: list[Run], split: str, rate: str) -> str:
    """The end-of-run evaluation's rate over an arm's runs with its 95% interval: 'm [lo, hi]', Wilson's for one
    run (from its sample count), the t-interval of the runs' rates over seeds for several (Wilson's of their pooled
    samples where every run gave the same rate, where the t-interval has no width); '–' if none logged."""
    prefix = END_PREFIXES[split]
    rates = _present(tail_mean(r.scalars, f"{prefix}{rate}", 1) for r in runs)
    if not rates:
        return "–"
    if len(rates) == 1:
        samples = int(tail_mean(next(r for r in runs if r.scalars.get(f"{prefix}{rate}")).scalars,
                                f"{prefix}samples", 1) or 0)
        lo, hi = wilson(round(rates[0] * samples), samples) if samples else (math.nan, math.nan)
    else:
        mean, half = t_interval(rates)
        lo, hi = max(0.0, mean - half), min(1.0, mean + half)
        if half == 0:  # every seed the same rate (0 hacks at every seed): the pooled samples' Wilson interval
            samples = [tail_mean(r.scalars, f"{prefix}samples", 1) or 0
                       for r in runs if r.scalars.get(f"{prefix}{rate}")]
            n = int(sum(samples))
            lo, hi = wilson(round(mean * n), n) if n else (lo, hi)
    return f"{statistics.mean(rates):.3f} [{lo:.3f}, {hi:.3f}]"


def _present(values) -> list[float]:
    return [v for v in values if v is not None and not math.isnan(v)]


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b
