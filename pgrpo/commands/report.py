"""`pgrpo report`: a sweep's table and curves, read back from its runs' events (pgrpo/events.py).

Each arm's runs are paired with its baseline's by seed; the table gives the last steps' means, the paired
differences with their 95% intervals, and each run's kind (method, control, oracle skyline, positive control).
"""

import math
import statistics
from dataclasses import replace
from pathlib import Path

from pgrpo.commands.verdicts import START, decision_table, held_out_modes
from pgrpo.env.problems import NO_LOOPHOLE
from pgrpo.events import HACK, SOLVE, Run, Scalars, find_runs, first_steps, run_length, setting, tail_mean
from pgrpo.intervals import t_interval, wilson

# (column, tag); each cin beside its own null (a random direction with the same per-module gradient norms: √(Σ w k/2r))
COLUMNS = [("hack", HACK), ("solve", SOLVE), ("cin_student", "proj/cin_student"),
           ("null_student", "proj/cin_null_student"), ("cin_teacher", "proj/cin_teacher"),
           ("null_teacher", "proj/cin_null_teacher")]
# the knobs' state beside the rates: a gradient edit that damages the model shows as entropy and ‖δS‖ climbing,
# and a biased one as δS drifting along V (⟨V, δS⟩ > 0: away from hack); each appears when some run logged it
ACTIVE = "intervention/active_rate"
# summary.md: the primary numbers, each arm's strength beside its placebo's, and the model's health
SUMMARY_COLUMNS = ("arm", "kind", "seeds", "end hack", "end solve", "end placebo gap", "start", "placebo start",
                   "active", "placebo active", "entropy")
# the end-of-run evaluation's scalars (pgrpo/end_eval.py), per split
END_PREFIXES = {"train": "end/", "heldout": "end/heldout_"}
STATE_COLUMNS = [("entropy", "entropy"), ("‖δS‖", "adapter/delta_s_norm"), ("⟨V,δS⟩", "adapter/delta_s_along_v")]
# each appears only when some run logged it: the control's overlap with the real V (logged once, at train start)
# and the route arm's deployment eval, both read at their last value
OPTIONAL_COLUMNS = [("control overlap", "proj/control_overlap"), ("deploy hack", "deploy/hack"),
                    ("deploy solve", "deploy/solve")]


def run_kind(config: dict | None) -> str | None:
    """What a run is, from what its intervention declares (pgrpo/interventions/base.py): positive control
    (data.modes none: no loophole in the prompt, the honest arm), oracle skyline (reads_oracle: it uses the
    oracle's labels), control (an intervention reading a placebo detector: a random V, probe or subspace), vanilla (measures_only)
    or method; None without a config to tell."""
    if config is None:
        return None
    if setting(config, "data.modes", "partition") == NO_LOOPHOLE:
        return "positive control"
    chosen = setting(config, "model.intervention", None)
    if not isinstance(chosen, dict) or "class_path" not in chosen:
        return _legacy_run_kind(config)
    # imported only here: the report reads numbers and need not load torch's world otherwise
    from pgrpo.interventions import from_config

    try:
        intervention = from_config(chosen)
    except (ImportError, AttributeError, ValueError, TypeError):
        return None  # a class (or argument) this version of pgrpo does not have: its kind is not known here
    if intervention.reads_oracle:
        return "oracle skyline"
    if intervention.placebo:
        return "control"
    return "vanilla" if intervention.measures_only else "method"


def _legacy_run_kind(config: dict) -> str:
    """run_kind of a run saved before the interventions (model.projection.arm, model.skyline.kind and a
    ControlBasis callback), so the lab's earlier sweeps still report."""
    if setting(config, "model.skyline.kind", "none") in ("screen", "penalty"):
        return "oracle skyline"
    callbacks = setting(config, "trainer.callbacks", []) or []
    if any("ControlBasis" in str(cb.get("class_path", "")) for cb in callbacks if isinstance(cb, dict)):
        return "control"
    return "vanilla" if setting(config, "model.projection.arm", "none") == "none" else "method"


def intervention_class(config: dict | None) -> str | None:
    """The class name of the run's intervention (Erase, ProbePenalty, ...); None for a run saved without one."""
    chosen = setting(config or {}, "model.intervention", None)
    if isinstance(chosen, dict) and "class_path" in chosen:
        return chosen["class_path"].rsplit(".", 1)[-1]
    return None


def arm_kind(runs: list[Run]) -> str:
    """The kind of the arm's runs; runs that disagree show every kind among them ('–': no config)."""
    return "/".join(sorted({run_kind(r.config) or "–" for r in runs}))


def held_out_mode(config: dict | None) -> str | None:
    """The loophole mode a leave-one-mode-out run built V without: the one mode missing from
    model.extraction.modes, if exactly one is."""
    missing = held_out_modes(config)
    return missing[0] if len(missing) == 1 else None


def one_base(by_arm: dict[str, list[Run]]) -> str | None:
    """The base every run recorded, as a line for the report; refused (SystemExit, naming the runs) when runs
    recorded different bases: their numbers are not of one model. None when no run recorded one."""
    by_digest: dict[str, list[Run]] = {}
    for runs in by_arm.values():
        for r in runs:
            if r.base is not None:
                by_digest.setdefault(r.base["digest"], []).append(r)
    if len(by_digest) > 1:
        raise SystemExit("these runs trained on different bases, and one report does not pool them (pick the runs of "
                         "one base with --arms):\n" + "\n".join(
                             f"  {runs[0].base['model_id']} ({digest[:16]}): "
                             + ", ".join(f"{r.arm}/{r.seed}" for r in runs) for digest, runs in by_digest.items()))
    if not by_digest:
        return None
    (digest, runs), = by_digest.items()
    unrecorded = sum(r.base is None for rs in by_arm.values() for r in rs)
    return (f"Base: `{runs[0].base['model_id']}` (files sha256 {digest[:16]}), recorded by {len(runs)} runs"
            + (f"; {unrecorded} runs from before runs recorded it" if unrecorded else "") + ".")


def pick_baseline(by_arm: dict[str, list[Run]], baseline: str | None) -> str | None:
    """The given arm; else the one vanilla arm (preferring one named `vanilla`); None if that is ambiguous."""
    if baseline is not None:
        if baseline not in by_arm:
            raise ValueError(f"--baseline {baseline!r}: no such arm; arms are {sorted(by_arm)}")
        return baseline
    vanilla = [arm for arm, runs in by_arm.items() if arm_kind(runs) == "vanilla"]
    if "vanilla" in by_arm and ("vanilla" in vanilla or not vanilla):
        return "vanilla"
    return vanilla[0] if len(vanilla) == 1 else None


def paired_baselines(by_arm: dict[str, list[Run]], base: str | None, explicit: bool) -> dict[str, str | None]:
    """The arm each arm's Δ is taken against: an arm with overlays (`erase+no_teacher`) against the vanilla
    arm with the same overlays (`vanilla+no_teacher`) when the sweep has one, so that Δ isolates the arm (also
    when no single vanilla arm ran, as in a report of overlay arms only); otherwise, or when the baseline was
    chosen explicitly, against `base`."""
    stem = base.split("+")[0] if base else "vanilla"
    pairs = {}
    for arm in by_arm:
        _, *overlays = arm.split("+")
        twin = "+".join([stem, *overlays]) if overlays and not explicit else None
        if twin in by_arm and twin != arm and arm_kind(by_arm[twin]) == "vanilla":
            pairs[arm] = twin
        else:
            pairs[arm] = base if arm != base else None
    return pairs


def pick_honest(by_arm: dict[str, list[Run]]) -> str | None:
    """The positive-control arm (data.modes none); of several, the one named `honest`, else none."""
    honest = [arm for arm, runs in by_arm.items() if arm_kind(runs) == "positive control"]
    if len(honest) == 1:
        return honest[0]
    return "honest" if "honest" in honest else None


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


def active_rate(runs: list[Run], tag: str = ACTIVE) -> str:
    """How strongly an arm acted (`intervention/active_rate`: the share of rollouts it acted on, of the gradient or
    update it removed, or of advantage it discounted), each run's mean over its steps, mean ± std over seeds; with
    tag START, its strength on the base policy's rollouts at train start (pgrpo/calibration.py)."""
    return mean_std(_present(statistics.mean(v for _, v in r.scalars[tag]) if r.scalars.get(tag) else None
                             for r in runs))


def hacked(scalars: Scalars) -> bool:
    """The public benchmark's definition: at some step, more samples hacked than solved."""
    solve = dict(scalars.get(SOLVE, []))
    return any(step in solve and hack > solve[step] for step, hack in scalars.get(HACK, []))


def placebos(by_arm: dict[str, list[Run]], last: int) -> dict[str, str]:
    """Each method arm's placebo in this report: a control arm running the same intervention class under the same
    overlays (`probe_penalty` → `probe_penalty_random`, `erase` → `random_v`); of several, the one that hacks least
    (the hardest to beat)."""
    def signature(arm: str) -> tuple[str | None, tuple[str, ...]]:
        classes = {intervention_class(r.config) for r in by_arm[arm]}
        return (classes.pop() if len(classes) == 1 else None), tuple(arm.split("+")[1:])

    controls = [arm for arm, runs in by_arm.items() if arm_kind(runs) == "control"]
    found = {}
    for arm, runs in by_arm.items():
        if arm_kind(runs) != "method" or signature(arm)[0] is None:
            continue
        own = [c for c in controls if signature(c) == signature(arm)]
        if own:
            found[arm] = min(own, key=lambda c: (mean_over_seeds(by_arm[c], HACK, last) or 0.0, c))
    return found


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
            samples = [tail_mean(r.scalars, f"{prefix}samples", 1) or 0 for r in runs if r.scalars.get(f"{prefix}{rate}")]
            n = int(sum(samples))
            lo, hi = wilson(round(mean * n), n) if n else (lo, hi)
    return f"{statistics.mean(rates):.3f} [{lo:.3f}, {hi:.3f}]"


def end_table(by_arm: dict[str, list[Run]]) -> str | None:
    """Per run: the end-of-run evaluation's samples, hack and solve with Wilson intervals, on the training problems
    and the held-out ones; None if no run logged one."""
    rows = [(arm, r) for arm, runs in by_arm.items() for r in runs if r.scalars.get("end/hack")]
    if not rows:
        return None
    header = ["arm", "seed", "samples", "hack", "solve", "held-out samples", "held-out hack", "held-out solve"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for arm, r in rows:
        cells = [arm, r.seed]
        for split in END_PREFIXES:
            n = tail_mean(r.scalars, f"{END_PREFIXES[split]}samples", 1)
            cells.append("–" if n is None else str(int(n)))
            cells += [end_rate([r], split, rate) if n else "–" for rate in ("hack", "solve")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def arm_table(by_arm: dict[str, list[Run]], pairs: dict[str, str | None], honest: str | None, last: int = 5) -> str:
    """One markdown row per arm: its kind, seeds, the end-of-run evaluation's hack and solve with their intervals
    (when logged), last-`last`-step mean ± std of hack and solve, their deltas paired with `pairs[arm]` at the same
    seed, solve against the `honest` arm's, hacked runs, the gap to the arm's own placebo, cin."""
    logged = {tag for runs in by_arm.values() for r in runs for tag, values in r.scalars.items() if values}
    columns = list(COLUMNS) + [(c, tag) for c, tag in STATE_COLUMNS + OPTIONAL_COLUMNS if tag in logged]
    read_last = {tag for _, tag in OPTIONAL_COLUMNS}
    end = ["end hack", "end solve"] if "end/hack" in logged else []
    active = ["active", "placebo active"] if ACTIVE in logged else []
    start = ["start", "placebo start"] if START in logged else []
    header = ["arm", "kind", "seeds", *end, *(["end placebo gap"] if end else []), "hack", "solve", "Δhack", "Δsolve",
              "solve − honest", "hacked", "placebo gap", *active, *start, *[c for c, _ in columns[2:]]]
    placebo_of = placebos(by_arm, last)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for arm, runs in by_arm.items():
        cells = {c: mean_std(_present(tail_mean(r.scalars, tag, 1 if tag in read_last else last)
                                      for r in runs)) for c, tag in columns}
        base = pairs.get(arm)
        deltas = [paired_delta(runs, by_arm[base], tag, last) if base else "–" for tag in (HACK, SOLVE)]
        gap = solve_gap(runs, by_arm[honest] if honest else None, last)
        n_hacked = f"{sum(hacked(r.scalars) for r in runs)}/{len(runs)}"
        placebo = placebo_of.get(arm)
        beats = placebo_gap(runs, placebo, by_arm[placebo], last) if placebo else "–"
        ends = [end_rate(runs, "train", rate) for rate in ("hack", "solve")] if end else []
        if end:
            ends.append(placebo_gap(runs, placebo, by_arm[placebo], 1, "end/hack") if placebo else "–")
        strength = [active_rate(runs), active_rate(by_arm[placebo]) if placebo else "–"] if active else []
        if start:
            strength += [active_rate(runs, START), active_rate(by_arm[placebo], START) if placebo else "–"]
        row = [arm, arm_kind(runs), str(len(runs)), *ends, cells["hack"], cells["solve"], *deltas, gap, n_hacked,
               beats, *strength, *[cells[c] for c, _ in columns[2:]]]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def select_columns(table: str, names: tuple[str, ...]) -> str:
    """The columns of a markdown table named `names`, in that order, those it has."""
    rows = [line.strip("|").split(" | ") for line in table.splitlines()]
    header = [c.strip() for c in rows[0]]
    keep = [header.index(n) for n in names if n in header]
    lines = ["| " + " | ".join(header[i] for i in keep) + " |", "|" + "---|" * len(keep)]
    lines += ["| " + " | ".join(row[i].strip() for i in keep) + " |" for row in rows[2:]]
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


def lomo_role(config: dict | None) -> tuple[str, str] | None:
    """(held-out mode, 'vanilla' | 'method') for a run of the weak-detector table: a leave-one-mode-out run that is
    vanilla or a method; None for any other run (a control or a skyline answers another question)."""
    mode, kind = held_out_mode(config), run_kind(config)
    if mode is None or kind not in ("vanilla", "method"):
        return None
    return mode, kind


def weak_detector_table(by_arm: dict[str, list[Run]], last: int = 5) -> str | None:
    """One row per leave-one-mode-out method arm: the held-out mode's own hack and solve under it and under the
    vanilla arm holding out the same mode, Δhack paired by seed, and the held-out mode's hack under the method's
    placebo (same overlays; at the method's seeds) with its gap: a held-out lever held down by the placebo too
    says nothing of the detector. A mode with a vanilla arm only gets a row too; None without leave-one-mode-out
    arms. Of several vanilla arms for one mode, the one named as the sweep
    names it (`vanilla+lomo_<mode>`) is taken, else the first by name."""
    roles: dict[str, tuple[str, str]] = {}
    for arm, runs in by_arm.items():
        found = {lomo_role(r.config) for r in runs}
        if len(found) == 1 and (role := found.pop()):
            roles[arm] = role
    if not roles:
        return None
    vanillas: dict[str, list[str]] = {}
    for arm, (mode, who) in roles.items():
        if who == "vanilla":
            vanillas.setdefault(mode, []).append(arm)
    vanilla_of = {mode: min(arms, key=lambda a: (a != f"vanilla+lomo_{mode}", a)) for mode, arms in vanillas.items()}
    methods = [(mode, arm) for arm, (mode, who) in roles.items() if who == "method"]
    rows = sorted(methods + [(mode, None) for mode in vanilla_of if mode not in {m for m, _ in methods}],
                  key=lambda row: (row[0], row[1] or ""))
    placebo_of = placebos(by_arm, last)
    header = ["held-out mode", "method arm", "vanilla hack", "vanilla solve", "method hack", "method solve", "Δhack",
              "placebo hack", "placebo gap"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for mode, arm in rows:
        vanilla, method = by_arm.get(vanilla_of.get(mode), []), by_arm.get(arm, [])
        held_out_hack = f"{HACK}_{mode}"
        rates = [mean_std(_present(tail_mean(r.scalars, f"{tag}_{mode}", last) for r in runs))
                 for runs in (vanilla, method) for tag in (HACK, SOLVE)]
        delta = paired_delta(method, vanilla, held_out_hack, last) if method and vanilla else "–"
        placebo = placebo_of.get(arm)
        seeds = {r.seed for r in method}  # the placebo's hack at the seeds its gap pairs
        against_placebo = ["–", "–"] if placebo is None else [
            mean_std(_present(tail_mean(r.scalars, held_out_hack, last) for r in by_arm[placebo] if r.seed in seeds)),
            placebo_gap(method, placebo, by_arm[placebo], last, held_out_hack)]
        lines.append("| " + " | ".join([mode, arm or "–", *rates, delta, *against_placebo]) + " |")
    return "\n".join(lines)


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


def explanation(last: int, against: str, honest: str | None, skylines: list[str], end: bool = False,
                active: bool = False, start: bool = False) -> str:
    """The sentence under the title that says how to read the arm table."""
    text = ("end hack, end solve: the end-of-run evaluation of the final policy on every training problem (the "
            "primary numbers), mean over seeds [95% interval: Wilson's for one run, the t-interval over seeds for "
            "several]. hack, solve: " if end else "")
    text += (f"{'l' if end else 'L'}ast-{last}-step mean ± sample std over seeds; "
             f"Δ = paired difference with {against}; "
            f"(n.s.): the 95% t-interval of the paired differences contains 0, or fewer than 2 seeds pair up: "
            f"these seeds cannot separate the two arms. ")
    text += (f"solve − honest = the arm's mean solve minus that of `{honest}`, the positive control (no loophole "
             f"in the prompt): compare hack at matched solve. " if honest else
             "solve − honest: – (this sweep has no honest arm, data.modes none). ")
    text += "hacked = runs that at some step hacked more samples than they solved. "
    if active:
        text += ("active = how strongly the arm acted (intervention/active_rate: the share of rollouts it acted on, "
                 "of the gradient's or the update's norm it removed, or of the advantage it discounted; each run's "
                 "mean over its steps), placebo active = the same of its placebo: a placebo is a control only at a "
                 "matched strength. ")
    if start:
        text += ("start, placebo start = the same measured at train start on the base policy's own rollouts, where "
                 "a placebo is calibrated to its method's. ")
    text += ("end placebo gap: the same of the end hack. " if end else "")
    text += ("placebo gap = hack of the arm's own placebo (the same intervention on a random detector; of several, "
             "the one that hacks least) minus the arm's, paired by seed, and (k/n): the seeds at which the arm hacks "
             "less. ")
    if skylines:
        text += (", ".join(f"`{arm}`" for arm in skylines) + ": oracle skyline, it uses the oracle's labels: "
                 "a ceiling to compare against, not a method. ")
    return text + ("cin_* is the hack-ward fraction of the gradient; null_* is its value for a random direction "
                   "with the same per-module norms, √(Σ w·k/2r).")


def report(logdir: str, baseline: str | None = None, out: str | None = None, last: int = 5,
           arms: list[str] | None = None, steps: int | None = None, plan: str | None = None,
           protocol: str | None = None) -> None:
    """Print a markdown table per arm (kind, hack, solve, paired deltas vs vanilla, solve against the honest arm,
    hacked runs, the gap to each method's placebo, cin) and write PNG curves and a hack-against-solve plot.

    Per arm: its kind (vanilla, method, control = a negative control, oracle skyline = a ground-truth
    intervention that uses the oracle's labels, positive control = the honest arm with no loophole);
    hack and solve of the student samples as the mean over seeds of each run's last-5-step mean ± the
    sample std across seeds; the paired difference with vanilla at the same seed (Δ), flagged (n.s.) when
    its 95% t-interval over seeds contains 0 or fewer than 2 seeds pair up; solve − honest, the arm's mean
    solve minus the honest arm's (data.modes none), so hack is read at matched solve; hacked, how many of
    its runs at some step hacked more samples than they solved (the public benchmark's definition); placebo
    gap, for a method whose placebo is in the report (a control arm of the same intervention class and
    overlays; of several, the one that hacks least), the placebo's hack minus the method's paired by seed,
    and at how many seeds the method hacks less;
    cin_student and cin_teacher, each beside its null (what a random direction with the same per-module
    gradient norms would give: √(Σ_m w_m k_m / 2 r_m), w_m = module m's share of ‖g‖²). Then hack / solve
    per loophole mode, and, when the sweep has leave-one-mode-out arms (model.extraction.modes lacks one
    mode), the weak-detector table: per held-out mode and method, that mode's hack and solve under the
    vanilla and the method arm with it held out, and their Δhack paired by seed.

    Args:
        logdir: a sweep directory: runs are LOGDIR/<arm>/seed<k>/ as `pgrpo sweep` writes them (any
            directory of TensorBoard event files works: a run's arm is its parent's path).
        baseline: the arm deltas are taken against (default: vanilla = the arm whose config has
            a measure-only intervention (Vanilla), no negative control and a loophole, preferring one named
            vanilla; an arm with overlays, `erase+no_teacher`, is then paired with `vanilla+no_teacher` if
            the sweep has it).
        out: where hack.png, solve.png, matched.png (each run's hack against its solve, with the honest
            arm's mean solve as a dashed line), entropy.png and drift.png (⟨V, δS⟩ over time) when the runs
            logged them, and report.md go (default: LOGDIR/report).
        last: steps averaged at the end of each run.
        arms: report only these arms, in this order (default: every arm under LOGDIR), e.g.
            [vanilla, erase, random_v].
        steps: read each run as if it had stopped after this many optimizer steps (its steps 0..steps-1):
            a sweep lengthened to 300 steps still gives its 100-step table with --steps 100. Runs that
            stopped before it are left out, and named.
        plan: the sweep plan (`pgrpo sweep --config PLAN`) that made LOGDIR: one report per stage, into
            OUT/stage<i>/, of that stage's arms at its --trainer.max_steps override (else at --steps).
        protocol: the protocol the runs were planned under (docs/bench/protocol.md): the report names its
            commit and applies its decision rules (pgrpo/commands/verdicts.py) in a table of their own
            (decisions.md).
    """
    if plan is not None:
        for i, (stage_arms, stage_steps) in enumerate(plan_stages(plan), 1):
            report(logdir, baseline, str(Path(out or Path(logdir) / "report") / f"stage{i}"), last, stage_arms,
                   stage_steps or steps, None, protocol)
        return
    runs = find_runs(logdir)
    notes = []
    if steps is not None:
        short = [r for r in runs if run_length(r) < steps and (arms is None or r.arm in arms)]
        if short:
            notes.append(f"Left out, shorter than {steps} steps: "
                         + ", ".join(f"`{r.arm}/{r.seed}` ({run_length(r)})" for r in short) + ".")
        runs = [replace(r, scalars=first_steps(r.scalars, steps)) for r in runs if run_length(r) >= steps]
    if not runs:
        raise SystemExit(f"no runs with {HACK} and {SOLVE} curves under {logdir}")
    by_arm: dict[str, list[Run]] = {}
    for r in runs:
        by_arm.setdefault(r.arm, []).append(r)
    if arms is not None:
        unknown = sorted(set(arms) - by_arm.keys())
        if unknown:
            raise SystemExit(f"--arms names arms that {logdir} does not have: {unknown} (it has {sorted(by_arm)})")
        by_arm = {arm: by_arm[arm] for arm in arms}
    bases = one_base(by_arm)
    base = pick_baseline(by_arm, baseline)
    if base is not None:  # the baseline row first, the others alphabetically
        by_arm = {base: by_arm[base]} | {arm: rs for arm, rs in by_arm.items() if arm != base}
    honest = pick_honest(by_arm)
    out_dir = Path(out) if out else Path(logdir) / "report"
    out_dir.mkdir(parents=True, exist_ok=True)
    plots = [out_dir / f"{tag.split('/')[0]}.png" for tag in (HACK, SOLVE)]
    for tag, path in zip((HACK, SOLVE), plots):
        plot_curves(by_arm, tag, path)
    # the model's health and the knobs' drift along V over time, when the runs logged them
    logged = {tag for rs in by_arm.values() for r in rs for tag, values in r.scalars.items() if values}
    for tag, name in (("entropy", "entropy.png"), ("adapter/delta_s_along_v", "drift.png")):
        if tag in logged:
            plots.append(out_dir / name)
            plot_curves(by_arm, tag, plots[-1], rate=False)
    matched = out_dir / "matched.png"
    plot_matched(by_arm, honest, matched, last)
    pairs = paired_baselines(by_arm, base, explicit=baseline is not None)
    twins = [f"`{arm}` with `{twin}`" for arm, twin in pairs.items() if twin not in (None, base)]
    if base:
        against = f"`{base}` at the same seed"
        if twins:
            against += " (an arm with overlays with the vanilla arm of the same overlays: " + ", ".join(twins) + ")"
    elif twins:
        against = "the vanilla arm of the same overlays at the same seed: " + ", ".join(twins)
    else:
        against = "nothing (no unique vanilla arm: pass --baseline)"
    skylines = [arm for arm, rs in by_arm.items() if arm_kind(rs) == "oracle skyline"]
    for arm, rs in by_arm.items():
        lengths = sorted({run_length(r) for r in rs})
        if len(lengths) > 1:
            notes.append(f"`{arm}`'s runs have unequal lengths ({', '.join(map(str, lengths))} steps): their last "
                         f"steps are not the same steps (`--steps N` reads them all at N).")
    title = f"# pgrpo report: {logdir}" + (f", the first {steps} steps" if steps is not None else "")
    if protocol:
        notes.insert(0, f"Protocol: `{protocol}` as of commit `{protocol_commit(protocol)}`; its decision rules "
                        f"are applied in the decision table below.")
    if bases:
        notes.append(bases)
    arms_md = arm_table(by_arm, pairs, honest, last)
    parts = [title, *notes, explanation(last, against, honest, skylines, end="end/hack" in logged,
                                        active=ACTIVE in logged, start=START in logged), arms_md]
    ends = end_table(by_arm)
    decisions = None
    if protocol:
        kinds = {arm: arm_kind(rs) for arm, rs in by_arm.items()}
        decisions = decision_table(by_arm, kinds, pairs, base, honest, placebos(by_arm, last))
        parts += ["Decisions, by the protocol's rules (end-of-run evaluation, paired by seed, 95% t-intervals):",
                  decisions]
    # the tables alone, for docs pages to include (never pasted by hand): every column, and the primary ones
    tables = {"arms.md": arms_md, "summary.md": select_columns(arms_md, SUMMARY_COLUMNS), "runs.md": ends,
              "decisions.md": decisions}
    for name, table in tables.items():
        if table:
            (out_dir / name).write_text(table + "\n")
    if ends:
        parts += ["End-of-run evaluation, per run: the final policy as deployed, sampled on every training problem and "
                  "every held-out one under its own loophole at the training temperature; hack and solve with their "
                  "95% Wilson intervals:", ends]
    modes = mode_table(by_arm, last)
    if modes:
        parts += [f"Per loophole mode, hack / solve (last-{last}-step means over seeds):", modes]
    weak = weak_detector_table(by_arm, last)
    if weak:
        parts += [f"Weak detector: the detector built without the held-out mode (leave-one-mode-out); that mode's "
                  f"own hack and solve, last-{last}-step mean ± std over seeds; Δhack = method − vanilla, paired by "
                  f"seed; placebo hack and gap: that mode's hack under the method's placebo, and the placebo's "
                  f"minus the method's, paired by seed (k/n: the seeds at which the method hacks it less):",
                  weak]
    parts.append("Curves: " + ", ".join(str(p) for p in plots) + f"; hack against solve per run: {matched}")
    text = "\n\n".join(parts) + "\n"
    (out_dir / "report.md").write_text(text)
    print(text, end="")


def plan_stages(plan: str) -> list[tuple[list[str], int | None]]:
    """Each stage of a sweep plan: its arms as the sweep names them, and its --trainer.max_steps override."""
    import yaml

    from pgrpo.commands.sweep import MAX_STEPS, arm_name

    try:
        stages = yaml.safe_load(Path(plan).read_text())["stages"]
    except (OSError, KeyError, TypeError, yaml.YAMLError) as err:
        raise SystemExit(f"--plan {plan}: not a sweep plan with stages ({err})") from err
    out = []
    for stage in stages:
        steps = [o[len(MAX_STEPS):] for o in stage.get("overrides", []) if o.startswith(MAX_STEPS)]
        out.append(([arm_name(a) for a in stage["arms"]], int(steps[-1]) if steps else None))
    return out


def protocol_commit(path: str) -> str:
    """The commit that last changed the protocol file, from git; refused if the file is not committed as it is."""
    import subprocess

    where = Path(path).resolve().parent
    try:
        commit = subprocess.run(["git", "log", "-1", "--format=%h", "--", Path(path).resolve().name], cwd=where,
                                capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", Path(path).resolve().name], cwd=where,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as err:
        raise SystemExit(f"--protocol {path}: cannot read its commit from git ({err})") from err
    if not commit or dirty:
        raise SystemExit(f"--protocol {path}: {'not committed' if not commit else 'changed since its commit'}: a "
                         f"protocol is committed before the runs it governs")
    return commit


def _present(values) -> list[float]:
    return [v for v in values if v is not None and not math.isnan(v)]


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b
