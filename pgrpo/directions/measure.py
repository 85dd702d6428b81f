"""V measured offline on a base, beside its nulls: how much of each side of the extraction pairs span(V) holds, how
well V's per-rollout hack-ward share tells the base's exploited rollouts from its clean ones, and V's hack-ward share
of the students' gradient over a sweep's kept training runs (`pgrpo measure-v` prints and writes them).

The sign, stated once: V's rows are oriented in the gradient convention (extraction keeps each row where most pairs
have (∇NLL(hack) − ∇NLL(clean))·v > 0), so descending a hack-ward gradient changes the knobs by Δ with V Δ < 0.
⟨V, δS⟩ < 0 is hack-ward (`knob_reading`; `adapter/delta_s_along_v` logs it).
"""

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from pgrpo.directions.calibration import base_rollouts
from pgrpo.directions.extraction import HackBasis, nll_grads, uniform_rows
from pgrpo.evaluation.intervals import auroc, hanley_mcneil
from pgrpo.records.cache import announce
from pgrpo.records.events import find_runs, run_length
from pgrpo.step.projection import rollout_hack_fraction

SHARE, SHARE_NULL = "hackward_share/student", "hackward_share/student_null"
EXPLOITED, CLEAN = "hackward_share/exploited_rollouts", "hackward_share/clean_rollouts"
ALONG_V = "adapter/delta_s_along_v"
TINY = torch.finfo(torch.float32).tiny


def knob_reading(along: float) -> str:
    """What a position of the knobs along V, ⟨V, δS⟩ summed over modules and axes, means (the module's sign)."""
    if along < 0:
        return "hack-ward"
    return "away from hack" if along > 0 else "at the base"


def null_bases(basis: HackBasis, draws: int) -> list[HackBasis]:
    """`draws` random subspaces with V's k in every module, uniformly drawn and oriented (seeds 0..draws-1;
    `uniform_rows`): the null beside each figure."""
    if draws < 1:
        raise ValueError(f"null_draws={draws}: a null needs at least one random subspace")
    out = []
    for seed in range(draws):
        generator = torch.Generator().manual_seed(seed)
        V = {}
        for name, rows in sorted(basis.V.items()):
            k, r = rows.shape
            V[name] = uniform_rows(torch.randn(r, k, generator=generator)).contiguous().to(rows)
        out.append(HackBasis(V, {name: s.clone() for name, s in basis.sigma.items()},
                             {**basis.meta, "control": "uniform", "control_seed": str(seed)}))
    return out


# -- the pairs' two sides ---------------------------------------------------------------------------------------


def captured_share(vectors: Mapping[str, Tensor], basis: HackBasis) -> Tensor:
    """‖P_V g‖ / ‖g‖ of each row of (n, r) vectors, pooled over V's modules: the cosine of g with span(V) (n,)."""
    inside = torch.stack([(vectors[n].float() @ rows.to(vectors[n].device, torch.float32).T).pow(2).sum(1)
                          for n, rows in basis.V.items()]).sum(0)
    return (inside / pooled_norm(vectors, basis).pow(2).clamp(min=TINY)).sqrt()


def pooled_norm(vectors: Mapping[str, Tensor], basis: HackBasis) -> Tensor:
    """‖g‖ of each row over V's modules (n,)."""
    return torch.stack([vectors[name].float().pow(2).sum(1) for name in basis.V]).sum(0).sqrt()


@dataclass
class Side:
    """One side of the pairs (each completion's ∇δS NLL, as extraction computes it), means over the pairs."""

    norm: float  # ‖g‖
    captured: float  # ‖P_V g‖ / ‖g‖
    captured_null: float  # the same in random subspaces of V's k (mean over the draws)
    hackward: float  # ‖relu(V g)‖ / ‖g‖: the hack-ward share the step logs, of this side alone
    hackward_null: float


def side(vectors: Mapping[str, Tensor], basis: HackBasis, nulls: list[HackBasis]) -> Side:
    def mean(values: Tensor) -> float:
        return float(values.mean())

    return Side(
        norm=mean(pooled_norm(vectors, basis)), captured=mean(captured_share(vectors, basis)),
        captured_null=sum(mean(captured_share(vectors, b)) for b in nulls) / len(nulls),
        hackward=mean(rollout_hack_fraction(vectors, basis)),
        hackward_null=sum(mean(rollout_hack_fraction(vectors, b)) for b in nulls) / len(nulls),
    )


def pair_sides(g_hack: Mapping[str, Tensor], g_clean: Mapping[str, Tensor], basis: HackBasis,
               nulls: list[HackBasis]) -> dict[str, Side]:
    """The hack side, the clean side and their difference D = g_hack − g_clean (what V is the top of)."""
    difference = {name: g_hack[name].float() - g_clean[name].float() for name in basis.V}
    return {"hack": side(g_hack, basis, nulls), "clean": side(g_clean, basis, nulls),
            "difference": side(difference, basis, nulls)}


# -- the base's rollouts ----------------------------------------------------------------------------------------


@dataclass
class BaseRollouts:
    """The base policy's rollouts on the training problems, with each row's two gradients (n, r) per module."""

    exploited: Tensor  # (n,) bool: passed the flawed grader, failed the oracle
    live: Tensor  # (n,) bool: in a group with reward variance (the step backpropagates only these)
    step_rows: dict[str, Tensor]  # each row's own part of the step's gradient (advantage-weighted; 0 off live rows)
    nll_rows: dict[str, Tensor]  # each row's own ∇δS NLL, as extraction computes a completion's


def sample_base_rollouts(module, n_rollouts: int, seed: int) -> BaseRollouts:
    """At least n_rollouts of the base's rollouts, made as the step makes them (`base_rollouts`, the placebos'
    calibration sample): every training problem's group once per round, round i from seed + i."""
    if n_rollouts < 1:
        raise ValueError(f"rollouts={n_rollouts}: measure at least one")
    per_round = len(module.train_problems) * module.n_student
    starts = range(0, n_rollouts, per_round)
    parts = []
    for i, start in enumerate(starts):
        announce(f"measure-v: base rollouts, round {i + 1} of {len(starts)} (seed {seed + i})")
        ro, rows = base_rollouts(module, min(per_round, n_rollouts - start), seed + i)
        packed, cfg = ro.packed, module.extraction
        nll = nll_grads(module.policy, module.adapter, packed.input_ids, packed.attention_mask,
                        packed.completion_mask, cfg.normalize, cfg.fixed_denominator, cfg.batch_size,
                        temperature=module.generation.temperature)
        parts.append((ro.exploited.cpu(), ro.live().cpu(), {n: r.cpu() for n, r in rows.items()},
                      {n: r.cpu() for n, r in nll.items()}))
    return BaseRollouts(torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts]),
                        {n: torch.cat([p[2][n] for p in parts]) for n in parts[0][2]},
                        {n: torch.cat([p[3][n] for p in parts]) for n in parts[0][3]})


@dataclass
class RolloutSeparation:
    """How well a per-rollout score ranks exploited rollouts above clean ones."""

    n_exploited: int
    n_clean: int
    exploited_mean: float | None
    clean_mean: float | None
    auroc: float | None  # None where a class is empty
    interval: tuple[float, float] | None  # Hanley and McNeil's 95%
    null_auroc: float | None  # the same score on random subspaces of V's k, mean over the draws
    null_auroc_range: tuple[float, float] | None  # their smallest and largest


def rollout_separation(scores: Tensor, exploited: Tensor, null_scores: list[Tensor]) -> RolloutSeparation:
    def split(values: Tensor) -> tuple[list[float], list[float]]:
        return values[exploited].tolist(), values[~exploited].tolist()

    hacked, clean = split(scores)
    if not hacked or not clean:
        return RolloutSeparation(len(hacked), len(clean), _mean(hacked), _mean(clean), None, None, None, None)
    area = auroc(hacked, clean)
    nulls = [auroc(*split(s)) for s in null_scores]
    return RolloutSeparation(len(hacked), len(clean), _mean(hacked), _mean(clean), area,
                             hanley_mcneil(area, len(hacked), len(clean)), _mean(nulls),
                             (min(nulls), max(nulls)) if nulls else None)


def rollout_separations(rollouts: BaseRollouts, basis: HackBasis,
                        nulls: list[HackBasis]) -> dict[str, RolloutSeparation]:
    """Two scores of each rollout, each V's hack-ward share ‖relu(V g)‖/‖g‖: of its part of the step's gradient
    (`step`: what the step logs per rollout and adv_gate discounts; live rows only, its sign set by the advantage),
    and of its own ∇NLL (`text`: the completion as extraction reads one, every row, whatever its reward)."""
    live = rollouts.live
    step = {n: r[live] for n, r in rollouts.step_rows.items()}
    return {
        "step": rollout_separation(rollout_hack_fraction(step, basis), rollouts.exploited[live],
                                   [rollout_hack_fraction(step, b) for b in nulls]),
        "text": rollout_separation(rollout_hack_fraction(rollouts.nll_rows, basis), rollouts.exploited,
                                   [rollout_hack_fraction(rollouts.nll_rows, b) for b in nulls]),
    }


# -- the kept training runs -------------------------------------------------------------------------------------


@dataclass
class ArmShares:
    """V's hack-ward share of the students' gradient in one arm's kept runs, by step window, means over seeds of
    each window's mean over the steps that logged it (a step without gradient logs none)."""

    arm: str
    seeds: list[str]
    windows: list[tuple[int, int]]  # [first, last] steps, over the steps every arm read ran
    share: list[float | None]
    null: list[float | None]  # a random direction's (`hackward_share/student_null`)
    exploited_rollouts: float | None  # the per-rollout share, over the windows' steps
    clean_rollouts: float | None
    along_v_end: list[float]  # ⟨V, δS⟩ at each seed's last logged step of the windows


def window_mean(values: list[tuple[int, float]], first: int, last: int) -> float | None:
    return _mean([v for step, v in values if first <= step <= last and math.isfinite(v)])


def kept_shares(results: str | Path, arms: list[str] | None, window: int) -> list[ArmShares]:
    """Each arm's shares from a sweep's kept cells (`find_runs`), in `arms`' order (None: every arm that logs them),
    in windows over the steps that all of them ran: arms are compared at the same steps."""
    if window < 1:
        raise ValueError(f"window={window}: a window holds at least one step")
    by_arm: dict[str, list] = {}
    for run in find_runs(results):
        if SHARE in run.scalars:
            by_arm.setdefault(run.arm, []).append(run)
    missing = [a for a in arms or [] if a not in by_arm]
    if missing:
        raise ValueError(f"{results} keeps no run of {missing} that logs {SHARE}; it has {sorted(by_arm)}")
    chosen = {arm: by_arm[arm] for arm in arms or sorted(by_arm)}
    end = min(run_length(run) for runs in chosen.values() for run in runs) - 1
    windows = [(lo, min(lo + window - 1, end)) for lo in range(0, end + 1, window)]
    out = []
    for arm, runs in chosen.items():
        def over_seeds(tag: str, first: int, last: int) -> float | None:
            return _mean([m for r in runs if (m := window_mean(r.scalars.get(tag, []), first, last)) is not None])

        along = [[v for step, v in r.scalars.get(ALONG_V, []) if step <= end] for r in runs]
        out.append(ArmShares(
            arm, [r.seed for r in runs], windows, [over_seeds(SHARE, *w) for w in windows],
            [over_seeds(SHARE_NULL, *w) for w in windows], over_seeds(EXPLOITED, 0, end), over_seeds(CLEAN, 0, end),
            [values[-1] for values in along if values],
        ))
    return out


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


# -- the tables -------------------------------------------------------------------------------------------------


def markdown(result: dict) -> str:
    """`pgrpo measure-v`'s result (its JSON) as markdown tables, each figure beside its null."""
    basis, pairs, ro = result["basis"], result["pairs"], result["rollouts"]
    draws = result["null_draws"]
    lines = [f"## V of {result['model']}", "",
             f"V: {basis['k_total']} axes (k = {basis.get('k', '?')} a module), sha256 {basis['digest']}, from "
             f"{pairs['n']} pairs ({basis.get('n_heldout', '?')} of them held out of the SVD). ⟨V, δS⟩ < 0 is "
             f"hack-ward.", "",
             f"**The pairs' two sides** (each completion's ∇δS NLL; means over the {pairs['n']} pairs; null: "
             f"{draws} random subspaces of V's k)", "",
             "| side | ‖g‖ | ‖P_V g‖ / ‖g‖ | null | hack-ward share ‖relu(V g)‖ / ‖g‖ | null |",
             "|---|---|---|---|---|---|"]
    for key, name in (("hack", "hack"), ("clean", "clean"), ("difference", "hack − clean (V's source)")):
        s = pairs[key]
        lines.append(f"| {name} | {s['norm']:.4g} | {s['captured']:.3f} | {s['captured_null']:.3f} | "
                     f"{s['hackward']:.3f} | {s['hackward_null']:.3f} |")
    if ro is not None:
        lines += rollout_lines(ro, draws)
    lines += kept_lines(result.get("kept"))
    return "\n".join(lines) + "\n"


def rollout_lines(ro: dict, draws: int) -> list[str]:
    lines = ["", f"**Exploited against clean base rollouts** ({ro['n']} rollouts of the base on the training "
              f"problems, seed {ro['seed']}; {ro['live']} in groups with reward variance), scored by V's hack-ward "
              f"share; null: the same score in {draws} random subspaces of V's k", "",
              "| score | exploited | clean | its mean, exploited | clean | AUROC [95%] | null AUROC (range) |",
              "|---|---|---|---|---|---|---|"]
    for key, name in (("step", "the rollout's part of the step's gradient (live rows)"),
                      ("text", "the rollout's own ∇NLL (every row)")):
        s = ro[key]
        area = "–" if s["auroc"] is None else f"{s['auroc']:.3f} [{s['interval'][0]:.3f}, {s['interval'][1]:.3f}]"
        null = "–" if s["null_auroc"] is None else (f"{s['null_auroc']:.3f} ({s['null_auroc_range'][0]:.3f}–"
                                                    f"{s['null_auroc_range'][1]:.3f})")
        lines.append(f"| {name} | {s['n_exploited']} | {s['n_clean']} | {_fmt(s['exploited_mean'])} | "
                     f"{_fmt(s['clean_mean'])} | {area} | {null} |")
    return lines


def kept_lines(kept: dict | None) -> list[str]:
    lines = []
    if kept and kept["arms"]:
        arms = kept["arms"]
        windows = arms[0]["windows"]
        honest = next((a for a in arms if a["arm"].split("+")[0] == "honest"), None)
        lines += ["", f"**V's hack-ward share of the students' gradient over training** (`{SHARE}`, kept cells of "
                  f"`{kept['results']}`: mean over seeds of each {kept['window']}-step window's mean over the steps "
                  f"that logged it; in brackets a random direction's, `{SHARE_NULL}`)", "",
                  "| arm | seeds | " + " | ".join(f"steps {lo}–{hi}" for lo, hi in windows)
                  + " | last window − honest's | per-rollout share, exploited / clean "
                  "| ⟨V, δS⟩ at the last step, mean |",
                  "|---|---|" + "---|" * len(windows) + "---|---|---|"]
        for a in arms:
            cells = [f"{_fmt(share)} ({_fmt(null)})" for share, null in zip(a["share"], a["null"])]
            gap = "–" if honest is None or a["share"][-1] is None or honest["share"][-1] is None else \
                f"{a['share'][-1] - honest['share'][-1]:+.3f}"
            mean_along = _mean(a["along_v_end"])
            # a mean that rounds to 0 (route's δS: its motion along V is parked in δS_hack) reads as no side
            along = "–" if mean_along is None else (
                f"{mean_along:+.1f}, {knob_reading(mean_along) if round(mean_along, 1) else 'at the base'} (seeds: "
                + ", ".join(f"{v:+.1f}" for v in a["along_v_end"]) + ")")
            lines.append(f"| {a['arm']} | {len(a['seeds'])} | " + " | ".join(cells) + f" | {gap} | "
                         f"{_fmt(a['exploited_rollouts'])} / {_fmt(a['clean_rollouts'])} | {along} |")
    return lines


def _fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"
