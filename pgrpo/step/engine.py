"""One projected-GRPO step on a host's policy, with no trainer around it (docs/design.md#the-training-step).

Both hosts run it: `pgrpo fit`'s LightningModule (hosts/lightning/module.py) calls every phase; TRL's
GRPOTrainer (hosts/trl.py), which samples, backpropagates and steps itself, calls the phases it leaves open.
The intervention's hooks run here, in this order, and nowhere else:

    assemble(groups, students, grades)   rewards hook → group advantages → advantages hook → the teacher rows'
                                         treatment → π_old and π_ref                                → Rollouts
    backward(ro)                         logprobs with grad → loss → one backward whose per-row knob gradients
                                         are kept (student and teacher apart)                      → Backward
    project(grads, ro, optimizer)        advantage_weights hook → Adam's raw gradient kept → hack-ward share measured →
                                         gradient hook → hack-ward share measured again            → stats
    update(optimizer, ro, proj)          clip → before_update hook → optimizer step → update hook → how
                                         strongly the intervention acted                           → Update

What the host hands in: the run it is (`host`: the RunView the hooks read, with its intervention), the step's
settings (`StepConfig`), how a loss is backpropagated (Lightning's manual_backward, or Tensor.backward), what
keeps DDP from syncing each micro-batch's backward, and the step number (for `kl_every` and errors).
"""

import math
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, cast

import torch
from torch import Tensor

from pgrpo.env import GradeResult
from pgrpo.model.adapter import (SVDAdapterLinear, all_reduce_knob_grads, all_reduce_mean_, base_is_sharded,
                                 capture_row_grads, knobs_zeroed, merged_for_generation)
from pgrpo.step.batch import (PromptGroup, Rollouts, Samples, batch_stats, lay_out, logged_samples,
                              rollout_overlap_stats)
from pgrpo.step.loss import (AdvantageScale, group_advantages, grpo_loss, teacher_advantages, teacher_token_weights,
                             token_logprobs)
from pgrpo.step.optim import RawSecondMomentAdamW
from pgrpo.step.projection import (grad_hack_fraction, knob_snapshot, measure_grads, removed_share,
                                   rollout_hack_fraction, update_hack_fraction)
from pgrpo.step.rollout import Packed
from pgrpo.step.step_grads import Backward, StepGrads

if TYPE_CHECKING:  # the hooks' interface, which names only the step's parts below this module
    from pgrpo.interventions.base import Intervention, RunView


@dataclass(frozen=True)
class StepConfig:
    """The step's own settings (`pgrpo fit` takes each as model.<name>; their `--help` is ProjectedGRPO's)."""

    advantage_scale: AdvantageScale = "none"
    num_iterations: int = 1
    kl_every: int = 10
    logprob_chunk_size: int = 128
    micro_batch_size: int | None = None
    share_prompts: bool = True
    importance_cap: float | None = None

    def __post_init__(self):
        if self.advantage_scale not in ("none", "group", "batch"):
            raise ValueError(f"model.advantage_scale={self.advantage_scale!r}: expected none, group or batch")
        if self.num_iterations < 1:
            raise ValueError(f"model.num_iterations={self.num_iterations}: must be >= 1")
        if self.kl_every < 0:
            raise ValueError(f"model.kl_every={self.kl_every}: must be >= 0")


class Update(NamedTuple):
    """The optimizer step: the knobs' gradient norm before clipping, and what the step measured of it."""

    grad_norm: float
    stats: dict[str, float]


class GRPOStep:
    """The step's phases on `host`'s policy (the RunView its intervention's hooks see, which holds the intervention
    as `host.intervention`). V, the loss and sampling settings are read from the host at each call: a host swaps
    V at train start and at a refresh."""

    def __init__(self, host: "RunView", config: StepConfig, backward: Callable[[Tensor], None] = Tensor.backward,
                 no_sync: Callable[[], AbstractContextManager] = nullcontext, step: Callable[[], int] = lambda: 0):
        self.host, self.config = host, config
        self._backward, self._no_sync, self._step = backward, no_sync, step

    @property
    def intervention(self) -> "Intervention":
        return self.host.intervention  # type: ignore[attr-defined]

    # -- rollouts → advantages -------------------------------------------------------------------
    def assemble(self, groups: list[PromptGroup], students: Samples, grades: list[GradeResult]) -> Rollouts:
        """Each group: its G_s graded student rows then its G_t cached teacher rows, packed, with advantages."""
        host = self.host
        # a sharded base must run the same forwards on every rank, so its rows keep their own prompts
        share = self.config.share_prompts and not base_is_sharded(host.adapter)
        rows = lay_out(groups, students, grades, host.tokenizer, share)
        packed = rows.packed.to(host.device)
        # exploited is the oracle's verdict: only an intervention that declares it reads it is handed it
        oracle = rows.exploited.view_as(rows.rewards) if self.intervention.reads_oracle else None
        edit = self.intervention.rewards(host, rows.rewards, packed, oracle)
        # the rollouts the intervention acted on: a reward edited or screened out, or an advantage edited
        acted = edit.rewards != rows.rewards
        if edit.keep is not None:
            acted |= ~edit.keep.to(torch.bool)
        advantages, zero_std = group_advantages(edit.rewards, self.config.advantage_scale, keep=edit.keep)
        normalised = advantages.flatten()
        advantages = self.intervention.advantages(host, normalised.clone())
        acted = acted.flatten() | (advantages != normalised)
        # the harness's treatment of the off-policy teacher rows (model.loss.teacher_advantage), after the arm's
        advantages = teacher_advantages(advantages, rows.is_student, host.loss_cfg)
        old_logp, ref_logp = self.sampling_logprobs(packed, rows.is_student.to(host.device))
        stats = batch_stats(groups, students, grades, rows, edit.rewards, zero_std, acted, edit.flagged) | edit.stats
        return Rollouts(packed, rows.is_student.to(host.device), rows.exploited.to(host.device),
                        advantages.to(host.device), edit.rewards, zero_std, old_logp, ref_logp,
                        None if rows.sampler_logp is None else rows.sampler_logp.to(host.device), stats,
                        logged_samples(groups, students, grades))

    @torch.no_grad()
    def sampling_logprobs(self, packed: Packed, is_student: Tensor) -> tuple[Tensor | None, Tensor | None]:
        """(π_old, π_ref) of every row: the sampling policy's logprobs when a batch serves several optimizer steps,
        and the reference's (knobs zeroed) when the loss or the `kl` diagnostic needs them this step."""
        old_logp = ref_logp = None
        adapter = self.host.adapter
        if self.config.num_iterations > 1:
            with merged_for_generation(adapter):  # folded once for all passes: base-model speed
                old_logp = self.row_logprobs(packed, is_student)
        kl_every = self.config.kl_every
        if self.host.loss_cfg.beta > 0 or (kl_every and self._step() % kl_every == 0):
            # the free reference model: same weights with the knobs at zero (merged: base-model speed)
            with knobs_zeroed(adapter), merged_for_generation(adapter):
                ref_logp = self.row_logprobs(packed, is_student)
        return old_logp, ref_logp

    def logprobs(self, packed: Packed, with_entropy: bool = False):
        logp, entropy = token_logprobs(self.host.policy, packed.input_ids, packed.attention_mask,
                                       packed.completion_len, self.config.logprob_chunk_size,
                                       self.host.generation.temperature, with_entropy, packed.prompt_of_row)
        return (logp, entropy) if with_entropy else logp

    def row_logprobs(self, packed: Packed, is_student: Tensor) -> Tensor:
        """(B, T_c) logprobs of every row without grad, run as the backward's micro-batches (0 on padding)."""
        device = self.host.device
        out = torch.zeros(packed.completion_mask.shape, device=device)
        for rows in self.micro_batches(torch.arange(len(is_student), device=device), is_student):
            part = packed.rows(rows)
            out[rows, : part.completion_len] = self.logprobs(part)
        return out

    # -- the one backward ------------------------------------------------------------------------
    def backward(self, ro: Rollouts) -> Backward:
        """Loss over the rows that carry signal, one backward, per-row knob gradients captured on the way."""
        host, device = self.host, self.host.device
        live = ro.live().to(device)  # zero-variance groups are skipped
        index = live.nonzero().flatten()
        total_rows = ro.rewards.numel()  # Dr.GRPO's fixed denominator counts every row of the step
        loss_sum, stats_sum = torch.zeros((), device=device), dict[str, float]()
        batches = self.micro_batches(index, ro.is_student)
        # Under DDP the backward passes stay local and the knob gradients are averaged once below, so ranks may
        # run different numbers of micro-batches, or none (all groups zero-variance), without hanging each other.
        self.pad_sharded_passes(ro, len(batches))
        prompt_parts_student = []  # per micro-batch with shared prompts: whether each shared prompt is a student's
        mismatch = torch.zeros(3, device=device)  # Σ|Δlogp|, Σ IS-weight truncated, student tokens
        teacher_weight = torch.zeros(2, device=device)  # Σ teacher token weights, teacher tokens
        with capture_row_grads(host.adapter) as captured, self._no_sync():
            for rows in batches:
                packed = ro.packed.rows(rows)  # cut to these rows' own lengths
                width = packed.completion_len
                if packed.prompt_of_row is not None:  # its shared prompts' forward comes first, one row per prompt
                    units, row_unit = torch.unique(packed.prompt_of_row, return_inverse=True)
                    prompt_parts_student.append(
                        torch.zeros_like(units, dtype=torch.bool).scatter(0, row_unit, ro.is_student[rows]))
                logp, entropy = self.logprobs(packed, with_entropy=True)
                stats_sum["entropy"] = stats_sum.get("entropy", 0.0) + float(
                    (entropy * packed.completion_mask).sum() / packed.completion_mask.sum()) * len(rows)
                old = None
                if ro.old_logp is not None:
                    # teacher rows were never sampled by this policy: their ratio is forced to 1
                    old = torch.where(ro.is_student[rows, None], ro.old_logp[rows, :width], logp.detach())
                ref = ro.ref_logp[rows, :width] if ro.ref_logp is not None else None
                token_weight = teacher_token_weights(logp, ro.is_student[rows], host.loss_cfg)
                if token_weight is not None:
                    teacher_tokens = packed.completion_mask * ~ro.is_student[rows, None]
                    teacher_weight += torch.stack([(token_weight * teacher_tokens).sum(), teacher_tokens.sum()])
                if ro.sampler_logp is not None:
                    correction = self.sampler_correction(ro, rows, logp if old is None else old, packed, mismatch)
                    if correction is not None:
                        token_weight = correction if token_weight is None else token_weight * correction
                loss, row_stats = grpo_loss(logp, old, ref, ro.advantages[rows], packed.completion_mask, host.loss_cfg,
                                        denominator_rows=total_rows, max_new_tokens=host.generation.max_new_tokens,
                                        token_weight=token_weight)
                if not torch.isfinite(loss):
                    raise FloatingPointError(f"non-finite loss {loss.item()} at step {self._step()}")
                self._backward(loss)
                loss_sum += loss.detach()
                for k, v in row_stats.items():
                    stats_sum[k] = stats_sum.get(k, 0.0) + float(v) * len(rows)
        all_reduce_knob_grads(host.adapter)  # the global batch's gradient, the same on every rank
        if mismatch[2] > 0:  # logged with the rollouts: once per generated batch
            ro.stats["gen/logprob_gap"] = float(mismatch[0] / mismatch[2])
            if self.config.importance_cap is not None:
                ro.stats["gen/is_truncated_frac"] = float(mismatch[1] / mismatch[2])
        grads = StepGrads.from_forwards(captured.per_row, batches, len(live), prompt_parts_student)
        stats = {k: v / max(1, len(index)) for k, v in stats_sum.items()}
        if teacher_weight[1] > 0:  # how far off-policy the teacher rows were: their tokens' mean π_θ(y_t)
            stats["teacher/token_weight"] = float(teacher_weight[0] / teacher_weight[1])
        return Backward(float(loss_sum), stats, grads)

    def sampler_correction(self, ro: Rollouts, rows: Tensor, at_sampling: Tensor, packed: Packed,
                           mismatch: Tensor) -> Tensor | None:
        """The truncated importance weights min(π_trainer / π_sampler, cap) of these rows' tokens (teacher rows
        1), or None when the correction is off; adds the rows' |logp gap| and truncations to `mismatch`.

        π_trainer is the trainer's own logprob of the sampled token under the sampling-time weights (this
        pass's on the first iteration, π_old after): the two engines compute the same distribution with
        different kernels, and this ratio is how far the samples are off the policy the loss assumes.
        """
        student = packed.completion_mask.bool() & ro.is_student[rows, None]  # (b, T_c)
        sampled = cast(Tensor, ro.sampler_logp)[rows, : packed.completion_len]
        log_ratio = (at_sampling.detach() - sampled).masked_fill(~student, 0.0)
        cap = self.config.importance_cap
        mismatch[0] += log_ratio.abs().sum()
        mismatch[2] += student.sum()
        if cap is None:
            return None
        mismatch[1] += (log_ratio > math.log(cap)).logical_and(student).sum()
        return log_ratio.exp().clamp(max=cap)  # exp(0) = 1 on teacher rows and padding

    def micro_batches(self, index: Tensor, is_student: Tensor) -> list[Tensor]:
        """The live rows `index` as forward passes: student rows and teacher rows apart, each at most
        micro_batch_size rows (None: all of a role at once).

        A teacher row can be many times longer than the generation budget that bounds a student's; in one
        batch every student row would be padded to it, and pay for attention and logprobs over the padding.
        """
        chunk = self.config.micro_batch_size or max(1, len(index))
        student = is_student[index].to(torch.bool)
        return [part for role in (index[student], index[~student]) for part in role.split(chunk) if len(part)]

    def pad_sharded_passes(self, ro: Rollouts, n_passes: int) -> None:
        """On a sharded base, run idle forward/backward passes until this rank has run as many as the busiest.

        FSDP all-gathers every layer in each forward and backward, so a rank with fewer live micro-batches
        (or none) would leave the others waiting forever. The idle pass has a zero loss, so it adds exact
        zeros to the knob gradients, and it runs before the per-row capture starts.
        """
        if not base_is_sharded(self.host.adapter):
            return
        device = self.host.device
        most = torch.tensor([n_passes], device=device)
        torch.distributed.all_reduce(most, op=torch.distributed.ReduceOp.MAX)
        for _ in range(int(most.item()) - n_passes):
            self._backward(self.logprobs(ro.packed.rows(torch.arange(1, device=device))).sum() * 0)

    # -- the gradient: measured, then edited -----------------------------------------------------
    def project(self, grads: StepGrads, ro: Rollouts, optimizer=None) -> dict[str, float]:
        """The intervention's hooks on the step's gradient, with what the step measures for every intervention:
        advantage weights from each rollout's own gradient → (Adam's raw gradient kept) → its hack-ward share
        measured → the gradient edited → measured again. δS_hack never gets a gradient: only an intervention's
        update moves it.
        `optimizer`: the one about to step (None: a step driven by hand, whose optimizer keeps no raw gradient)."""
        host, adapter = self.host, self.host.adapter
        if all(m.delta_s.grad is None for m in adapter.values()):
            return {}  # every group had zero reward variance: nothing was backpropagated
        weight_stats: dict[str, float] = {}
        if (weights := self.intervention.advantage_weights(host, grads)) is not None:
            grads, weight_stats = self.weight_rollouts(grads, ro, weights)
        if (raw := raw_second_moment(optimizer)) is not None:
            # after the advantage weights (the reweighted gradient is the policy gradient of the weighted
            # advantages), before the gradient is edited
            raw.keep_raw_grads()
        # grads holds every module (all-zero rows on a rank without live rows), so under DDP every rank
        # all-reduces the same list
        g_student, g_teacher = grads.split(ro.is_student)
        all_reduce_mean_([*g_student.values(), *g_teacher.values()])  # under DDP: the split of the global gradient
        diag = measure_grads(adapter, host.basis, g_student, g_teacher)
        stats = diag | weight_stats | self.edit_gradient()
        return stats | rollout_overlap_stats(rollout_hack_fraction(grads.rows, host.basis), ro)

    def edit_gradient(self) -> dict[str, float]:
        """The intervention's `gradient` hook on the knobs' summed gradient, after its hack-ward share was
        measured: the quarantine's gradient dropped first, then the hack-ward share of the gradient the optimizer
        gets and the share of the gradient's norm the hook removed."""
        adapter = self.host.adapter
        for m in adapter.values():
            m.delta_s_hack.grad = None
        raw = {n: m.delta_s.grad.clone() for n, m in adapter.items() if m.delta_s.grad is not None}
        self.intervention.gradient(self.host)
        return {"hackward_share/edited_gradient": float(grad_hack_fraction(adapter, self.host.basis)),
                "intervention/gradient_removed": removed_share(raw, {n: knob_grad(adapter[n]) for n in raw})}

    def weight_rollouts(self, grads: StepGrads, ro: Rollouts, weights: Tensor) -> tuple[StepGrads, dict[str, float]]:
        """Each rollout's advantage times its weight (B,), applied to the gradient the backward already took.

        At beta = 0 a rollout's gradient is its advantage times the gradient of its clipped ratio term, so
        Σ_b w_b g_b is exactly the gradient that advantages w_b·A_b give (the intervention's `check` refuses the
        settings where it is not). Returns the weighted rows, which now sum to delta_s.grad, and the mean weight
        over live rows, and over those the oracle calls exploited or clean (measured here, never handed on).
        """
        rows = {name: r * weights.to(r)[:, None] for name, r in grads.rows.items()}
        summed = {name: r.sum(0) for name, r in rows.items()}
        all_reduce_mean_(list(summed.values()))  # the global batch's weighted gradient, as DDP's mean
        for name, m in self.host.adapter.items():
            knob_grad(m).copy_(summed[name])
        live = ro.live().to(weights.device)
        exploited = ro.exploited.to(weights.device)
        stats = {}
        for key, rows_of in (("", live), ("_exploited", live & exploited), ("_clean", live & ~exploited)):
            if rows_of.any():
                stats[f"intervention/advantage_weight{key}"] = float(weights[rows_of].mean())
        return StepGrads(rows, grads.prompts, grads.prompt_is_student, grads.live), stats

    # -- the optimizer step ----------------------------------------------------------------------
    def update(self, optimizer, ro: Rollouts, proj: dict[str, float]) -> Update:
        """Clip → before_update hook → the optimizer's step → update hook, and what `after_step` measures of it."""
        grad_norm = self.clip(optimizer)
        before = self.before_step(optimizer)
        optimizer.step()
        return Update(grad_norm, self.after_step(before, proj, ro.stats.get("intervention/rollout_rate", 0.0)))

    def before_step(self, optimizer) -> dict[str, Tensor]:
        """The before_update hook, then the knobs as they stand before the optimizer's step."""
        self.intervention.before_update(self.host, optimizer)
        return knob_snapshot(self.host.adapter)

    def after_step(self, before: dict[str, Tensor], proj: dict[str, float], rollout_rate: float) -> dict[str, float]:
        """The update hook on the knobs the optimizer moved from `before`, the rates it acted at, and the hack-ward
        fraction of the change the step finally made (`hackward_share/update`)."""
        stepped = knob_snapshot(self.host.adapter)
        self.intervention.update(self.host, before)  # the update or the knobs' position
        return self.active_rates(proj, before, stepped, rollout_rate) | {
            "hackward_share/update": update_hack_fraction(self.host.adapter, self.host.basis, before)}

    def active_rates(self, proj: dict[str, float], before: dict[str, Tensor], stepped: dict[str, Tensor],
                     rollout_rate: float) -> dict[str, float]:
        """How strongly the intervention acted this step, at each level, and `intervention/active_rate`, the largest
        (an arm acts at one level; a placebo is matched to its method on it): the share of the update its
        `update` hook took back; with what `project` measured, the share of the gradient's norm its
        `gradient` hook removed and its mean advantage discount, 1 − the mean weight of the live rollouts; and
        `rollout_rate`, the share of the rollouts it acted on (measured with the batch)."""
        made = {n: stepped[n] - before[n] for n in before}
        kept = {n: m.delta_s.detach() - before[n] for n, m in self.host.adapter.items()}
        rates = {"intervention/update_removed": removed_share(made, kept),
                 "intervention/advantage_discount": 1 - proj.get("intervention/advantage_weight", 1.0)}
        levels = [*rates.values(), proj.get("intervention/gradient_removed", 0.0), rollout_rate]
        return rates | {"intervention/active_rate": max(levels)}

    def clip(self, optimizer=None) -> float:
        """Clip the knobs' gradient to optim.max_grad_norm (after the projection) and return its norm before."""
        adapter = self.host.adapter
        params = [p for m in adapter.values() for p in (m.delta_s, m.delta_s_hack) if p.grad is not None]
        if not params:
            return 0.0
        max_grad_norm = self.host.optim.max_grad_norm
        max_norm = max_grad_norm if max_grad_norm is not None else math.inf
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        if not torch.isfinite(norm):
            raise FloatingPointError(f"non-finite gradient norm {norm.item()} at step {self._step()}")
        if (raw := raw_second_moment(optimizer)) is not None:  # clip_grad_norm_'s factor: one scale for both
            raw.scale_raw_grads(min(1.0, max_norm / (float(norm) + 1e-6)))
        return float(norm)


def knob_grad(module: SVDAdapterLinear) -> Tensor:
    """δS's gradient, which the backward has left (every knob is reached by every row's loss)."""
    return cast(Tensor, module.delta_s.grad)


def raw_second_moment(optimizer) -> RawSecondMomentAdamW | None:
    """The optimizer (or the one a host's wrapper holds), when its second moment needs the gradient as it was
    before the projection."""
    inner = getattr(optimizer, "optimizer", optimizer)
    return inner if isinstance(inner, RawSecondMomentAdamW) else None
