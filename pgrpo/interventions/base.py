"""The interface every way of fighting hacking implements: hooks at the levels where methods act.

The training step calls every hook, in this order, and knows no intervention by name:

    check(module)                   once, at construction: refuse settings under which the hooks are not exact
    basis(module, real)             once, at train start: the V the run reads (a negative control swaps it)
    prepare(module)                 once, at train start, after `basis`: build what else it reads (a probe, a
                                    subspace), e.g. from module.extraction_pairs(), the pairs V is extracted from
    rewards(module, rewards, packed, exploited)
                                    each generated batch, before group normalisation: edited rewards, which rows
                                    enter their group's statistics, and which rows its detector flagged
    advantages(module, advantages)  each generated batch, after group normalisation, before any backward
    advantage_weights(module, grads)
                                    after the one backward: a factor on each rollout's advantage, read from the
                                    rollout's own gradient (applied by the step to that rollout's gradient)
    gradient(module)                after the gradient's hack-ward share is measured: edit delta_s.grad before the
                                    optimizer
    before_update(module, optimizer)  before the optimizer step: edit its state (Adam's moments)
    update(module, before)          after the optimizer step: edit the knobs (the update, or their position)
    deployed(adapter)               the model as it ships (evaluation, export)
    refresh(module, old)            with the V refresh callback, every few steps: the V the run reads from now on

`module` is the run that hosts the step, seen through `RunView`: exactly what a hook may read and call (the
policy with its adapter, V, the tokenizer, the pairs and problems V comes from, the step's settings and its
machinery to sample and score rollouts), nothing of Lightning's. ProjectedGRPO is one such host; a type check
(`make typecheck`) holds every intervention to the view. Each hook is a no-op here, so the base class is vanilla
GRPO. What the step measures (the hack-ward share of the gradient before and after the edit, where the knobs sit
along V, each rollout's overlap with V) it measures for every intervention.

Declared, not guessed: `reads_oracle` is True only for the oracle skylines. The step hands the oracle's labels
(`exploited`) to `rewards` only when it is True, and `pgrpo report` labels such a run an oracle skyline;
tests/interventions/test_no_cheat.py checks that every other intervention trains identically when the labels
are scrambled.
"""

import inspect
import os
import re
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Protocol, runtime_checkable

import torch
from torch import Tensor, nn

from pgrpo.model.adapter import SVDAdapterLinear, quarantine_zeroed
from pgrpo.directions.extraction import HackBasis
from pgrpo.step.rollout import Packed
from pgrpo.step.step_grads import Backward, StepGrads


if TYPE_CHECKING:  # the view names the host's types; the host imports this package, never the other way round
    from transformers import PreTrainedTokenizerBase

    from pgrpo.directions.basis import ContrastivePair, ExtractionConfig
    from pgrpo.env import GradeResult, Problem
    from pgrpo.step.batch import PromptGroup, Rollouts, Samples
    from pgrpo.step.loss import LossConfig
    from pgrpo.step.optim import OptimConfig
    from pgrpo.step.generation import Sampler
    from pgrpo.step.rollout import SamplingConfig


class StepMachinery(Protocol):
    """The host's step as a hook may run it on rollouts of its choosing (a placebo's calibration does): the same
    phases the training step runs (pgrpo.step.engine.GRPOStep)."""

    def assemble(self, groups: list["PromptGroup"], students: "Samples", grades: list["GradeResult"]) -> "Rollouts":
        """Graded groups → packed rows with rewards and advantages, the rewards and advantages hooks applied."""

    def backward(self, ro: "Rollouts") -> Backward:
        """The loss's one backward over the rows, each row's own part of the knobs' gradient kept."""


@runtime_checkable
class RunView(Protocol):
    """What an intervention's hooks may read and call of the run that hosts the step (ProjectedGRPO is one)."""

    policy: nn.Module  # the frozen base with the adapter inside it
    adapter: dict[str, SVDAdapterLinear]  # the knobs, by module name
    basis: HackBasis  # the V the run reads
    tokenizer: "PreTrainedTokenizerBase"
    extraction: "ExtractionConfig"  # how V is extracted (k, the pairs, the held-out pairs)
    optim: "OptimConfig"
    generation: "SamplingConfig"  # how the step samples (its temperature is the loss's)
    loss_cfg: "LossConfig"
    sampler: "Sampler"  # samples the student's rollouts (`sample(groups)`) and grades them (`grade(groups, samples)`)

    @property
    def device(self) -> torch.device: ...

    @property
    def engine(self) -> StepMachinery:
        """The host's step (pgrpo.step.engine.GRPOStep), to run on rollouts a hook chose."""

    @property
    def share_prompts(self) -> bool:
        """Whether a group's rows share their prompt's keys and values in the logprob pass."""

    @property
    def micro_batch_size(self) -> int | None:
        """Rows per forward and backward (None: the whole step at once)."""

    @property
    def extraction_problems(self) -> list["Problem"]:
        """The problems V and the detectors are built from (never the held-out evaluation problems)."""

    @property
    def train_problems(self) -> list["Problem"]: ...

    @property
    def n_student(self) -> int:
        """Live student samples in each group."""

    @property
    def global_step(self) -> int:
        """The optimizer steps taken before this one: the step being trained, which its numbers are logged at."""

    def extraction_pairs(self) -> list["ContrastivePair"]: ...

    def extract_basis(self, problems: list["Problem"], control: str = "none",
                      extraction: "ExtractionConfig | None" = None, cached: bool = True) -> HackBasis: ...

    def log_at_start(self, metrics: dict[str, float]) -> None:
        """Numbers measured once, at train start, into the run's logs."""


@dataclass
class RewardEdit:
    """What `rewards` hands back: the (P, G) rewards group normalisation sees, which rows enter their group's mean
    and std (None: all), which rows its detector flagged (None: it has none; the step logs the flags' agreement
    with the oracle, never hands it back), and numbers to log."""

    rewards: Tensor
    keep: Tensor | None = None
    flagged: Tensor | None = None
    stats: dict[str, float] = field(default_factory=dict)



def run_seed(seed: int | None) -> int:
    """A placebo's seed: the one given, else the run's seed_everything, so each seed of a sweep draws its own."""
    return seed if seed is not None else int(os.environ.get("PL_GLOBAL_SEED", 0))


class Intervention:
    """Vanilla GRPO: every hook leaves the step alone (the run only measures V)."""

    reads_oracle: ClassVar[bool] = False
    """Whether `rewards` is handed the oracle's labels: an oracle skyline, never a method."""
    measures_only: ClassVar[bool] = False
    """Whether it changes nothing (vanilla): `pgrpo report` pairs every other arm against such a run."""

    placebo_knob: ClassVar[str | None] = None
    """The init arg that swaps what it reads for a placebo (v, detector, subspace); its value 'real' is the method."""
    yoked_to: str | None = None
    """A yoked placebo's method run (pgrpo/interventions/yoke.py); None: a method, or a placebo matched at the start."""

    @property
    def placebo(self) -> bool:
        """Whether it reads a placebo detector (a random V, probe or subspace): a negative control of its method."""
        return self.placebo_knob is not None and getattr(self, self.placebo_knob) != "real"

    def check(self, module: RunView) -> None:
        """Raise ValueError naming the key when the module's settings make a hook inexact."""

    def basis(self, module: RunView, real: HackBasis) -> HackBasis:
        """The V this run reads, given the real one (once, at train start; a resume keeps the checkpoint's)."""
        return real

    def prepare(self, module: RunView) -> None:
        """Build what the intervention reads besides V, once at train start (a resume included, so it must be a
        deterministic function of the base model, the pairs and the run's seed)."""

    def rewards(self, module: RunView, rewards: Tensor, packed: Packed, exploited: Tensor | None) -> RewardEdit:
        """(P, G) rewards before group normalisation, `packed` their rows (group by group) → the edit.
        `exploited` (P, G) is the oracle's verdict, None unless reads_oracle."""
        return RewardEdit(rewards)

    def advantages(self, module: RunView, advantages: Tensor) -> Tensor:
        """(B,) advantages after group normalisation, before the backward."""
        return advantages

    def advantage_weights(self, module: RunView, grads: StepGrads) -> Tensor | None:
        """(B,) factors on each rollout's advantage from its own gradient (grads.rows), after the backward; the
        step scales each rollout's gradient by its factor, which is exact only where `check` made it so."""
        return None

    def gradient(self, module: RunView) -> None:
        """Edit each module's delta_s.grad in place, after its hack-ward share is measured and before the
        optimizer step."""

    def before_update(self, module: RunView, optimizer) -> None:
        """Edit the optimizer's state before its step."""

    def update(self, module: RunView, before: dict[str, Tensor]) -> None:
        """Edit the knobs after the optimizer step (`before`: each module's delta_s before it)."""

    def deployed(self, adapter: dict[str, SVDAdapterLinear]) -> AbstractContextManager:
        """The model as it ships: δS_hack zeroed (only an intervention that parks there fills it)."""
        return quarantine_zeroed(adapter)

    def refresh(self, module: RunView, old: HackBasis) -> HackBasis:
        """The V the run reads from now on, when a V refresh callback re-extracts it for the current policy
        (never from the cache: the cache knows only the base)."""
        return module.extract_basis(module.extraction_problems, cached=False)

    # -- description: how a config, a checkpoint and the report name it ------------------------------
    @classmethod
    def arm(cls) -> str:
        """The arm's name in summaries and model cards: the class's in snake case (AdvGate: adv_gate)."""
        return re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__).lower()

    def label(self) -> str:
        """The arm as a run's summary, model card and evaluation record name it: the method's, and a placebo says
        it is one ('erase placebo (v: random)'), so that a negative control is never read as its method."""
        knob = self.placebo_knob
        if not (knob and self.placebo):
            return self.arm()
        yoked = f", yoked to {self.yoked_to}" if self.yoked_to else ""
        return f"{self.arm()} placebo ({knob}: {getattr(self, knob)}{yoked})"

    def init_args(self) -> dict:
        """The constructor's arguments as given (each is kept under its own name)."""
        params = inspect.signature(type(self).__init__).parameters.values()
        return {p.name: getattr(self, p.name) for p in params
                if p.name != "self" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}

    def config(self) -> dict:
        """{class_path, init_args}: what a config file writes and a checkpoint's hyperparameters keep."""
        return {"class_path": f"{type(self).__module__}.{type(self).__qualname__}", "init_args": self.init_args()}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.init_args().items())})"

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and other.init_args() == self.init_args()

    def __hash__(self) -> int:
        return hash(repr(self))
