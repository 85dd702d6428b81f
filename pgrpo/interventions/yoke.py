"""Yoked placebos: a placebo that acts, step by step, as strongly as its method did at the same seed (EVIDENCE.md:
matched at the start is not matched over training). The start-matched placebo (pgrpo/directions/calibration.py)
stays the default; a yoked one names its method's finished run (`yoked_to`: its directory, with its event files or a
sweep's kept scalars.json.gz; `pgrpo sweep` fills it in for an arm `<placebo>@<method>`).

At step s the placebo reads what its method logged at s, on the level the arm acts on, and acts that much with its
own detector:
- the gradient (erase on target grad, clean_subspace): its own edit of the gradient, scaled to remove the method's
  share of the gradient's norm (`intervention/gradient_removed`). The share is linear in the scale, so it is exact
  whenever its own edit removes anything; a scale above 1 overshoots its own edit, as erase's `overshoot` does;
- the update (route, erase on target update or position): the same on the update (`intervention/update_removed`);
- the advantages (adv_gate): its gate's center moved until it discounts the live rollouts by the method's mean
  discount (`intervention/advantage_discount`);
- the rollouts (probe_penalty): as many student rows and as many teacher rows as the method acted on
  (`intervention/rollout_rate_student`, `intervention/rollout_rate_teacher`), those its detector scores highest.
A step at which the method had no gradient (every group without reward variance: it logged no
`hackward_share/gradient`) is matched by leaving the gradient, the update and the advantages alone; a rollout-level
placebo matches the rollouts the method acted on at that step, which it logs whether or not a gradient followed. A
step the method never logged (a shorter run) is an error naming its run and the step.
"""

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from pgrpo.records.events import HAD_GRADIENT, read_scalars
from pgrpo.step.projection import removed_share

if TYPE_CHECKING:
    from pgrpo.interventions.base import Intervention, RunView

GRADIENT, UPDATE = "intervention/gradient_removed", "intervention/update_removed"
DISCOUNT = "intervention/advantage_discount"
STUDENT_ROWS, TEACHER_ROWS = "intervention/rollout_rate_student", "intervention/rollout_rate_teacher"
STEP = "loss"  # logged at every step (HAD_GRADIENT: only at a step with a gradient)


class Yoke:
    """The method's run a placebo is yoked to, read once, and its strength at each step."""

    def __init__(self, run: str):
        self.run = Path(run)
        self._scalars: dict[str, dict[int, float]] | None = None

    def scalars(self) -> dict[str, dict[int, float]]:
        """The method's scalars, tag -> {step: value}: read at train start (the arm's `basis` or `prepare`), so that a
        missing run fails before any step."""
        if self._scalars is None:
            if not self.run.is_dir():
                raise FileNotFoundError(f"yoked_to={self.run}: no such run directory (a yoked placebo reads its "
                                        f"method's finished run at the same seed)")
            self._scalars = {tag: dict(values) for tag, values in read_scalars(self.run).items()}
        return self._scalars

    def logged(self, tag: str, step: int) -> float:
        """What the method logged under `tag` at `step`; an error naming the run and the step where it did not."""
        scalars = self.scalars()
        steps = scalars.get(STEP, {})
        if step not in steps:
            last = max(steps, default=None)
            raise ValueError(f"yoked_to={self.run}: the method's run logged no step {step} (its last: {last}); a "
                             f"yoked placebo runs no further than its method")
        if step not in scalars.get(tag, {}):
            raise ValueError(f"yoked_to={self.run}: the method's run logged no {tag} at step {step}, which this "
                             f"placebo is yoked on (a run from before it was logged?)")
        return scalars[tag][step]

    def rate(self, tag: str, step: int) -> float:
        """The method's strength at `step` on a gradient-level tag: 0 at a step where it had no gradient."""
        self.logged(STEP, step)
        return self.logged(tag, step) if step in self.scalars().get(HAD_GRADIENT, {}) else 0.0

    def matched(self, tag: str, step: int, tensors: dict[str, Tensor], edit: Callable[[], None],
                removed: Callable[[dict[str, Tensor]], float]) -> None:
        """Run `edit` on `tensors` (in place), then scale what it changed so that it removes the method's share:
        each tensor becomes start + β (edited − start), β = the method's share / `removed(start)`, the share the
        placebo's own edit removed (linear in β). An edit that removed nothing is left as it is."""
        share = self.rate(tag, step)
        start = {name: t.detach().clone() for name, t in tensors.items()}
        edit()
        own = removed(start)
        scale = share / own if own > 0 else 1.0
        with torch.no_grad():
            for name, t in tensors.items():
                t.copy_(start[name] + scale * (t - start[name]))

    def gradient(self, module: "RunView", edit: Callable[[], None]) -> None:
        """A gradient hook's `edit` of the knobs' gradient, scaled to remove the method's share of its norm (the
        engine measures intervention/gradient_removed over every module, so the share is taken over every module)."""
        grads = {n: m.delta_s.grad for n, m in module.adapter.items() if m.delta_s.grad is not None}
        self.matched(GRADIENT, module.global_step, grads, edit, lambda start: removed_share(start, grads))

    def update(self, module: "RunView", before: dict[str, Tensor], edit: Callable[[], None]) -> None:
        """An update hook's `edit` of the knobs (δS, and δS_hack where it parks what it removes), scaled to take
        back the method's share of the update the optimizer made from `before`."""
        knobs = {n: m.delta_s.data for n, m in module.adapter.items()}
        parked = {f"{n} (δS_hack)": m.delta_s_hack.data for n, m in module.adapter.items()}

        def removed(start: dict[str, Tensor]) -> float:  # of the update δS made, as the engine measures it
            return removed_share({n: start[n] - before[n] for n in knobs}, {n: knobs[n] - before[n] for n in knobs})

        self.matched(UPDATE, module.global_step, knobs | parked, edit, removed)

    def discount(self, module: "RunView") -> float:
        """The method's mean advantage discount of its live rollouts at this step (0 where it had no gradient)."""
        return self.rate(DISCOUNT, module.global_step)

    def flags(self, module: "RunView", scores: Tensor) -> Tensor:
        """(P, G) bool: in each role (a group's first n_student rows are the student's, the rest the teacher's), as
        many rows as the method acted on at this step, those `scores` (P, G) ranks highest."""
        student = torch.arange(scores.shape[1]) < module.n_student
        flagged = torch.zeros(scores.shape, dtype=torch.bool)
        for tag, role in ((STUDENT_ROWS, student), (TEACHER_ROWS, ~student)):
            if not role.any():
                continue
            n = round(self.logged(tag, module.global_step) * int(role.sum()) * scores.shape[0])
            top = scores[:, role].flatten().argsort(descending=True)[:n]
            chosen = torch.zeros(scores.shape[0] * int(role.sum()), dtype=torch.bool)
            chosen[top] = True
            flagged[:, role] = chosen.view(scores.shape[0], -1)
        return flagged


def yoke_of(intervention: "Intervention", yoked_to: str | None) -> Yoke | None:
    """The yoke an intervention's `yoked_to` names (None: start-matched, or a method), refusing a method: only a
    placebo is yoked to its method."""
    if yoked_to is None:
        return None
    if not intervention.placebo:
        knob = intervention.placebo_knob
        raise ValueError(f"yoked_to={yoked_to}: only a placebo is yoked to its method's run, and this "
                         f"{intervention.arm()} reads its real detector ({knob}: real)")
    return Yoke(yoked_to)


def refuse_yoke(intervention: "Intervention", yoked_to: str | None, why: str) -> None:
    """An arm that cannot be yoked says why when asked to be."""
    if yoked_to is not None:
        raise ValueError(f"yoked_to={yoked_to}: {intervention.arm()} cannot be yoked to its method: {why}")

