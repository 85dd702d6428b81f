"""The report's markdown tables: one row per arm, one per run's end-of-run evaluation, per loophole mode, and
the weak-detector table of leave-one-mode-out runs; and the sentence that says how to read the arm table."""

import statistics

from pgrpo.commands.report.kinds import kind_label, lomo_role, placebos
from pgrpo.commands.report.stats import (ACTIVE, END_PREFIXES, HACK, SOLVE, START, _present, active_rate, end_rate,
                                         hacked, idle_share, mean_std, paired_delta, placebo_gap, solve_gap,
                                         start_rate)
from pgrpo.records.events import Run, tail_mean

# (column, tag); each hack-ward share beside its own null (a random direction with the same per-module gradient
# norms: √(Σ w k/2r))
COLUMNS = [("hack", HACK), ("solve", SOLVE), ("hack-ward student", "hackward_share/student"),
           ("null student", "hackward_share/student_null"), ("hack-ward teacher", "hackward_share/teacher"),
           ("null teacher", "hackward_share/teacher_null")]


# summary.md: the primary numbers, each arm's strength beside its placebo's, and the model's health
SUMMARY_COLUMNS = ("arm", "kind", "seeds", "end hack", "end solve", "end placebo gap", "start", "placebo start",
                   "active", "placebo active", "idle", "placebo idle", "entropy")


STATE_COLUMNS = [("entropy", "entropy"), ("‖δS‖", "adapter/delta_s_norm"),
                 ("⟨V,δS⟩", "adapter/delta_s_along_v")]


# each appears only when some run logged it: the control's overlap with the real V (logged once, at train start)
# and the route arm's deployment eval, both read at their last value
OPTIONAL_COLUMNS = [("control overlap", "basis/control_overlap"), ("deploy hack", "deploy/hack"),
                    ("deploy solve", "deploy/solve")]


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


def markdown(header: list[str], rows: list[list[str]], columns: tuple[str, ...] | None = None) -> str:
    """A markdown table; with `columns`, only those of its columns (those it has), in that order."""
    keep = [header.index(c) for c in columns if c in header] if columns else range(len(header))
    lines = ["| " + " | ".join(header[i] for i in keep) + " |", "|" + "---|" * len(keep)]
    return "\n".join(lines + ["| " + " | ".join(row[i] for i in keep) + " |" for row in rows])


def arm_table(by_arm: dict[str, list[Run]], pairs: dict[str, str | None], honest: str | None, last: int = 5
              ) -> tuple[list[str], list[list[str]]]:
    """The header and one row per arm (for `markdown`): its kind, seeds, the end-of-run evaluation's hack and solve
    with their intervals (when logged), last-`last`-step mean ± std of hack and solve, their deltas paired with
    `pairs[arm]` at the same seed, solve against the `honest` arm's, hacked runs, the gap to the arm's own placebo,
    the hack-ward shares."""
    logged = {tag for runs in by_arm.values() for r in runs for tag, values in r.scalars.items() if values}
    columns = list(COLUMNS) + [(c, tag) for c, tag in STATE_COLUMNS + OPTIONAL_COLUMNS if tag in logged]
    read_last = {tag for _, tag in OPTIONAL_COLUMNS}
    end = ["end hack", "end solve"] if "end/hack" in logged else []
    active = ["active", "placebo active", "idle", "placebo idle"] if ACTIVE in logged else []
    start = ["start", "placebo start"] if START in logged else []
    header = ["arm", "kind", "seeds", *end, *(["end placebo gap"] if end else []), "hack", "solve", "Δhack", "Δsolve",
              "solve − honest", "hacked", "placebo gap", *active, *start, *[c for c, _ in columns[2:]]]
    placebo_of = placebos(by_arm, last)
    rows = []
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
        strength = [rate(group) if group else "–" for rate in (active_rate, idle_share)
                    for group in (runs, by_arm.get(placebo))] if active else []
        if start:
            strength += [start_rate(runs), start_rate(by_arm[placebo]) if placebo else "–"]
        row = [arm, kind_label(runs), str(len(runs)), *ends, cells["hack"], cells["solve"], *deltas, gap, n_hacked,
               beats, *strength, *[cells[c] for c, _ in columns[2:]]]
        rows.append(row)
    return header, rows


def mode_table(by_arm: dict[str, list[Run]], last: int = 5) -> str | None:
    """hack / solve per loophole mode and arm (means over seeds), from hack/student_<mode>, solve/student_<mode>."""
    prefix = HACK + "_"
    modes = sorted({t[len(prefix):] for runs in by_arm.values() for r in runs for t in r.scalars
                    if t.startswith(prefix)})
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


def explanation(last: int, against: str, honest: str | None, skylines: list[str], end: bool = False,
                active: bool = False, start: bool = False, honest_rows: str = "") -> str:
    """The sentence under the title that says how to read the arm table; `honest_rows`: how the honest arm's groups
    compare with the other arms' (kinds.honest_rows_note)."""
    text = ("end hack, end solve: the end-of-run evaluation of the final policy on every training problem (the "
            "primary numbers), mean over seeds [95% interval: Wilson's for one run, the t-interval over seeds for "
            "several]. hack, solve: " if end else "")
    text += (f"{'l' if end else 'L'}ast-{last}-step mean ± sample std over seeds; "
             f"Δ = paired difference with {against}; "
            f"(n.s.): the 95% t-interval of the paired differences contains 0, or fewer than 2 seeds pair up: "
            f"these seeds cannot separate the two arms. ")
    rows = f"; {honest_rows}" if honest_rows else ""
    text += (f"solve − honest = the arm's mean solve minus that of `{honest}`, the positive control (no loophole "
             f"in the prompt{rows}): compare hack at matched solve. " if honest else
             "solve − honest: – (this sweep has no honest arm, data.modes none). ")
    text += "hacked = runs that at some step hacked more samples than they solved. "
    if active:
        text += ("active = how strongly the arm acted (intervention/active_rate: the share of rollouts it acted on, "
                 "of the gradient's or the update's norm it removed, or of the advantage it discounted; each run's "
                 "mean over its steps with a gradient), placebo active = the same of its placebo: a placebo is a "
                 "control only at a matched strength, read here. idle, placebo idle = the share of steps with no "
                 "gradient (every group without reward variance), left out of active. ")
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
    return text + ("hack-ward * is the hack-ward share of the gradient, ‖relu(V g)‖/‖g‖; null * is its value for a "
                   "random direction with the same per-module norms, √(Σ w·k/2r).")
