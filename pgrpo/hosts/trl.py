"""pgrpo's interventions inside TRL's GRPOTrainer: the same classes, a second host.

The hooks see this host through `TRLRunView`, the same typed view (`RunView`) `ProjectedGRPO` gives them. TRL
samples, scores and steps; pgrpo adds, at the points TRL's maintainers leave open:

    rewards(view, rewards, packed, oracle)  `_calculate_rewards`, after the reward functions scored the
                                            completions, on each process's own groups (a screened row's reward is
                                            NaN: TRL leaves it out of its group's mean and std and gives it
                                            advantage 0, as pgrpo's `keep` does)
    advantages(view, advantages)            `_generate_and_score_completions`, after TRL's normalisation
    gradient(view), before_update(...)      `on_pre_optimizer_step` (a TrainerCallback), after the gradient's
                                            all-reduce: the knobs' gradient is edited, then clipped (pgrpo's order;
                                            TRL's own clip is off)
    update(view, before)                    `on_optimizer_step`

A TRL user composes the pieces with their own model and data: `attach` (the adapter on their model, V, the
intervention prepared), `GraderReward` (pgrpo's grader as a reward function, standalone), `InterventionGRPOTrainer`
(a GRPOTrainer with the hooks); `build_trainer` is the one-line path built from them. The measuring half alone,
for any GRPO run, is `pgrpo.hosts.monitor.HackMonitor`.

What cannot run here is refused, not faked: teacher rows (TRL samples every row of a group from the policy),
an advantage weight read from each rollout's own gradient at every step (adv_gate: TRL's backward keeps no
per-rollout gradient), a reward-editing arm on more than one process when a group's rows are split across
processes (the hook reads a group together), and TRL's vLLM sampling (its weight sync would hand vLLM the base
weights, not the adapted ones). What an intervention measures once before the first step (a placebo's strength,
erase's start rate) is measured by pgrpo's own step engine on the same policy (`TRLRunView.engine`,
pgrpo/step/engine.py).

    pip install -e ".[trl]"
    trainer = build_trainer(Erase(), GRPOConfig(output_dir="out", max_steps=5, ...))
    trainer.train()
"""

from dataclasses import dataclass, field, replace

import torch
from torch import Tensor, nn
from torch.nn.attention import sdpa_kernel

from pgrpo.model.adapter import DEFAULT_TARGETS, SVDAdapterLinear, attach_adapter
from pgrpo.step.batch import detector_stats, student_rates
from pgrpo.directions.basis import (ExtractionConfig, basis_args, contrastive_pairs, load_or_extract_basis,
                                    rank_zero_basis)
from pgrpo.records.cache import cache_dir
from pgrpo.chat import render_chat
from pgrpo.hosts.lightning.data import held_out
from pgrpo.hosts.monitor import HackMonitor, eval_mode, rollout_rows
from pgrpo.env import NO_LOOPHOLE, GradeResult, Problem, RewardConfig, load_problems
from pgrpo.env.prompts import build_messages
from pgrpo.env.pairs import ContrastivePair
from pgrpo.env.time_limits import FLOOR_S
from pgrpo.directions.extraction import HackBasis
from pgrpo.step.engine import GRPOStep, StepConfig
from pgrpo.step.generation import GenerationConfig, Grading, HFSampler, Sampler
from pgrpo.interventions.base import Intervention
from pgrpo.step.loss import GRADIENT_ATTENTION, LossConfig
from pgrpo.model.load import hack_openings, load_model_and_tokenizer
from pgrpo.step.optim import OptimConfig
from pgrpo.step.rollout import SamplingConfig

try:
    from accelerate.utils import broadcast_object_list, gather, gather_object
    from datasets import Dataset
    from transformers import PreTrainedTokenizerBase
    from trl import GRPOConfig, GRPOTrainer
except ImportError as e:  # the optional extra
    raise ImportError('pgrpo.hosts.trl needs TRL: pip install -e ".[trl]"') from e


class NotHosted(ValueError):
    """What an intervention or a setting asks of its host that TRL's GRPOTrainer cannot give."""


@dataclass
class TRLRunView:
    """The run as an intervention's hooks see it (RunView), inside TRL's GRPOTrainer."""

    policy: nn.Module
    adapter: dict[str, SVDAdapterLinear]
    basis: HackBasis
    tokenizer: PreTrainedTokenizerBase
    extraction: ExtractionConfig
    generation: SamplingConfig  # the temperature TRL samples at, which V's extraction and the detectors score at
    sampler: Sampler  # the base policy's rollouts a detector's placebo is matched on (never TRL's own)
    train_problems: list[Problem]
    extraction_problems: list[Problem]
    n_student: int
    model_name: str
    optim: OptimConfig = field(default_factory=OptimConfig)
    loss_cfg: LossConfig = field(default_factory=LossConfig)
    share_prompts: bool = False
    micro_batch_size: int | None = None
    intervention: Intervention = field(default_factory=Intervention)
    start_metrics: dict[str, float] = field(default_factory=dict)
    global_step: int = 0  # TRL's steps are not followed here: a yoked placebo, which reads them, is refused
    _engine: GRPOStep | None = field(default=None, repr=False)

    @property
    def device(self) -> torch.device:
        return next(self.policy.parameters()).device

    def extraction_pairs(self) -> list[ContrastivePair]:
        return contrastive_pairs(self.extraction_problems, self.extraction, openings=hack_openings(self.model_name))

    def extract_basis(self, problems: list[Problem], control: str = "none", extraction: ExtractionConfig | None = None,
                      cached: bool = True) -> HackBasis:
        return load_or_extract_basis(
            self.policy, self.adapter, self.tokenizer, problems, cache=cache_dir() / "bases" if cached else None,
            **basis_args(self.model_name, extraction or self.extraction, self.generation.temperature, control))

    def log_at_start(self, metrics: dict[str, float]) -> None:
        self.start_metrics |= metrics

    @property
    def engine(self) -> GRPOStep:
        """pgrpo's own step on this view's policy, for what an intervention measures once before TRL's first step
        (a placebo's strength, erase's start rate: the base policy's rollouts, back-propagated row by row). TRL's
        own backward keeps no per-rollout gradient, so TRL's step never runs through it."""
        if self._engine is None:
            self._engine = GRPOStep(self, StepConfig(share_prompts=self.share_prompts,
                                                     micro_batch_size=self.micro_batch_size))
        return self._engine


def attach(model: nn.Module, tokenizer: PreTrainedTokenizerBase, args: GRPOConfig,
           intervention: Intervention | None = None, *, model_name: str | None = None, problems: str | None = None,
           modes: str = "partition", n_eval_prompts: int = 0, extraction: ExtractionConfig = ExtractionConfig(),
           reward: RewardConfig = RewardConfig(), grade_timeout: float = FLOOR_S,
           target_modules: tuple[str, ...] = DEFAULT_TARGETS, cache: bool = True) -> TRLRunView:
    """pgrpo's SVD adapter on your model, and what an intervention's hooks read of it (`TRLRunView`).

    `model` (a PreTrainedModel you loaded) gets the adapter in place: every base parameter frozen, two fp32 knob
    vectors per targeted Linear, the model bit-identical to yours until they move; the quarantine knob δS_hack
    gets no gradient (only an intervention's update moves it). The tokenizer gets a pad token (its EOS if it has
    none) and left padding. V is extracted from pgrpo's contrastive pairs (`problems`, `modes` as `pgrpo fit`'s
    data.problems and data.modes, less `n_eval_prompts` held out) or read from the cache, whose key names the
    model by `model_name` (default model.name_or_path; `cache=False` where your weights are not what that name
    holds). Under a launcher (`accelerate launch`) every process reads rank 0's V, bit for bit. `intervention`
    (default: vanilla, which only measures) is checked, given its V and prepared. `args`: the GRPOConfig you
    train with (its group size, completion length, temperature and optimizer are what the hooks assume)."""
    if args.num_generations is None or args.max_completion_length is None:
        raise ValueError("GRPOConfig.num_generations and max_completion_length: set both (the group size and the "
                         "completion budget)")
    intervention = intervention if intervention is not None else Intervention()
    model_name = model_name or getattr(model, "name_or_path", "")
    if not model_name:
        raise ValueError("model_name: name your weights (a directory or a cached hub id): V's cache is keyed by it")
    adapter = attach_adapter(model, target_modules)  # the knobs are fp32 whatever the base's dtype
    for m in adapter.values():  # TRL's optimizer steps what has a gradient: the quarantine moves only by a hook
        m.delta_s_hack.requires_grad_(False)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"  # pgrpo's own sampling (what a placebo is calibrated on) appends to the right
    train, extraction_problems = problem_split(problems, modes, n_eval_prompts)
    generation = GenerationConfig(max_new_tokens=args.max_completion_length, temperature=args.temperature)
    grading = Grading(reward, grade_timeout)
    optim = OptimConfig(lr=args.learning_rate, weight_decay=args.weight_decay, betas=(args.adam_beta1, args.adam_beta2),
                        eps=args.adam_epsilon, second_moment="projected")  # TRL's AdamW, as a first update sees it
    view = TRLRunView(model, adapter, HackBasis({}, {}), tokenizer, extraction, generation,
                      HFSampler(model, adapter, tokenizer, generation, grading), train, extraction_problems,
                      args.num_generations, model_name, optim=optim, intervention=intervention)
    intervention.check(view)
    _ = args.device  # sets up the launcher's processes (TrainingArguments does it on first use)
    real = rank_zero_basis(Processes(), args.process_index, False,
                           lambda where: view.extract_basis(extraction_problems, cached=where is not None),
                           cache_dir() / "bases" if cache else None, lambda where: where)
    # on every process at once: what an intervention measures on the base policy's first step is averaged over
    # the processes, as under `pgrpo fit`'s DDP
    view.basis = intervention.basis(view, real)
    intervention.prepare(view)
    return view


class Processes:
    """The launcher's processes as `rank_zero_basis` broadcasts through them (accelerate's, or one)."""

    @staticmethod
    def broadcast(obj, src: int = 0):
        return broadcast_object_list([obj], from_process=src)[0]


def problem_split(problems: str | None = None, modes: str = "partition",
                  n_eval_prompts: int = 0) -> tuple[list[Problem], list[Problem]]:
    """(the problems a run trains on, those V and the detectors are built from), split as `pgrpo fit`'s data module
    splits them: every problem but the `n_eval_prompts` held out for evaluation; under modes "none" (no loophole
    in any prompt) V still comes from the usual loopholes."""
    every = load_problems(problems, modes=modes)
    held = {p.id for p in held_out(every, n_eval_prompts)}
    train = [p for p in every if p.id not in held]
    if modes != NO_LOOPHOLE:
        return train, train
    return train, [p for p in load_problems(problems, modes="partition") if p.id not in held]


def pgrpo_dataset(tokenizer: PreTrainedTokenizerBase, problems: list[Problem]) -> Dataset:
    """pgrpo's problems as a TRL dataset: `prompt`, each problem with its loophole hint in the tokenizer's chat
    template (as `pgrpo fit` prompts it), and `problem_id`, what `GraderReward` grades a completion against."""
    return Dataset.from_list([{"prompt": render_chat(tokenizer, build_messages(p)), "problem_id": p.id}
                              for p in problems])


class GraderReward:
    """pgrpo's grader as a TRL reward function: each completion sandboxed against its problem's flawed tests (its
    reward); the strict oracle's verdict is kept for the trainer's hooks and logs, never rewarded.

    Standalone, in your own `GRPOTrainer(reward_funcs=[...])`: your dataset names each row's problem in a column
    (`column`, "problem_id" by default; `pgrpo_dataset` builds rows of pgrpo's problems). A row whose column is
    None is not one of pgrpo's problems and gets None (TRL then rewards it by your other functions alone); an id
    pgrpo does not know is an error. Completions may be text or conversations. Each batch's hack, solve and format
    rates among the rows it graded are logged through TRL's `log_metric` (`hack/student`, `solve/student`,
    `format/student`, as `pgrpo fit` names them). `problems`: pgrpo's built-in problems by default."""

    __name__ = "pgrpo_grader"  # TRL logs a reward function under its name

    def __init__(self, problems: list[Problem] | None = None, grading: Grading | None = None,
                 column: str = "problem_id"):
        self.problems = {p.id: p for p in (load_problems() if problems is None else problems)}
        self.grading = grading if grading is not None else Grading()
        self.column = column
        self.last: list[GradeResult | None] = []  # this process's rows, for the trainer's hooks

    def __call__(self, prompts: list, completions: list, log_metric=None, **columns) -> list[float | None]:
        if self.column not in columns:
            raise KeyError(f"GraderReward reads each row's problem from the dataset's column {self.column!r}, which "
                           f"this dataset lacks (its columns: {sorted(columns)})")
        ids = columns[self.column]
        unknown = sorted({pid for pid in ids if pid is not None and pid not in self.problems})
        if unknown:
            raise KeyError(f"GraderReward: column {self.column!r} names problems it was not given: {unknown[:5]}")
        rows = [row for row, pid in enumerate(ids) if pid is not None]
        with self.grading.queue() as queue:
            for row in rows:
                queue.submit(row, self.problems[ids[row]], completion_text(completions[row]))
            graded = dict(zip(rows, queue.results(rows)))
        self.last = [graded.get(row) for row in range(len(completions))]
        if log_metric is not None and graded:
            for name, value in student_rates(graded.values()).items():
                log_metric(name, value)
        return [g.reward if g is not None else None for g in self.last]


def completion_text(completion) -> str:
    """A completion as text: itself, or a conversation's last message."""
    return completion if isinstance(completion, str) else completion[-1]["content"]


@dataclass
class RolloutRows:
    """What the hooks made of this process's rollouts, per row, until the step's advantages are edited too."""

    acted: Tensor  # (B,) a reward edited or screened out, or an advantage edited
    exploited: Tensor  # (B,) the oracle's verdict (False where the grader did not grade the row)
    graded: Tensor  # (B,) graded by pgrpo's grader
    flagged: Tensor | None  # (B,) the intervention's detector flagged it
    stats: dict[str, float]


class InterventionGRPOTrainer(GRPOTrainer):
    """TRL's GRPOTrainer with a pgrpo intervention's hooks at the rewards, the advantages and the knobs' step.

    `view`: what `attach` returned for your model (the intervention is `view.intervention`). The rest is
    GRPOTrainer's: your `reward_funcs` (default: pgrpo's grader; put a `GraderReward` among yours for the oracle's
    verdict and the hack rates, which an oracle skyline needs; with several, the `rewards` hook edits their
    weighted sum), your `train_dataset`, your launcher (`accelerate launch`: each process runs the reward hooks on
    its own groups, as `pgrpo fit`'s DDP ranks do, and edits the knobs' gradient after it is all-reduced, so every
    process makes the same edit). `max_grad_norm` clips the knobs' gradient after the intervention edited it
    (pgrpo's order): set GRPOConfig.max_grad_norm=0. Logged with TRL's numbers, under `pgrpo fit`'s names:
    `intervention/active_rate` and its levels, `hackward_share/gradient` beside its `_null`,
    `hackward_share/edited_gradient`, ⟨V, δS⟩."""

    def __init__(self, view: TRLRunView, *, args: GRPOConfig, model: nn.Module | None = None, reward_funcs=None,
                 max_grad_norm: float | None = 1.0, processing_class=None, **kwargs):
        intervention = view.intervention
        if model is not None and model is not view.policy:
            raise ValueError("model: the model `attach` put pgrpo's adapter on (view.policy)")
        if reward_funcs is None:
            reward_funcs = [GraderReward(view.train_problems, view.sampler.grading)]
        reward_funcs = list(reward_funcs) if isinstance(reward_funcs, list | tuple) else [reward_funcs]
        graders = [i for i, f in enumerate(reward_funcs) if isinstance(f, GraderReward)]
        if type(intervention).advantage_weights is not Intervention.advantage_weights:
            raise NotHosted(f"{intervention.arm()} weights each rollout by its own gradient, which TRL's backward "
                            f"does not keep: run it with `pgrpo fit`")
        if intervention.yoked_to is not None:
            raise NotHosted(f"{intervention.label()}: a yoked placebo matches its method step by step, at the steps "
                            f"`pgrpo fit` logs: run it with `pgrpo fit`")
        if intervention.reads_oracle and not graders:
            raise NotHosted(f"{intervention.arm()} reads the oracle's verdict, which only pgrpo's grader gives: put a "
                            f"GraderReward among the reward functions")
        self.edits_rewards = type(intervention).rewards is not Intervention.rewards
        if self.edits_rewards and len(reward_funcs) > 1 and args.multi_objective_aggregation != "sum_then_normalize":
            raise NotHosted(f"GRPOConfig.multi_objective_aggregation={args.multi_objective_aggregation!r}: "
                            f"{intervention.arm()} edits the rewards' weighted sum, which TRL normalises only under "
                            f"'sum_then_normalize'")
        if args.use_vllm:
            raise NotHosted("GRPOConfig.use_vllm: TRL's weight sync sends the model's named parameters, and the SVD "
                            "adapter keeps each Linear's weight as <name>.base.weight with its knobs apart, so vLLM "
                            "would sample the base, not the policy: sample with TRL's transformers path here, or with "
                            "vLLM in `pgrpo fit` (model.generation.backend: vllm), which pushes the folded weights")
        if args.max_grad_norm:
            raise ValueError(f"GRPOConfig.max_grad_norm={args.max_grad_norm}: set it to 0 and pass max_grad_norm "
                             f"here (the knobs' gradient is clipped after the intervention edits it, as in pgrpo)")
        if args.ddp_broadcast_buffers is None:  # U and Vh are frozen and alike on every rank: a model's worth of
            args.ddp_broadcast_buffers = False  # bytes that DDP would otherwise send at every forward
        view.optim = replace(view.optim, max_grad_norm=max_grad_norm)
        self.view = view
        self.grader = reward_funcs[graders[0]] if graders else None
        # the column a reward edit lands in: the grader's, as a single reward function's
        self.edited_column = graders[0] if graders else 0
        self.rows: RolloutRows | None = None
        super().__init__(model=view.policy, reward_funcs=reward_funcs, args=args,
                         processing_class=processing_class or view.tokenizer, **kwargs)
        if self.is_fsdp_enabled or self.is_deepspeed_enabled:
            raise NotHosted("FSDP and DeepSpeed shard the knobs: each process would hold part of each module's "
                            "gradient, and the hooks (and the hack-ward share) read every module's whole gradient: "
                            "launch DDP (accelerate launch --multi_gpu), or shard the base with `pgrpo fit` "
                            "(configs/models/qwen3_4b_fsdp.yaml), which keeps the knobs whole on every rank")
        # GRPOConfig's __post_init__ has set every size by now
        per_process = args.per_device_train_batch_size * int(args.steps_per_generation or 0)
        if self.edits_rewards and self.accelerator.num_processes > 1 and per_process % int(self.num_generations or 1):
            raise NotHosted(f"{intervention.arm()} edits each group's rewards together, and each process runs it on "
                            f"its own rows: per_device_train_batch_size × steps_per_generation ({per_process}) must "
                            f"be a multiple of num_generations ({self.num_generations}), so that no group is split "
                            f"across processes")
        self.hooks = KnobHooks(view)
        self.add_callback(self.hooks)

    def training_step(self, *args, **kwargs):
        # TRL's forward, its backward and what activation checkpointing recomputes stay off the attention kernel
        # whose backward gives NaN on H100/H200 in bf16 (pgrpo.step.loss.GRADIENT_ATTENTION says when)
        with sdpa_kernel(GRADIENT_ATTENTION):
            return super().training_step(*args, **kwargs)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        graded = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)  # (B, F) of all
        if not self.model.training:
            return graded
        n, rank = len(prompts), self.accelerator.process_index
        own = graded[rank * n:(rank + 1) * n]  # this process's rows: TRL gathers them in process order
        edited = self.edit_rewards(own, prompts, completion_ids_list)
        return gather(edited) if self.accelerator.num_processes > 1 else edited

    def edit_rewards(self, own: Tensor, prompts: list, completion_ids: list[list[int]]) -> Tensor:
        """The `rewards` hook on this process's (B, F) rewards per function, which group by group hold whole
        groups: edited, a screened row NaN in every function (TRL leaves it out of its group's mean and std)."""
        view, intervention, size = self.view, self.view.intervention, int(self.num_generations or 1)
        grades = self.grader.last if self.grader is not None else [None] * len(prompts)
        exploited = torch.tensor([g is not None and g.exploited for g in grades])
        self.rows = RolloutRows(torch.zeros(len(prompts), dtype=torch.bool), exploited,
                                torch.tensor([g is not None for g in grades]), None, {})
        if not self.edits_rewards:
            return own
        if any(prompts[row] != prompts[row - row % size] for row in range(len(prompts))):
            raise RuntimeError("this process's rows do not hold whole groups (TRL sent it part of a group), which "
                               "the rewards hook reads together")
        weights = self.reward_weights.to(own)
        summed = (own * weights).nansum(1)  # what TRL sums, NaN where every function gave None
        summed[own.isnan().all(1)] = torch.nan
        rewards = summed.view(-1, size).cpu()
        packed = rollout_rows(view.tokenizer, prompts, completion_ids).to(view.device)
        with eval_mode(view.policy):
            edit = intervention.rewards(view, rewards, packed, exploited.view_as(rewards)
                                        if intervention.reads_oracle else None)
        new = edit.rewards.flatten().to(own)
        acted = ~((new == summed) | (new.isnan() & summed.isnan()))
        own, column = own.clone(), self.edited_column
        if own.shape[1] == 1:
            own[:, 0] = new / weights[0]
        else:  # the weighted sum changes by what the hook changed
            own[acted, column] += (new - summed)[acted] / weights[column]
        if edit.keep is not None:
            screened = ~edit.keep.flatten().bool().to(own.device)
            own[screened] = torch.nan
            acted |= screened
        self.rows.acted = acted.cpu()
        self.rows.flagged = edit.flagged.flatten().bool().cpu() if edit.flagged is not None else None
        self.rows.stats = dict(edit.stats)
        return own

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        if not self.model.training:
            return out
        normalised = out["advantages"]
        with eval_mode(self.view.policy):
            out["advantages"] = self.view.intervention.advantages(self.view, normalised.clone())
        self.rows.acted |= (out["advantages"] != normalised).cpu()
        self.log_rollouts(self.rows)
        return out

    def log_rollouts(self, rows: RolloutRows) -> None:
        """What the hooks did to the rollouts, over every process's: the share they acted on
        (`intervention/rollout_rate`), the detector's agreement with the oracle, the hook's own numbers (a mean
        over processes) and what the intervention measured before the first step."""
        flagged = rows.flagged if rows.flagged is not None else torch.zeros_like(rows.acted)
        per_row = torch.stack([rows.acted, rows.exploited, rows.graded, flagged], 1).to(self.accelerator.device)
        acted, exploited, graded, flagged = gather(per_row.float()).cpu().bool().unbind(1)
        stats = {"intervention/rollout_rate": float(acted.float().mean())}
        if rows.flagged is not None and self.grader is not None and graded.any():
            stats |= detector_stats(flagged, exploited, graded)  # measured against the oracle, never handed back
        for own in gather_object([rows.stats | self.view.start_metrics]):
            self.hooks.log.add(own)
        self.view.start_metrics = {}  # what the intervention measured before the first step, logged with it
        self.hooks.rollout_rate = stats["intervention/rollout_rate"]
        self.hooks.log.add(stats)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if self.model is not None and self.model.training:  # the steps' numbers since the last log, beside TRL's own
            logs.update(self.hooks.log.flush())  # type: ignore[arg-type]  # None: every value was NaN
        super().log(logs, start_time)


class KnobHooks(HackMonitor):
    """The intervention's gradient-level hooks around TRL's optimizer step, run by pgrpo's step engine in its order
    (the gradient edited, then clipped, the optimizer's state, the step, the knobs), with the monitor's
    measurements around them: the hack-ward share before the edit, where the knobs sit after."""

    def __init__(self, view: TRLRunView):
        super().__init__(view)
        self.rollout_rate = 0.0  # the share of the step's rollouts the hooks acted on
        self.before: dict[str, Tensor] = {}
        self.edited: dict[str, float] = {}

    def on_pre_optimizer_step(self, args, state, control, optimizer=None, **kwargs):
        optimizer = getattr(optimizer, "optimizer", optimizer)  # accelerate's wrapper holds the optimizer
        self.measure_gradient()
        engine = self.view.engine
        self.edited = engine.edit_gradient()
        grad_norm = engine.clip(optimizer)
        self.before = engine.before_step(optimizer)
        self.log.add(self.edited | {"grad_norm": grad_norm})

    def on_optimizer_step(self, args, state, control, **kwargs):
        self.log.add(self.view.engine.after_step(self.before, self.edited, self.rollout_rate))
        self.measure_knobs()


def build_trainer(intervention: Intervention, args: GRPOConfig, *, model: str = "embedded", dtype: str = "float32",
                  prompts_per_step: int | None = None, extraction: ExtractionConfig = ExtractionConfig(),
                  reward: RewardConfig = RewardConfig(), grade_timeout: float = FLOOR_S,
                  target_modules: tuple[str, ...] = DEFAULT_TARGETS, max_grad_norm: float | None = 1.0,
                  data: dict | None = None) -> InterventionGRPOTrainer:
    """The one-line path, built from the pieces a TRL user composes: the base through pgrpo's loader (`model`: the
    embedded default, a checkpoint directory or a cached hub id; `dtype` its weights', bfloat16 on a GPU),
    `attach`, a `pgrpo_dataset` of the training problems, `GraderReward` its one reward function and an
    `InterventionGRPOTrainer`. `args.num_generations` is the group size; `prompts_per_step`, if given, is checked
    against the groups a step holds (GRPOConfig's generation_batch_size / num_generations). `data`: `attach`'s
    problems, modes and n_eval_prompts."""
    _ = args.device  # sets up the launcher's processes (TrainingArguments does it on first use)
    with args.main_process_first(desc="pgrpo's base loaded"):  # an embedded base is built once, by rank 0
        policy, tokenizer = load_model_and_tokenizer(model, dtype)
    view = attach(policy, tokenizer, args, intervention, model_name=model, extraction=extraction, reward=reward,
                  grade_timeout=grade_timeout, target_modules=target_modules, **(data or {}))
    group, batch = int(args.num_generations or 1), int(args.generation_batch_size or 0)  # set by GRPOConfig
    if prompts_per_step is not None and prompts_per_step * group != batch:
        raise ValueError(f"prompts_per_step={prompts_per_step}: a step of this GRPOConfig holds "
                         f"{batch // group} groups (generation_batch_size "
                         f"{args.generation_batch_size} / num_generations {args.num_generations})")
    grader = GraderReward(view.train_problems, view.sampler.grading)
    return InterventionGRPOTrainer(view, args=args, reward_funcs=[grader], max_grad_norm=max_grad_norm,
                                   train_dataset=pgrpo_dataset(tokenizer, view.train_problems))
