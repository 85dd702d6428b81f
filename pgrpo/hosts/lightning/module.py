"""The projected-GRPO LightningModule: a frozen causal LM, its SVD adapter, one step per batch.

Lightning glue around the step engine (pgrpo/step/engine.py, which knows no Lightning): loading and sharding the
model, V at train start, the optimizer and its schedule, checkpoints. `training_step` reads like the method
(docs/design.md#the-training-step): generate → grade → assemble (teacher rows, rewards, advantages) → backward
(student and teacher gradients split in the same pass) → project → update (clip, optimizer step) → scheduler
step. It returns the step's numbers; callbacks log them.
"""

import random
import time
import warnings
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import replace
from pathlib import Path

import lightning as L
from lightning.pytorch.utilities import move_data_to_device
import torch
from typing_extensions import override

from pgrpo.directions.basis import (
    RUN_POOL, ExtractionConfig, basis_args, cached_basis_path, contrastive_pairs, load_or_extract_basis,
    rank_zero_basis,
)
from pgrpo.directions.extraction import HackBasis
from pgrpo.env import Problem, RewardConfig
from pgrpo.env.pairs import ContrastivePair
from pgrpo.env.time_limits import FLOOR_S
from pgrpo.step.batch import PromptGroup
from pgrpo.interventions.base import Intervention
from pgrpo.interventions.vanilla import Vanilla
from pgrpo.model.adapter import DEFAULT_TARGETS, attach_adapter, base_is_sharded, shard_base
from pgrpo.model.load import check_same_base, hack_openings, load_model_and_tokenizer
from pgrpo.records.cache import cache_dir
from pgrpo.step.batch import Rollouts
from pgrpo.step.engine import GRPOStep, StepConfig
from pgrpo.step.generation import GenerationConfig, Grading, Sampler, build_sampler
from pgrpo.step.loss import LossConfig
from pgrpo.step.optim import OptimConfig, build_optimizer, warmup_schedule
from pgrpo.step.projection import knob_stats

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
        step = StepConfig(advantage_scale, num_iterations, kl_every, logprob_chunk_size, micro_batch_size,
                          share_prompts, generation.importance_cap)
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
        self.policy: torch.nn.Module | None = None  # loaded by configure_model
        self.basis: HackBasis | None = None
        self._rollouts: Rollouts | None = None
        self._step_being_trained: int | None = None  # inside training_step: the step its numbers are logged at
        self.sampler: Sampler | None = None  # built with the policy
        # the step itself, which knows no Lightning: backward through the strategy (precision, DDP), and no DDP
        # sync per micro-batch (the knob gradients are all-reduced once, after the last)
        self.engine = GRPOStep(self, step, backward=self.manual_backward, no_sync=self._no_sync,
                               step=lambda: self.global_step)
        intervention.check(self)

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
        mesh = self.device_mesh  # set by Lightning's ModelParallelStrategy only: FSDP (configs/hardware/fsdp_cpu.yaml)
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
        return self.engine.config.share_prompts

    @property
    def micro_batch_size(self) -> int | None:
        return self.engine.config.micro_batch_size

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
    @property
    @override
    def global_step(self) -> int:
        """The step being trained, as RunView means it. Lightning's count moves on as the optimizer steps, so inside
        a training step, after that (the update hooks), it is one ahead of the step the numbers are logged at."""
        return super().global_step if self._step_being_trained is None else self._step_being_trained

    @override
    def training_step(self, batch: list[PromptGroup], batch_idx: int) -> dict:
        self._step_being_trained = self.trainer.global_step
        timer, engine = _Timer(), self.engine
        # with num_iterations > 1 a generated batch serves that many optimizer steps; its rollout numbers are
        # logged once, at the step that generated it, so no generation counts more than once in a curve
        fresh = self._rollouts is None or self.global_step % self.engine.config.num_iterations == 0
        if fresh:
            with timer("generate"):
                students = self.sampler.sample(batch)  # every prompt's G_s samples in one batched call
            with timer("grade"):
                grades = self.sampler.grade(batch, students)  # sandboxed, in parallel
            with timer("assemble"):
                self._rollouts = engine.assemble(batch, students, grades)  # + teacher rows → rewards → advantages
        ro = self._rollouts
        opt, sched = self.optimizers(), self.lr_schedulers()
        lr = sched.get_last_lr()[0]
        opt.zero_grad(set_to_none=True)
        with timer("backward"):
            loss, loss_stats, grads = engine.backward(ro)  # logprobs with grad → loss → one split backward
        with timer("project"):
            proj = engine.project(grads, ro, opt)
        with timer("optimizer"):
            grad_norm, update_stats = engine.update(opt, ro, proj)  # clip → step → the update hook
            sched.step()
        return {  # logged by the callbacks
            "metrics": {
                **(ro.stats if fresh else {}), **loss_stats, **proj, **update_stats, "loss": loss,
                "grad_norm": grad_norm, "lr": lr, **knob_stats(self.adapter, self.basis),
                **{f"time/{k}": v for k, v in timer.seconds.items()},
            },
            "samples": ro.samples if fresh else [],
        }

    @override
    def on_train_batch_end(self, outputs, batch, batch_idx: int) -> None:
        self._step_being_trained = None

    def _no_sync(self) -> AbstractContextManager:
        return getattr(self.trainer.strategy, "block_backward_sync", nullcontext)()

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
        if self._rollouts is not None and self.trainer.global_step % self.engine.config.num_iterations:
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
