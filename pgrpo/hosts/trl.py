"""pgrpo's interventions inside TRL's GRPOTrainer: the same classes, a second host.

The hooks see this host through `TRLRunView`, the same typed view (`RunView`) `ProjectedGRPO` gives them. TRL
samples, scores and steps; pgrpo adds, at the points TRL's maintainers leave open:

    rewards(view, rewards, packed, oracle)  `_calculate_rewards`, after pgrpo's grader scored the completions
                                            (a screened row's reward is NaN: TRL leaves it out of its group's
                                            mean and std and gives it advantage 0, as pgrpo's `keep` does)
    advantages(view, advantages)            `_generate_and_score_completions`, after TRL's normalisation
    gradient(view), before_update(...)      `on_pre_optimizer_step` (a TrainerCallback): the knobs' gradient is
                                            edited, then clipped (pgrpo's order; TRL's own clip is off)
    update(view, before)                    `on_optimizer_step`

What cannot run here is refused, not faked: teacher rows (TRL samples every row of a group from the policy),
an advantage weight read from each rollout's own gradient at every step (adv_gate: TRL's backward keeps no
per-rollout gradient), more than one process (the grades and the packed rows would have to be gathered with the
rewards), and TRL's vLLM sampling (its weight sync would hand vLLM the base weights, not the adapted ones). What
an intervention measures once before the first step (a placebo's strength, erase's start rate) is measured by
pgrpo's own step engine on the same policy (`TRLRunView.engine`, pgrpo/step/engine.py).

    pip install -e ".[trl]"
    trainer = build_trainer(Erase(), GRPOConfig(output_dir="out", max_steps=5, ...))
    trainer.train()
"""

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn
from torch.nn.attention import sdpa_kernel

from pgrpo.model.adapter import DEFAULT_TARGETS, SVDAdapterLinear, attach_adapter
from pgrpo.step.batch import detector_stats, student_rates
from pgrpo.directions.basis import ExtractionConfig, basis_args, contrastive_pairs, load_or_extract_basis
from pgrpo.records.cache import cache_dir
from pgrpo.chat import render_chat
from pgrpo.hosts.lightning.data import GRPODataModule
from pgrpo.env import GradeResult, Problem, RewardConfig
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
from pgrpo.step.projection import knob_snapshot
from pgrpo.step.rollout import SamplingConfig, encode_prompts, pack

try:
    from datasets import Dataset
    from transformers import PreTrainedTokenizerBase, TrainerCallback
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


class GraderReward:
    """pgrpo's grader as a TRL reward function: each completion sandboxed against its problem's flawed tests. The
    grades (the oracle's verdict among them) are kept for the trainer's hooks and logs, never for the reward."""

    __name__ = "pgrpo_grader"  # TRL logs a reward function under its name

    def __init__(self, problems: list[Problem], grading: Grading):
        self.problems = {p.id: p for p in problems}
        self.grading = grading
        self.last: list[GradeResult] = []

    def __call__(self, prompts: list[str], completions: list[str], problem_id: list[str],
                 **kwargs) -> list[float | None]:
        with self.grading.queue() as queue:
            for row, (pid, text) in enumerate(zip(problem_id, completions, strict=True)):
                queue.submit(row, self.problems[pid], text)
            self.last = queue.results(range(len(completions)))
        return [g.reward for g in self.last]


class InterventionGRPOTrainer(GRPOTrainer):
    """TRL's GRPOTrainer with a pgrpo intervention's hooks at the rewards, the advantages and the knobs' step."""

    def __init__(self, *, intervention: Intervention, view: TRLRunView, grader: GraderReward,
                 max_grad_norm: float | None, args: GRPOConfig, **kwargs):
        if type(intervention).advantage_weights is not Intervention.advantage_weights:
            raise NotHosted(f"{intervention.arm()} weights each rollout by its own gradient, which TRL's backward "
                            f"does not keep: run it with `pgrpo fit`")
        if args.use_vllm:
            raise NotHosted("GRPOConfig.use_vllm: TRL's weight sync sends the model's named parameters, and the SVD "
                            "adapter keeps each Linear's weight as <name>.base.weight with its knobs apart, so vLLM "
                            "would sample the base, not the policy: sample with TRL's transformers path here, or with "
                            "vLLM in `pgrpo fit` (model.generation.backend: vllm), which pushes the folded weights")
        if args.max_grad_norm:
            raise ValueError(f"GRPOConfig.max_grad_norm={args.max_grad_norm}: set it to 0 and pass max_grad_norm "
                             f"here (the knobs' gradient is clipped after the intervention edits it, as in pgrpo)")
        self.intervention, self.view, self.grader = intervention, view, grader
        super().__init__(model=view.policy, reward_funcs=[grader], args=args, processing_class=view.tokenizer,
                         **kwargs)
        if self.accelerator.num_processes > 1:
            raise NotHosted("pgrpo's hooks inside TRL run in one process: the grades and the packed rows are not "
                            "gathered with the rewards")
        self.add_callback(KnobHooks(intervention, view, max_grad_norm))

    def training_step(self, *args, **kwargs):
        # TRL's forward, its backward and what activation checkpointing recomputes stay off the attention kernel
        # whose backward gives NaN on H100/H200 in bf16 (pgrpo.step.loss.GRADIENT_ATTENTION says when)
        with sdpa_kernel(GRADIENT_ATTENTION):
            return super().training_step(*args, **kwargs)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        graded = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)  # (B, 1)
        grades, view = self.grader.last, self.view
        rewards = graded[:, 0].view(-1, self.num_generations).cpu()  # (P, G)
        eos = view.tokenizer.eos_token_id
        packed = pack(encode_prompts(view.tokenizer, prompts), [list(ids) or [eos] for ids in completion_ids_list],
                      view.tokenizer.pad_token_id).to(view.device)
        exploited = torch.tensor([g.exploited for g in grades]).view_as(rewards)
        with eval_mode(view.policy):
            oracle = exploited if self.intervention.reads_oracle else None
            edit = self.intervention.rewards(view, rewards, packed, oracle)
        edited = edit.rewards.clone().float()
        acted = edit.rewards != rewards  # the rollouts it acted on: a reward edited or screened out
        if edit.keep is not None:
            edited[~edit.keep.bool()] = torch.nan
            acted |= ~edit.keep.bool()
        stats = student_rates(grades) | edit.stats | {"intervention/rollout_rate": float(acted.float().mean())}
        if edit.flagged is not None:  # measured against the oracle, never handed back
            stats |= detector_stats(edit.flagged, exploited, torch.ones(exploited.numel(), dtype=torch.bool))
        stats |= self.view.start_metrics  # what the intervention measured before the first step, logged with it
        self.view.start_metrics = {}
        mode = "train" if self.model.training else "eval"
        for key, value in stats.items():
            self._metrics[mode][key].append(value)
        return edited.view(-1, 1).to(graded)

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        with eval_mode(self.view.policy):
            out["advantages"] = self.intervention.advantages(self.view, out["advantages"].clone())
        return out


class KnobHooks(TrainerCallback):
    """The intervention's gradient-level hooks around TRL's optimizer step, then pgrpo's clip of the knobs."""

    def __init__(self, intervention: Intervention, view: TRLRunView, max_grad_norm: float | None):
        self.intervention, self.view, self.max_grad_norm = intervention, view, max_grad_norm
        self.before: dict[str, Tensor] | None = None

    def on_pre_optimizer_step(self, args, state, control, optimizer=None, **kwargs):
        adapter = self.view.adapter
        for m in adapter.values():
            m.delta_s_hack.grad = None  # only an intervention's update moves the quarantine
        self.intervention.gradient(self.view)
        grads = [m.delta_s for m in adapter.values() if m.delta_s.grad is not None]
        if grads and self.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(grads, self.max_grad_norm)
        self.intervention.before_update(self.view, getattr(optimizer, "optimizer", optimizer))
        self.before = knob_snapshot(adapter)

    def on_optimizer_step(self, args, state, control, **kwargs):
        self.intervention.update(self.view, self.before)


@contextmanager
def eval_mode(model: nn.Module) -> Iterator[None]:
    """The policy as pgrpo's hooks read it: in eval mode, as pgrpo's own trainer keeps it (no dropout, and no
    activation checkpointing, whose recomputed forward a per-rollout gradient capture would count twice)."""
    training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(training)


def build_trainer(intervention: Intervention, args: GRPOConfig, *, model: str = "embedded", dtype: str = "float32",
                  prompts_per_step: int = 4, extraction: ExtractionConfig = ExtractionConfig(),
                  reward: RewardConfig = RewardConfig(), grade_timeout: float = FLOOR_S,
                  target_modules: tuple[str, ...] = DEFAULT_TARGETS, max_grad_norm: float | None = 1.0,
                  data: dict | None = None) -> InterventionGRPOTrainer:
    """A TRL GRPOTrainer on pgrpo's problems and grader, its policy the base with pgrpo's SVD adapter, V extracted
    (or read from the cache) as `pgrpo fit` does, and `intervention`'s hooks inside. `args.num_generations` is the
    group size; a step is `prompts_per_step` groups; `dtype` the base weights' (bfloat16 on a GPU).
    `data`: GRPODataModule's other settings (modes, problems)."""
    if args.num_generations is None or args.max_completion_length is None:
        raise ValueError("GRPOConfig.num_generations and max_completion_length: set both (the group size and the "
                         "completion budget)")
    dm = GRPODataModule(model=model, group_size=args.num_generations, prompts_per_step=prompts_per_step,
                        reward=reward, mix_ratio=0.0, **(data or {}))
    dm.setup("fit")
    policy, tokenizer = load_model_and_tokenizer(model, dtype)  # the knobs are fp32 whatever the base's dtype
    adapter = attach_adapter(policy, target_modules)
    for m in adapter.values():  # TRL's optimizer steps what has a gradient: the quarantine moves only by a hook
        m.delta_s_hack.requires_grad_(False)
    generation = GenerationConfig(max_new_tokens=args.max_completion_length, temperature=args.temperature)
    grading = Grading(reward, grade_timeout)
    view = TRLRunView(policy, adapter, HackBasis({}, {}), tokenizer, extraction, generation,
                      HFSampler(policy, adapter, tokenizer, generation, grading), dm.train_problems,
                      dm.extraction_problems, dm.n_student, model, intervention=intervention)
    intervention.check(view)
    view.basis = intervention.basis(view, view.extract_basis(dm.extraction_problems))
    intervention.prepare(view)
    rows = [{"prompt": render_chat(tokenizer, build_messages(p)), "problem_id": p.id} for p in dm.train_problems]
    return InterventionGRPOTrainer(intervention=intervention, view=view, grader=GraderReward(dm.problems, grading),
                                   max_grad_norm=max_grad_norm, args=args, train_dataset=Dataset.from_list(rows))
