"""What each run and arm of a sweep is (vanilla, method, control, oracle skyline, positive control), which arm
each is compared with (its vanilla, its placebo, the honest arm), whether the runs stand on one base, and the code
they ran."""

from pgrpo.commands.report.stats import HACK, mean_over_seeds
from pgrpo.env.problems import MODES, NO_LOOPHOLE
from pgrpo.records.events import Run, setting
from pgrpo.records.provenance import describe


def held_out_modes(config: dict | None) -> list[str]:
    """The loophole modes a leave-modes-out run built its detector without (none for any other run)."""
    known = setting(config or {}, "model.extraction.modes", None)
    return [m for m in MODES if m not in known] if isinstance(known, list) else []


def run_kind(config: dict | None) -> str | None:
    """What a run is, from what its intervention declares (pgrpo/interventions/base.py): positive control
    (data.modes none: no loophole in the prompt, the honest arm), oracle skyline (reads_oracle: it uses the
    oracle's labels), control (an intervention reading a placebo detector: a random V, probe or subspace),
    vanilla (measures_only) or method; None without a config to tell."""
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


def kind_label(runs: list[Run]) -> str:
    """The arm's kind as its row shows it: a control says how it is matched in strength to its method, at train
    start or yoked to its method's run step by step (pgrpo/interventions/yoke.py)."""
    kind = arm_kind(runs)
    if kind != "control":
        return kind
    yoked = {setting(r.config or {}, "model.intervention.init_args.yoked_to", None) is not None for r in runs}
    return "/".join(f"control ({'yoked' if y else 'start-matched'})" for y in sorted(yoked))


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


def code_line(by_arm: dict[str, list[Run]]) -> str:
    """The code the runs ran, as a line for the report: each commit (clean or dirty; an installed version where
    pgrpo ran without its checkout) with how many runs ran a part of them at it, and how many runs did not record
    theirs (kept before runs recorded it)."""
    def runs(n: int) -> str:
        return f"{n} {'run' if n == 1 else 'runs'}"

    counts: dict[str, int] = {}
    every = [r for rs in by_arm.values() for r in rs]
    for r in every:
        for code in dict.fromkeys(describe(part) for part in r.code or []):  # a resumed run: once under each
            counts[code] = counts.get(code, 0) + 1
    said = [f"{code} in {runs(n)}" for code, n in counts.items()]
    unrecorded = sum(r.code is None for r in every)
    if unrecorded:
        said.append(f"not recorded by {runs(unrecorded)} (from before runs recorded their code)")
    return "Code: " + "; ".join(said) + "."


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


def group_rows(runs: list[Run]) -> tuple[int, int] | None:
    """(student, teacher) rows in each group of the arm's runs, split as the data module splits data.group_size by
    data.mix_ratio; None where a run did not record them or the runs disagree."""
    rows = set()
    for r in runs:
        size, ratio = setting(r.config or {}, "data.group_size", None), setting(r.config or {}, "data.mix_ratio", None)
        if size is None or ratio is None:
            return None
        teacher = round(size * ratio)  # as GRPODataModule rounds G_t
        rows.add((size - teacher, teacher))
    return rows.pop() if len(rows) == 1 else None


def others_rows(by_arm: dict[str, list[Run]]) -> tuple[int, int] | None:
    """The group composition every arm but the positive controls shares (None where they differ or do not say)."""
    rows = {group_rows(runs) for runs in by_arm.values() if arm_kind(runs) != "positive control"}
    return rows.pop() if len(rows) == 1 else None


def pick_honest(by_arm: dict[str, list[Run]]) -> str | None:
    """The positive-control arm (data.modes none) that solve − honest and rule C read; of several, the one whose
    groups hold as many student and teacher rows as every other arm's (configs/honest_matched.yaml beside
    configs/honest.yaml: no loophole is then the one thing it differs in), else the one named `honest`, else none."""
    honest = [arm for arm, runs in by_arm.items() if arm_kind(runs) == "positive control"]
    if len(honest) == 1:
        return honest[0]
    others = others_rows(by_arm)
    matched = [arm for arm in honest if others is not None and group_rows(by_arm[arm]) == others]
    if len(matched) == 1:
        return matched[0]
    return "honest" if "honest" in honest else None


def honest_rows_note(by_arm: dict[str, list[Run]], honest: str | None) -> str:
    """How the honest arm's groups compare with the other arms', as a clause for the report ('' where a run does not
    say): matched, it differs from them in its prompts alone; not matched, in its teacher rows too."""
    own, others = (group_rows(by_arm[honest]), others_rows(by_arm)) if honest else (None, None)
    if own is None or others is None:
        return ""
    said = f"its groups hold {own[0]} student and {own[1]} teacher rows"
    if own == others:
        return said + (", every teacher row a clean one," if own[1] else "") + " as every other arm's: matched"
    return (f"{said}, the other arms' {others[0]} and {others[1]}: not matched, it differs in its group as well as "
            f"its prompts (configs/honest_matched.yaml is matched)")


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


def lomo_role(config: dict | None) -> tuple[str, str] | None:
    """(held-out mode, 'vanilla' | 'method') for a run of the weak-detector table: a leave-one-mode-out run that is
    vanilla or a method; None for any other run (a control or a skyline answers another question)."""
    mode, kind = held_out_mode(config), run_kind(config)
    if mode is None or kind not in ("vanilla", "method"):
        return None
    return mode, kind
