"""`pgrpo report`: a sweep's table and curves, read back from its runs' events (pgrpo/records/events.py).

Each arm's runs are paired with its baseline's by seed; the table gives the last steps' means, the paired
differences with their 95% intervals, and each run's kind (method, control, oracle skyline, positive control).
The terminal gets the arms' end hack and solve and the figures (brief.py); report.md, every table.
"""

from dataclasses import replace
from pathlib import Path

from pgrpo.commands.report.brief import brief
from pgrpo.commands.report.decisions import decision_table
from pgrpo.commands.report.kinds import (arm_kind, code_line, honest_rows_note, one_base, paired_baselines,
                                         pick_baseline, pick_honest, placebos)
from pgrpo.commands.report.figures import draw_figures, logged_tags, record_figures
from pgrpo.commands.report.stats import ACTIVE, HACK, SOLVE, START
from pgrpo.commands.report.tables import (SUMMARY_COLUMNS, arm_table, end_table, explanation, markdown, mode_table,
                                          weak_detector_table)
from pgrpo.records.events import Run, find_runs, first_steps, run_length

def report(logdir: str, baseline: str | None = None, out: str | None = None, last: int = 5,
           arms: list[str] | None = None, steps: int | None = None, plan: str | None = None,
           protocol: str | None = None, full: bool = False) -> None:
    """Print each arm's end hack and end solve with their difference from vanilla; write the full report to report.md.

    The full report: a markdown table per arm (kind, hack, solve, paired deltas vs vanilla, solve against the honest
    arm, hacked runs, the gap to each method's placebo, the hack-ward shares) and the tables below it, beside PNG
    curves and a hack-against-solve plot.

    Printed: one line saying what is compared (the arms, seeds, steps, and the end-of-run evaluation's samples per
    run), then per arm its end hack and end solve with their 95% intervals and, on the line under it, its
    difference from vanilla paired by seed (the t-interval over seeds; Newcombe's interval for one seed each);
    for runs without an end-of-run evaluation (end_eval.json), their last-5-step means instead, as the heading
    says. Then one line per figure and the path of report.md.

    In report.md, per arm: its kind (vanilla, method, control = a negative control, oracle skyline = a ground-truth
    intervention that uses the oracle's labels, positive control = the honest arm with no loophole);
    hack and solve of the student samples as the mean over seeds of each run's last-5-step mean ± the
    sample std across seeds; the paired difference with vanilla at the same seed (Δ), flagged (n.s.) when
    its 95% t-interval over seeds contains 0 or fewer than 2 seeds pair up; solve − honest, the arm's mean
    solve minus the honest arm's (data.modes none), so hack is read at matched solve; hacked, how many of
    its runs at some step hacked more samples than they solved (the public benchmark's definition); placebo
    gap, for a method whose placebo is in the report (a control arm of the same intervention class and
    overlays; of several, the one that hacks least), the placebo's hack minus the method's paired by seed,
    and at how many seeds the method hacks less;
    the hack-ward share of the student's and the teacher rows' gradient, each beside its null (what a random
    direction with the same per-module gradient norms would give: √(Σ_m w_m k_m / 2 r_m), w_m = module m's share
    of ‖g‖²). Then hack / solve
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
            OUT/stage<i>/, of that stage's arms at its --trainer.max_steps override (else at --steps), once all its
            cells (its arms × its seeds, else the plan's) have that many steps; under the first stage's decision
            table, the methods the protocol's rule S selects for the later stages.
        protocol: the protocol the runs were planned under (docs/bench/protocol.md): the report names its
            commit and applies its decision rules (pgrpo/commands/report/decisions.py) in a table of their own
            (decisions.md).
        full: print the full report (report.md) rather than its short table.
    """
    if plan is None:
        write_report(find_runs(logdir), logdir, baseline, out, last, arms, steps, protocol, select=True, full=full)
        return
    from pgrpo.commands.sweep import arm_name, read_plan

    runs = find_runs(logdir)
    plan_seeds, stages = read_plan(plan)
    for i, stage in enumerate(stages, 1):
        stage_arms, stage_steps = [arm_name(a) for a in stage.arms], stage.max_steps() or steps
        # as the sweep lays them out
        cells = {(arm, f"seed{k}") for arm in stage_arms for k in stage.seeds_in(plan_seeds)}
        done = {(r.arm, r.seed) for r in runs if stage_steps is None or run_length(r) >= stage_steps} & cells
        if len(done) < len(cells):  # a stage's verdicts wait for all its cells (a seed is never replaced)
            length = f" {stage_steps} steps" if stage_steps else ""
            print(f"stage {i}: {len(done)} of its {len(cells)} cells have finished{length}; it is reported when "
                  f"the rest have")
            continue
        # rule S picks the later stages' methods from the first stage's table alone
        write_report([r for r in runs if (r.arm, r.seed) in cells], logdir, baseline,
                     str(Path(out or Path(logdir) / "report") / f"stage{i}"), last, stage_arms, stage_steps, protocol,
                     select=i == 1, full=full)


def write_report(runs: list[Run], logdir: str, baseline: str | None, out: str | None, last: int,
                 arms: list[str] | None, steps: int | None, protocol: str | None, select: bool,
                 full: bool) -> None:
    """`report` of these runs (of these arms); `select`: print the methods rule S selects under the decisions;
    `full`: print the full report, not its short table."""
    cautions = []  # what qualifies the numbers: printed with the short table too
    if steps is not None:
        short = [r for r in runs if run_length(r) < steps and (arms is None or r.arm in arms)]
        if short:
            cautions.append(f"Left out, shorter than {steps} steps: "
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
    honest_rows = honest_rows_note(by_arm, honest)
    out_dir = Path(out) if out else Path(logdir) / "report"
    out_dir.mkdir(parents=True, exist_ok=True)
    *plots, matched = draw_figures(by_arm, honest, out_dir, last)
    record_figures(out_dir, str(logdir), by_arm, steps, last, honest, [*plots, matched])
    logged = logged_tags(by_arm)
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
            cautions.append(f"`{arm}`'s runs have unequal lengths ({', '.join(map(str, lengths))} steps): their last "
                            f"steps are not the same steps (`--steps N` reads them all at N).")
    title = f"# pgrpo report: {logdir}" + (f", the first {steps} steps" if steps is not None else "")
    notes = list(cautions)
    if protocol:
        notes.insert(0, f"Protocol: `{protocol}` as of commit `{protocol_commit(protocol)}`; its decision rules "
                        f"are applied in the decision table below.")
    if bases:
        notes.append(bases)
    notes.append(code_line(by_arm))  # the commits the runs ran at, or that they did not say
    header, rows = arm_table(by_arm, pairs, honest, last)
    arms_md = markdown(header, rows)
    parts = [title, *notes, explanation(last, against, honest, skylines, end="end/hack" in logged,
                                        active=ACTIVE in logged, start=START in logged, honest_rows=honest_rows),
             arms_md]
    ends = end_table(by_arm)
    decisions = None
    if protocol:
        kinds = {arm: arm_kind(rs) for arm, rs in by_arm.items()}
        decisions = decision_table(by_arm, kinds, pairs, base, honest, placebos(by_arm, last), select,
                                   honest_rows)
        parts += ["Decisions, by the protocol's rules (end-of-run evaluation, paired by seed, 95% t-intervals):",
                  decisions]
    # the tables alone, for docs pages to include (never pasted by hand): every column, and the primary ones
    tables = {"arms.md": arms_md, "summary.md": markdown(header, rows, SUMMARY_COLUMNS), "runs.md": ends,
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
                  f"own hack and solve, last-{last}-step mean ± std over seeds; Δhack = method − vanilla, paired "
                  f"by seed; placebo hack and gap: that mode's hack under the method's placebo, and the placebo's "
                  f"minus the method's, paired by seed (k/n: the seeds at which the method hacks it less):",
                  weak]
    parts.append("Curves: " + ", ".join(str(p) for p in plots) + f"; hack against solve per run: {matched}; "
                 f"drawn from the runs under {logdir} that figures.json names")
    text = "\n\n".join(parts) + "\n"
    (out_dir / "report.md").write_text(text)
    print(text if full else brief(by_arm, pairs, last, cautions, [*plots, matched], out_dir / "report.md"), end="")


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
