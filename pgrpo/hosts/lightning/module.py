"""The projected-GRPO LightningModule: a frozen causal LM, its SVD adapter, one step per batch.

`training_step` reads like the method (docs/design.md#the-training-step): generate → grade → add
teacher rows → advantages → logprobs with grad → loss → backward (student and
teacher gradients split in the same pass) → project → clip → optimizer step →
scheduler step. It returns the step's numbers; callbacks log them.
"""

import math
import random
import time
import warnings
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from pathlib import Path

import lightning as L
from lightning.pytorch.utilities import move_data_to_device
import torch
from torch import Tensor
from typing_extensions import override

from pgrpo.model.adapter import (
    DEFAULT_TARGETS, all_reduce_knob_grads, all_reduce_mean_, attach_adapter, base_is_sharded, capture_row_grads,
    knobs_zeroed, merged_for_generation, shard_base,
)
from pgrpo.records.cache import cache_dir
from pgrpo.hosts.lightning.data import PromptGroup
from pgrpo.env import GradeResult, Problem, RewardConfig
from pgrpo.env.pairs import ContrastivePair
from pgrpo.env.time_limits import FLOOR_S
from pgrpo.directions.basis import (
    RUN_POOL, ExtractionConfig, basis_args, cached_basis_path, contrastive_pairs, load_or_extract_basis,
    rank_zero_basis,
)
from pgrpo.directions.extraction import HackBasis
from pgrpo.step.loss import (LossConfig, group_advantages, grpo_loss, teacher_advantages, teacher_token_weights,
                        token_logprobs)
from pgrpo.model.load import check_same_base, hack_openings, load_model_and_tokenizer
from pgrpo.step.optim import OptimConfig, RawSecondMomentAdamW, build_optimizer, warmup_schedule
from pgrpo.interventions.base import Intervention
from pgrpo.interventions.vanilla import Vanilla
from pgrpo.step.projection import (
    along_v, grad_hack_fraction, knob_snapshot, measure_grads, removed_share, rollout_hack_fraction,
    update_hack_fraction,
)
from pgrpo.step.batch import Rollouts, Samples, batch_stats, lay_out, logged_samples, rollout_overlap_stats
from pgrpo.step.generation import GenerationConfig, Grading, Sampler, build_sampler
from pgrpo.step.rollout import Packed
from pgrpo.step.step_grads import StepGrads

# The frozen base stays in eval mode on purpose (rollouts and logprobs must see the same network),
# and knob-only checkpoints after each optimizer step are what we want (docs/design.md#lightning-architecture).
warnings.filterwarnings("ignore", message=r"Found \d+ module\(s\) in eval mode")
warnings.filterwarnings("ignore", message=r"Using ModelCheckpoint with manual optimization")


class ProjectedGRPO(L.LightningModule):
    def __init__(
        self,
        model: str = "embedded",
        dtype: str = "float32",
        target_modules: list[str] = list(DEFAULT_TARGETS),
        max_rank: int | None = None,
        intervention: Intervention = Vanilla(),
        extraction: ExtractionConfig = ExtractionConfig(),
        loss: LossConfig = LossConfig(),
        advantage_scale: str = "none",
        num_iterations: int = 1,
        generation: GenerationConfig = GenerationConfig(),
        optim: OptimConfig = OptimConfig(),
        reward: RewardConfig = RewardConfig(),
        grade_timeout: float = FLOOR_S,
        logprob_chunk_size: int = 128,
        micro_batch_size: int | None = None,
        share_prompts: bool = True,
        kl_every: int = 10,
        grade_while_generating: bool | None = None,
    ):
        """
        Args:
            model: "embedded" (the built-in tiny model; "embedded-distinct" its twin whose hacks open per mode),
                a checkpoint directory, or a cached hub id.
            dtype: base weights' dtype (float32 | bfloat16 | float16); the knobs are always fp32.
            target_modules: Linear attribute names that get the SVD adapter.
            max_rank: keep only the top singular directions per Linear (None keeps all).
            intervention: how the run fights hacking, by class_path and init_args: any class of
                pgrpo/interventions/ (docs/configs.md lists each with its knobs; Vanilla measures V only).
            extraction: how V is built (pairs source, k, tau_axis, noise floor, held-out pairs).
            loss: PPO clip range, KL estimator and beta, reduction (drgrpo | grpo).
            advantage_scale: "none" (Dr.GRPO, A = R − mean), "group" (÷ group std), "batch" (÷ batch std).
            num_iterations: optimizer steps per generated batch (> 1 uses the sampling-time logprobs as π_old).
            generation: max_new_tokens, temperature, top_p of the student samples.
            optim: the knobs' optimizer (adamw | sgd), what Adam's second moment sees, warmup; max_grad_norm clips
                after the projection.
            reward: format bonus and pass reward (gt_correct never enters it; only an intervention that declares
                reads_oracle, an oracle skyline, is handed the oracle's verdict).
            grade_timeout: floor of each sandboxed run's wall budget in seconds; the oracle and the flawed grader
                each get their own budget, max(floor, 5 × the problem's measured canonical runtime), capped at 60 s.
            logprob_chunk_size: sequence chunk of the memory-efficient logprob pass.
            micro_batch_size: rows per forward/backward (None: the whole step at once).
            share_prompts: run each group's prompt once per logprob pass and hand its keys and values to the
                group's rows (the same numbers, a fraction of the work; off on a sharded base).
            kl_every: at beta = 0 the reference forward only serves the `kl` diagnostic, so it runs every this
                many steps (0: never); with beta > 0 it runs every step.
            grade_while_generating: send each completion to grading the step it ends, while the longer ones
                generate (None: only when generating on a GPU; on CPU cores the graders slow generation down by
                more than they save).
        """
        super().__init__()
        if advantage_scale not in ("none", "group", "batch"):
            raise ValueError(f"model.advantage_scale={advantage_scale!r}: expected none, group or batch")
        if num_iterations < 1:
            raise ValueError(f"model.num_iterations={num_iterations}: must be >= 1")
        if kl_every < 0:
            raise ValueError(f"model.kl_every={kl_every}: must be >= 0")
        self.save_hyperparameters(ignore=["intervention"])
        # kept as {class_path, init_args}, not the object: a checkpoint loads with weights_only, and the report,
        # eval and export read what the run was from it
        self.hparams["intervention"] = intervention.config()
        self.automatic_optimization = False
        self.strict_loading = False  # checkpoints hold the knobs, not the frozen base
        self.model_name = model
        self.intervention = intervention
        self.extraction = extraction
        self.loss_cfg = loss
        self.generation = generation
        self.optim = optim
        self.reward = reward
        intervention.check(self)
        self.policy: torch.nn.Module | None = None  # loaded by configure_model
        self.basis: HackBasis | None = None
        self._rollouts: Rollouts | None = None
        self.sampler: Sampler | None = None  # built with the policy

    # -- model -----------------------------------------------------------------------------------
    @override
    def configure_model(self) -> None:
        if self.policy is not None:
            return
        hp = self.hparams
        self.policy, self.tokenizer = load_model_and_tokenizer(hp.model, hp.dtype, self.device)
        self.adapter = attach_adapter(self.policy, tuple(hp.target_modules), hp.max_rank)
        self.sampler = build_sampler(self.policy, self.adapter, self.tokenizer, self.generation,
                                     Grading(self.reward, hp.grade_timeout), model=hp.model, dtype=hp.dtype,
                                     grade_while_generating=hp.grade_while_generating)
        mesh = self.device_mesh  # set by Lightning's ModelParallelStrategy only: FSDP (configs/fsdp_cpu.yaml)
        if mesh is not None:
            if mesh["tensor_parallel"].size() != 1:
                raise ValueError("pgrpo shards the base with FSDP only: set the strategy's tensor_parallel_size: 1 "
                                 "and data_parallel_size to the number of processes")
            shard_base(self.policy, self.adapter, mesh["data_parallel"])

    @override
    def on_fit_start(self) -> None:
        if self.basis is None:  # a resumed run restored V from its checkpoint
            self.basis = self.extract_basis(self.trainer.datamodule.extraction_problems)
        self.basis = self.basis.to(self.device)
        if self._rollouts is not None:  # a resume inside a num_iterations cycle restored its batch on the CPU
            self._rollouts = Rollouts.from_tensors(self._rollouts.tensors(), self.device)

    @override
    def on_train_start(self) -> None:
        # after every callback's on_train_start, as the negative-control callback that this replaced ran; a resumed
        # run's checkpoint already holds the V the intervention chose
        self.basis = self.intervention.basis(self, self.basis).to(self.device)
        self.intervention.prepare(self)

    def extract_basis(self, problems: list[Problem], control: str = "none", extraction: ExtractionConfig | None = None,
                      cached: bool = True) -> HackBasis:
        """V of the current policy (δS_hack zeroed) for this run's adapter; the negative controls and the V
        refresh call it too. cached=False re-extracts against the trained knobs (the cache knows only the base).

        Under DDP/FSDP every rank gets rank 0's V, bit for bit: ranks that extracted on their own could differ
        in the last bits, and the gradient edit must be the same everywhere."""
        extraction = self.resolved_extraction(extraction)
        args = basis_args(self.model_name, extraction, self.generation.temperature, control)
        cache = cache_dir() / "bases" if cached else None

        def load_or_extract(cache: Path | None) -> HackBasis:
            return load_or_extract_basis(self.policy, self.adapter, self.tokenizer, problems, cache=cache, **args)

        if self._trainer is None or self.trainer.world_size == 1:
            return load_or_extract(cache)
        return rank_zero_basis(
            self.trainer.strategy, self.global_rank, base_is_sharded(self.adapter), load_or_extract, cache,
            lambda cache: cached_basis_path(self.adapter, self.tokenizer, problems, cache=cache, **args),
        ).to(self.device)

    # what an intervention's hooks read of the run besides its attributes (interventions/base.py: RunView)
    @property
    def share_prompts(self) -> bool:
        return self.hparams.share_prompts

    @property
    def micro_batch_size(self) -> int | None:
        return self.hparams.micro_batch_size

    @property
    def extraction_problems(self) -> list[Problem]:
        return self.trainer.datamodule.extraction_problems

    @property
    def train_problems(self) -> list[Problem]:
        return self.trainer.datamodule.train_problems

    @property
    def n_student(self) -> int:
        return self.trainer.datamodule.n_student

    def log_at_start(self, metrics: dict[str, float]) -> None:
        for logger in self.trainer.loggers:
            logger.log_metrics(metrics, step=self.trainer.global_step)

    def extraction_pairs(self) -> list[ContrastivePair]:
        """The contrastive pairs V is extracted from (the last extraction.n_heldout of them held out)."""
        return contrastive_pairs(self.trainer.datamodule.extraction_problems, self.resolved_extraction(),
                                 openings=hack_openings(self.model_name))

    def resolved_extraction(self, extraction: ExtractionConfig | None = None) -> ExtractionConfig:
        """The extraction settings with `pairs: pool` resolved to this run's teacher pool directory."""
        extraction = extraction or self.extraction
        if extraction.pairs == RUN_POOL:
            pool = self.trainer.datamodule.pool
            if pool is None:
                raise ValueError(f"model.extraction.pairs={RUN_POOL!r} mines the run's teacher pool, but this run has "
                                 f"none (data.mix_ratio is 0): give a pool directory or a pairs file instead")
            extraction = replace(extraction, pairs=str(pool.path))
        return extraction

    @override
    def configure_optimizers(self):
        opt = build_optimizer([m.delta_s for m in self.adapter.values()],
                              [m.delta_s_hack for m in self.adapter.values()], self.optim)
        return [opt], [warmup_schedule(opt, self.optim.warmup_steps)]

    # -- the step --------------------------------------------------------------------------------
    @override
    def training_step(self, batch: list[PromptGroup], batch_idx: int) -> dict:
        timer = _Timer()
        # with num_iterations > 1 a generated batch serves that many optimizer steps; its rollout numbers are
        # logged once, at the step that generated it, so no generation counts more than once in a curve
        fresh = self._rollouts is None or self.global_step % self.hparams.num_iterations == 0
        if fresh:
            with timer("generate"):
                students = self.sampler.sample(batch)  # every prompt's G_s samples in one batched call
            with timer("grade"):
                grades = self.sampler.grade(batch, students)  # sandboxed, in parallel
            with timer("assemble"):
                self._rollouts = self.assemble(batch, students, grades)  # + teacher rows → rewards → advantages
        ro = self._rollouts
        opt, sched = self.optimizers(), self.lr_schedulers()
        lr = sched.get_last_lr()[0]
        opt.zero_grad(set_to_none=True)
        with timer("backward"):
            loss, loss_stats, grads = self.split_backward(ro)  # logprobs with grad → loss → one split backward
        with timer("project"):
            proj = self.project_grads(grads, ro)
        with timer("optimizer"):
            grad_norm = self.clip_knob_grads()
            self.intervention.before_update(self, opt)
            before = knob_snapshot(self.adapter)
            opt.step()
            stepped = knob_snapshot(self.adapter)
            self.intervention.update(self, before)  # the update or the knobs' position
            proj |= self.active_rates(proj, before, stepped)
            # the hack-ward fraction of the change the step finally made
            proj["proj/cout_update"] = update_hack_fraction(self.adapter, self.basis, before)
            sched.step()
        return {  # logged by the callbacks
            "metrics": {
                **(ro.stats if fresh else {}), **loss_stats, **proj, "loss": loss, "grad_norm": grad_norm, "lr": lr,
                **self.knob_stats(), **{f"time/{k}": v for k, v in timer.seconds.items()},
            },
            "samples": ro.samples if fresh else [],
        }

    def assemble(self, groups: list[PromptGroup], students: Samples, grades: list[GradeResult]) -> Rollouts:
        """Each group: its G_s graded student rows then its G_t cached teacher rows, packed, with advantages."""
        # a sharded base must run the same forwards on every rank, so its rows keep their own prompts
        share = self.hparams.share_prompts and not base_is_sharded(self.adapter)
        rows = lay_out(groups, students, grades, self.tokenizer, share)
        packed = rows.packed.to(self.device)
        # exploited is the oracle's verdict: only an intervention that declares it reads it is handed it
        oracle = rows.exploited.view_as(rows.rewards) if self.intervention.reads_oracle else None
        edit = self.intervention.rewards(self, rows.rewards, packed, oracle)
        # the rollouts the intervention acted on: a reward edited or screened out, or an advantage edited
        acted = edit.rewards != rows.rewards
        if edit.keep is not None:
            acted |= ~edit.keep.to(torch.bool)
        advantages, zero_std = group_advantages(edit.rewards, self.hparams.advantage_scale, keep=edit.keep)
        normalised = advantages.flatten()
        advantages = self.intervention.advantages(self, normalised.clone())
        acted = acted.flatten() | (advantages != normalised)
        # the harness's treatment of the off-policy teacher rows (model.loss.teacher_advantage), after the arm's
        advantages = teacher_advantages(advantages, rows.is_student, self.loss_cfg)
        old_logp, ref_logp = self.sampling_logprobs(packed, rows.is_student.to(self.device))
        stats = batch_stats(groups, students, grades, rows, edit.rewards, zero_std, acted, edit.flagged) | edit.stats
        return Rollouts(packed, rows.is_student.to(self.device), rows.exploited.to(self.device),
                        advantages.to(self.device), edit.rewards, zero_std, old_logp, ref_logp,
                        None if rows.sampler_logp is None else rows.sampler_logp.to(self.device), stats,
                        logged_samples(groups, students, grades))

    @torch.no_grad()
    def sampling_logprobs(self, packed: Packed, is_student: Tensor) -> tuple[Tensor | None, Tensor | None]:
        """(π_old, π_ref) of every row: the sampling policy's logprobs when a batch serves several optimizer steps,
        and the reference's (knobs zeroed) when the loss or the `kl` diagnostic needs them this step."""
        old_logp = ref_logp = None
        if self.hparams.num_iterations > 1:
            with merged_for_generation(self.adapter):  # folded once for all passes: base-model speed
                old_logp = self.row_logprobs(packed, is_student)
        kl_every = self.hparams.kl_every
        if self.loss_cfg.beta > 0 or (kl_every and self.global_step % kl_every == 0):
            # the free reference model: same weights with the knobs at zero (merged: base-model speed)
            with knobs_zeroed(self.adapter), merged_for_generation(self.adapter):
                ref_logp = self.row_logprobs(packed, is_student)
        return old_logp, ref_logp

    def logprobs(self, packed: Packed, with_entropy: bool = False):
        logp, entropy = token_logprobs(self.policy, packed.input_ids, packed.attention_mask, packed.completion_len,
                                       self.hparams.logprob_chunk_size, self.generation.temperature, with_entropy,
                                       packed.prompt_of_row)
        return (logp, entropy) if with_entropy else logp

    def row_logprobs(self, packed: Packed, is_student: Tensor) -> Tensor:
        """(B, T_c) logprobs of every row without grad, run as the backward's micro-batches (0 on padding)."""
        out = torch.zeros(packed.completion_mask.shape, device=self.device)
        for rows in self.micro_batches(torch.arange(len(is_student), device=self.device), is_student):
            part = packed.rows(rows)
            out[rows, : part.completion_len] = self.logprobs(part)
        return out

    def split_backward(self, ro: Rollouts):
        """Loss over the rows that carry signal, one backward, per-row knob gradients captured on the way."""
        group_size = ro.rewards.shape[1]
        live = (~ro.zero_std).repeat_interleave(group_size).to(self.device)  # zero-variance groups are skipped
        index = live.nonzero().flatten()
        total_rows = ro.rewards.numel()  # Dr.GRPO's fixed denominator counts every row of the step
        loss_sum, stats_sum = torch.zeros((), device=self.device), {}
        batches = self.micro_batches(index, ro.is_student)
        # Under DDP the backward passes stay local and the knob gradients are averaged once below, so ranks may
        # run different numbers of micro-batches, or none (all groups zero-variance), without hanging each other.
        no_sync = getattr(self.trainer.strategy, "block_backward_sync", nullcontext)
        self._pad_sharded_passes(ro, len(batches))
        prompt_parts_student = []  # per micro-batch with shared prompts: whether each shared prompt is a student's
        mismatch = torch.zeros(3, device=self.device)  # Σ|Δlogp|, Σ IS-weight truncated, student tokens
        teacher_weight = torch.zeros(2, device=self.device)  # Σ teacher token weights, teacher tokens
        with capture_row_grads(self.adapter) as captured, no_sync():
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
                token_weight = teacher_token_weights(logp, ro.is_student[rows], self.loss_cfg)
                if token_weight is not None:
                    teacher_tokens = packed.completion_mask * ~ro.is_student[rows, None]
                    teacher_weight += torch.stack([(token_weight * teacher_tokens).sum(), teacher_tokens.sum()])
                if ro.sampler_logp is not None:
                    correction = self.sampler_correction(ro, rows, logp if old is None else old, packed, mismatch)
                    if correction is not None:
                        token_weight = correction if token_weight is None else token_weight * correction
                loss, stats = grpo_loss(logp, old, ref, ro.advantages[rows], packed.completion_mask, self.loss_cfg,
                                        denominator_rows=total_rows, max_new_tokens=self.generation.max_new_tokens,
                                        token_weight=token_weight)
                if not torch.isfinite(loss):
                    raise FloatingPointError(f"non-finite loss {loss.item()} at step {self.global_step}")
                self.manual_backward(loss)
                loss_sum += loss.detach()
                for k, v in stats.items():
                    stats_sum[k] = stats_sum.get(k, 0.0) + float(v) * len(rows)
        all_reduce_knob_grads(self.adapter)  # the global batch's gradient, the same on every rank
        if mismatch[2] > 0:  # logged with the rollouts: once per generated batch
            ro.stats["gen/logprob_gap"] = float(mismatch[0] / mismatch[2])
            if self.generation.importance_cap is not None:
                ro.stats["gen/is_truncated_frac"] = float(mismatch[1] / mismatch[2])
        grads = StepGrads.from_forwards(captured.per_row, batches, len(live), prompt_parts_student)
        stats = {k: v / max(1, len(index)) for k, v in stats_sum.items()}
        if teacher_weight[1] > 0:  # how far off-policy the teacher rows were: their tokens' mean π_θ(y_t)
            stats["teacher/token_weight"] = float(teacher_weight[0] / teacher_weight[1])
        return float(loss_sum), stats, grads

    def sampler_correction(self, ro: Rollouts, rows: Tensor, at_sampling: Tensor, packed: Packed,
                           mismatch: Tensor) -> Tensor | None:
        """The truncated importance weights min(π_trainer / π_sampler, cap) of these rows' tokens (teacher rows
        1), or None when the correction is off; adds the rows' |logp gap| and truncations to `mismatch`.

        π_trainer is the trainer's own logprob of the sampled token under the sampling-time weights (this
        pass's on the first iteration, π_old after): the two engines compute the same distribution with
        different kernels, and this ratio is how far the samples are off the policy the loss assumes.
        """
        student = packed.completion_mask.bool() & ro.is_student[rows, None]  # (b, T_c)
        sampled = ro.sampler_logp[rows, : packed.completion_len]
        log_ratio = (at_sampling.detach() - sampled).masked_fill(~student, 0.0)
        cap = self.generation.importance_cap
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
        chunk = self.hparams.micro_batch_size or max(1, len(index))
        student = is_student[index].to(torch.bool)
        return [part for role in (index[student], index[~student]) for part in role.split(chunk) if len(part)]

    def _pad_sharded_passes(self, ro: Rollouts, n_passes: int) -> None:
        """On a sharded base, run idle forward/backward passes until this rank has run as many as the busiest.

        FSDP all-gathers every layer in each forward and backward, so a rank with fewer live micro-batches
        (or none) would leave the others waiting forever. The idle pass has a zero loss, so it adds exact
        zeros to the knob gradients, and it runs before the per-row capture starts.
        """
        if not base_is_sharded(self.adapter):
            return
        most = torch.tensor([n_passes], device=self.device)
        torch.distributed.all_reduce(most, op=torch.distributed.ReduceOp.MAX)
        for _ in range(int(most.item()) - n_passes):
            self.manual_backward(self.logprobs(ro.packed.rows(torch.arange(1, device=self.device))).sum() * 0)

    def project_grads(self, grads: StepGrads, ro: Rollouts) -> dict[str, float]:
        """The intervention's hooks on the step's gradient, with what the step measures for every intervention:
        advantage weights from each rollout's own gradient → (Adam's raw gradient kept) → cin measured → the
        gradient edited → cout measured. δS_hack never gets a gradient: only an intervention's update moves it."""
        if all(m.delta_s.grad is None for m in self.adapter.values()):
            return {}  # every group had zero reward variance: nothing was backpropagated
        weight_stats = {}
        if (weights := self.intervention.advantage_weights(self, grads)) is not None:
            grads, weight_stats = self.weight_rollouts(grads, ro, weights)
        if (opt := self.raw_gradient_optimizer()) is not None:
            # after the advantage weights (the reweighted gradient is the policy gradient of the weighted
            # advantages), before the gradient is edited
            opt.keep_raw_grads()
        # grads holds every module (all-zero rows on a rank without live rows), so under DDP every rank
        # all-reduces the same list
        g_student, g_teacher = grads.split(ro.is_student)
        all_reduce_mean_([*g_student.values(), *g_teacher.values()])  # under DDP: the split of the global gradient
        diag = measure_grads(self.adapter, self.basis, g_student, g_teacher)
        for m in self.adapter.values():
            m.delta_s_hack.grad = None
        raw = {n: m.delta_s.grad.clone() for n, m in self.adapter.items()}
        self.intervention.gradient(self)
        diag["cout"] = grad_hack_fraction(self.adapter, self.basis)  # the gradient the optimizer gets
        weight_stats["intervention/gradient_removed"] = removed_share(
            raw, {n: m.delta_s.grad for n, m in self.adapter.items()})
        stats = {f"proj/{k}": float(v) for k, v in diag.items() if not isinstance(v, dict)}
        return stats | weight_stats | rollout_overlap_stats(rollout_hack_fraction(grads.rows, self.basis), ro)

    def active_rates(self, proj: dict[str, float], before: dict[str, Tensor], stepped: dict[str, Tensor]) -> dict:
        """How strongly the intervention acted this step, at each level, and `intervention/active_rate`, the largest
        (an arm acts at one level; a placebo is matched to its method on it): the share of the update its
        `update` hook took back; with what project_grads measured, the share of the gradient's norm its
        `gradient` hook removed and its mean advantage discount, 1 − the mean weight of the live rollouts (the
        rollouts it acted on are measured with the batch, `intervention/rollout_rate`)."""
        made = {n: stepped[n] - before[n] for n in before}
        kept = {n: m.delta_s.detach() - before[n] for n, m in self.adapter.items()}
        rates = {"intervention/update_removed": removed_share(made, kept),
                 "intervention/advantage_discount": 1 - proj.get("proj/advantage_weight", 1.0)}
        levels = [*rates.values(), proj.get("intervention/gradient_removed", 0.0),
                  self._rollouts.stats.get("intervention/rollout_rate", 0.0)]
        return rates | {"intervention/active_rate": max(levels)}

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
        for name, m in self.adapter.items():
            m.delta_s.grad.copy_(summed[name])
        live = (~ro.zero_std).repeat_interleave(ro.rewards.shape[1]).to(weights.device)
        exploited = ro.exploited.to(weights.device)
        stats = {}
        for key, rows_of in (("", live), ("_exploited", live & exploited), ("_clean", live & ~exploited)):
            if rows_of.any():
                stats[f"proj/advantage_weight{key}"] = float(weights[rows_of].mean())
        return StepGrads(rows, grads.prompts, grads.prompt_is_student), stats

    def clip_knob_grads(self) -> float:
        params = [p for m in self.adapter.values() for p in (m.delta_s, m.delta_s_hack) if p.grad is not None]
        if not params:
            return 0.0
        max_norm = self.optim.max_grad_norm if self.optim.max_grad_norm is not None else math.inf
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        if not torch.isfinite(norm):
            raise FloatingPointError(f"non-finite gradient norm {norm.item()} at step {self.global_step}")
        if (opt := self.raw_gradient_optimizer()) is not None:  # clip_grad_norm_'s factor: one scale for both
            opt.scale_raw_grads(min(1.0, max_norm / (float(norm) + 1e-6)))
        return float(norm)

    def raw_gradient_optimizer(self) -> RawSecondMomentAdamW | None:
        """The optimizer, when its second moment needs the gradient as it was before the projection."""
        if self._trainer is None:  # a step driven by hand, outside a fit
            return None
        opt = getattr(self.optimizers(), "optimizer", None)  # none configured
        return opt if isinstance(opt, RawSecondMomentAdamW) else None

    def knob_stats(self) -> dict[str, float]:
        """‖δS‖, ‖δS_hack‖ and where both sit along V (`along_v`): the drift a biased projection shows first."""
        ds = torch.cat([m.delta_s.detach().flatten() for m in self.adapter.values()])
        dh = torch.cat([m.delta_s_hack.detach().flatten() for m in self.adapter.values()])
        return {"adapter/delta_s_norm": float(ds.norm()), "adapter/delta_s_hack_norm": float(dh.norm()),
                **along_v(self.adapter, self.basis)}

    # -- checkpoints: knobs, V and RNG state; never the frozen base --------------------------------
    @override
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        # Every tensor goes to the host: a GPU run's checkpoint then loads with a plain torch.load where there is no
        # GPU (a laptop, a CPU eval). Resuming puts them back on the device; the values are the same bits.
        checkpoint["state_dict"] = {k: v.detach().cpu() for k, v in checkpoint["state_dict"].items()
                                    if k.endswith((".delta_s", ".delta_s_hack"))}
        host = self.basis.to("cpu")
        checkpoint["pgrpo_basis"] = {"V": host.V, "sigma": host.sigma, "meta": host.meta}
        if "optimizer_states" in checkpoint:  # new containers: the live optimizer keeps its device state
            checkpoint["optimizer_states"] = move_data_to_device(checkpoint["optimizer_states"], "cpu")
        if self._rollouts is not None and self.global_step % self.hparams.num_iterations:
            # inside a num_iterations cycle the next steps reuse this batch: a resume must not regenerate it
            checkpoint["pgrpo_rollouts"] = move_data_to_device(self._rollouts.tensors(), "cpu")
        # plain tuples and tensors only, so Lightning's weights_only checkpoint loading accepts them
        checkpoint["pgrpo_rng"] = {
            "python": random.getstate(), "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        }

    @override
    def on_load_checkpoint(self, checkpoint: dict) -> None:
        b = checkpoint["pgrpo_basis"]
        # a resumed run goes on from these knobs and this V: on another base they would train something else
        path = self._trainer.ckpt_path if self._trainer is not None else None
        check_same_base(b["meta"].get("model_id"), self.model_name,
                        f"resuming from checkpoint {path}" if path else "resuming from a checkpoint")
        self.basis = HackBasis(b["V"], b["sigma"], b["meta"])
        if "pgrpo_rollouts" in checkpoint:
            self._rollouts = Rollouts.from_tensors(checkpoint["pgrpo_rollouts"])
        rng = checkpoint["pgrpo_rng"]
        random.setstate(rng["python"])
        torch.set_rng_state(rng["torch"])
        if rng["cuda"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(rng["cuda"])


class _Timer:
    def __init__(self):
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str):
        start = time.perf_counter()
        yield
        self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start
