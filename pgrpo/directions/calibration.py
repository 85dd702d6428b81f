"""Placebos matched in strength: at train start a placebo is set to act on as much of the base policy's own
rollouts, or to remove as much of their gradient's norm, as its method does (EVIDENCE.md: a placebo that does
nothing by construction is no control, and neither is one that acts far more often).

The rollouts are the base policy's (knobs zeroed), about 128 of them, sampled from a fixed seed on the first
training problems.
The oracle never labels them: a detector's flag rate needs no reward at all, and a gradient gate's needs the
training reward alone, the flawed grader's, which the step hands every arm anyway. So a resumed run calibrates
to the same bits, and the method and its placebo are measured on the same samples.
"""

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from pgrpo.model.adapter import knobs_zeroed
from pgrpo.step.batch import Rollouts
from pgrpo.chat import render_chat
from pgrpo.step.batch import PromptGroup
from pgrpo.env.prompts import build_messages
from pgrpo.step.rollout import Packed, pack, seeded

if TYPE_CHECKING:  # the interventions import this module
    from pgrpo.interventions.base import RunView

ROLLOUTS, SEED = 128, 1234  # a rate to within about 1/128


def base_groups(module: "RunView", n_rollouts: int = ROLLOUTS) -> list[PromptGroup]:
    """The first training problems, each with the run's own student samples per group, about n_rollouts in all
    (at most every training problem once)."""
    problems = module.train_problems[:math.ceil(n_rollouts / module.n_student)]
    return [PromptGroup(p, render_chat(module.tokenizer, build_messages(p)), [], module.n_student) for p in problems]


def base_completions(module: "RunView") -> Packed:
    """The base policy's rollouts, packed and never graded (what a detector's flag rate is matched on)."""
    with seeded(SEED, module.device), knobs_zeroed(module.adapter):
        samples = module.sampler.sample(base_groups(module))
        if samples.grading is not None:
            samples.grading.close()
    return pack(samples.prompt_ids, samples.completions, module.tokenizer.pad_token_id).to(module.device)


def base_rollouts(module: "RunView", n_rollouts: int = ROLLOUTS,
                  seed: int = SEED) -> tuple[Rollouts, dict[str, Tensor]]:
    """The base policy's rollouts as the step makes them (sampled, rewarded by the training grader,
    group-normalised, one backward under the base, knobs zeroed) and each row's own knob gradient (B, r) per
    module, zero on the rows of groups without reward variance. The knobs' .grad are left empty."""
    groups = base_groups(module, n_rollouts)
    with seeded(seed, module.device), knobs_zeroed(module.adapter):
        samples = module.sampler.sample(groups)
        ro: Rollouts = module.engine.assemble(groups, samples, module.sampler.grade(groups, samples))
        grads = module.engine.backward(ro).grads
    for m in module.adapter.values():
        m.delta_s.grad = m.delta_s_hack.grad = None
    return ro, grads.rows


def base_rollout_grads(module: "RunView") -> dict[str, Tensor]:
    """Each live base rollout's own knob gradient (B_live, r) per module, as the step computes it (`base_rollouts`)."""
    ro, rows = base_rollouts(module)
    live = ro.live()
    return {name: grads[live.to(grads.device)] for name, grads in rows.items()}


def base_gradient(module: "RunView") -> dict[str, Tensor]:
    """The step's knob gradient (r,) per module on the base policy's rollouts: their own gradients summed (what a
    gradient-level arm edits; its scale does not matter to a removed share)."""
    return {name: rows.sum(0) for name, rows in base_rollout_grads(module).items()}


def bisect(f: Callable[[float], float], target: float, lo: float, hi: float, rising: bool) -> float:
    """The x in [lo, hi] at which the monotone f (rising: it grows with x) comes closest to `target`. f may be a
    step function (a placebo's size is a whole number of rows): the closer of the two sides is returned."""
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if (f(mid) < target) == rising else (lo, mid)
    return min((lo, hi), key=lambda x: abs(f(x) - target))


def matching_center(fractions: Tensor, target: float, temperature: float) -> float:
    """The center c at which the gate 1 − σ((f − c)/T) discounts `fractions` by `target` on average (the mean
    discount falls as c rises)."""
    def discount(center: float) -> float:
        return float((torch.sigmoid((fractions - center) / temperature)).mean())

    lo, hi = float(fractions.min()) - 20 * temperature, float(fractions.max()) + 20 * temperature
    return bisect(discount, target, lo, hi, rising=False)

