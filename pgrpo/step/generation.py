"""Who samples the student: one sampler per backend, each `sample(groups) -> Samples`, then `grade`.

`HFSampler` runs transformers' generate on the trainer's own model (the knobs folded into the weights while it
samples); `VLLMSampler` runs a colocated vLLM engine, which it starts on first use and hands the adapted weights
whenever the knobs changed. Grading may start while sampling still runs: a row is sent to the sandboxes the step
it ends (`grade_while_generating`), and `grade` waits for those and grades the rest. A sampler with other
settings (a deployment eval's temperature) is `with_settings(...)` of the run's, sharing its engine.
"""

from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal, cast

import torch
from torch import nn

from pgrpo.model.adapter import SVDAdapterLinear, base_is_sharded, merged_for_generation
from pgrpo.step.batch import Samples
from pgrpo.step.batch import PromptGroup
from pgrpo.chat import render_chat
from pgrpo.env import GradeQueue, GradeResult, Problem, RewardConfig
from pgrpo.env.prompts import build_messages
from pgrpo.env.time_limits import FLOOR_S
from pgrpo.model.load import resolve_model_path
from pgrpo.step.rollout import SamplingConfig, encode_prompts, sample

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


@dataclass
class GenerationConfig(SamplingConfig):
    """How the student samples: the sampling settings, and who samples (each field's docstring is its `--help`)."""

    backend: Literal["hf", "vllm"] = "hf"
    """Who samples the student: `hf` (transformers' generate on the trainer's model) or `vllm` (a colocated
    vLLM engine that gets the adapted weights pushed in memory whenever the knobs changed; single process)."""
    importance_cap: float | None = None
    """Truncated importance sampling (vllm only): weight each student token's loss by
    min(π_trainer / π_sampler, cap), the correction TRL and verl apply for the two engines' numerical
    mismatch (None: off; TRL's default cap is 2)."""
    vllm_kv_cache_gib: float = 1.0
    """Memory vLLM reserves for its KV cache (RAM on a CPU, GPU memory on a GPU)."""
    vllm_max_model_len: int | None = None
    """Longest prompt + completion vLLM accepts (None: the model's own limit; lower it to fit a small KV cache)."""


@dataclass
class Grading:
    """How the samples are graded: the reward they earn and each sandboxed run's wall budget floor."""

    reward: RewardConfig = RewardConfig()
    timeout_s: float = FLOOR_S

    def queue(self) -> GradeQueue:
        return GradeQueue(reward=self.reward, timeout_s=self.timeout_s)


@dataclass
class Sampler(ABC):
    """Samples every group's G_s completions in one call, and grades them."""

    policy: nn.Module  # the frozen base with the adapter inside it
    adapter: dict[str, SVDAdapterLinear]
    tokenizer: "PreTrainedTokenizerBase"
    settings: GenerationConfig
    grading: Grading

    @abstractmethod
    def sample(self, groups: list[PromptGroup]) -> Samples:
        """Every group's `n_student` completions, row r answering group r // n_student."""

    def grade(self, groups: list[PromptGroup], samples: Samples) -> list[GradeResult]:
        """The grades of every sample (sandboxed, in parallel), those started while sampling included."""
        n_s = groups[0].n_student
        with samples.grading or self.grading.queue() as grading:
            for row, text in enumerate(samples.texts):
                if not grading.submitted(row):  # not sent while sampling (or ran out of tokens before its EOS)
                    grading.submit(row, groups[row // n_s].problem, text)
            return grading.results(range(len(samples.texts)))

    def rollouts(self, problems: list[Problem], n: int) -> list[tuple[str, GradeResult]]:
        """`n` graded samples of each problem under its own prompt (`pgrpo.evaluation.evaluate`'s rollouts)."""
        groups = [PromptGroup(p, render_chat(self.tokenizer, build_messages(p)), [], n) for p in problems]
        samples = self.sample(groups)
        return list(zip(samples.texts, self.grade(groups, samples)))

    def with_settings(self, **changes) -> "Sampler":
        """The same sampler (the same engine) sampling with these settings changed, e.g. temperature."""
        return replace(self, settings=replace(self.settings, **changes))


@dataclass
class HFSampler(Sampler):
    """transformers' generate on the trainer's model, the knobs folded into its weights while it samples."""

    grade_while_generating: bool | None = None  # None: only on a GPU (on CPU cores graders slow generation more)

    def sample(self, groups: list[PromptGroup]) -> Samples:
        n_s = groups[0].n_student
        grading = self.grading.queue()

        def grade_when_finished(row: int, completion: list[int]) -> None:
            text = cast(str, self.tokenizer.decode(completion, skip_special_tokens=True))  # one row: one string
            grading.submit(row, groups[row // n_s].problem, text)

        overlap = self.grade_while_generating
        if overlap is None:
            overlap = next(self.policy.parameters()).device.type != "cpu"
        try:
            with merged_for_generation(self.adapter):  # δ folded into the weights: base-model speed
                prompt_ids, completions, clipped = sample(
                    self.policy, self.tokenizer, [grp.prompt for grp in groups], n_s, self.settings,
                    # a sharded base all-gathers in every forward: ranks that finish early keep stepping with the rest
                    synced_gpus=base_is_sharded(self.adapter), on_finished=grade_when_finished if overlap else None,
                )
        except BaseException:
            grading.close()
            raise
        texts = self.tokenizer.batch_decode(completions, skip_special_tokens=True)
        return Samples(prompt_ids, completions, clipped, texts, grading)


class _EngineSlot:
    """The one vLLM engine a run's samplers share (a `with_settings` copy included), started by the first sample."""

    def __init__(self):
        self.engine = None


@dataclass
class VLLMSampler(Sampler):
    """A colocated vLLM engine in this process, handed the knobs it has not seen before each call."""

    model: str = "embedded"  # the base the trainer loaded (its directory is resolved when the engine starts)
    dtype: str = "float32"
    slot: _EngineSlot | None = None

    def __post_init__(self):
        if self.slot is None:
            self.slot = _EngineSlot()

    def engine(self):
        """The engine, started on first use (exporting or evaluating a checkpoint never pays for it)."""
        if self.slot.engine is None:
            from pgrpo.step.vllm_engine import VLLMEngine

            distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
            if (distributed and torch.distributed.get_world_size() > 1) or base_is_sharded(self.adapter):
                raise ValueError("model.generation.backend=vllm runs one engine beside one trainer process: "
                                 "run on a single device, or set model.generation.backend: hf under DDP/FSDP")
            s = self.settings
            self.slot.engine = VLLMEngine(resolve_model_path(self.model), self.dtype, seed=0,
                                          kv_cache_gib=s.vllm_kv_cache_gib, max_model_len=s.vllm_max_model_len)
        return self.slot.engine

    def sample(self, groups: list[PromptGroup]) -> Samples:
        n_s = groups[0].n_student
        engine = self.engine()
        engine.sync(self.policy, self.adapter)  # whatever the knobs are now: trained, or δS_hack zeroed by an eval
        encoded = encode_prompts(self.tokenizer, [grp.prompt for grp in groups])
        completions, clipped, sampler_logp = engine.sample(encoded, n_s, self.settings, self.tokenizer.eos_token_id)
        prompt_ids = [ids for ids in encoded for _ in range(n_s)]
        texts = self.tokenizer.batch_decode(completions, skip_special_tokens=True)
        return Samples(prompt_ids, completions, clipped, texts, self.grading.queue(), sampler_logp)


def build_sampler(policy: nn.Module, adapter: dict[str, SVDAdapterLinear], tokenizer, settings: GenerationConfig,
                  grading: Grading, *, model: str, dtype: str, grade_while_generating: bool | None = None) -> Sampler:
    """The sampler `settings.backend` names, for this policy (`model` and `dtype`: the base it was loaded from)."""
    if settings.backend == "vllm":
        return VLLMSampler(policy, adapter, tokenizer, settings, grading, model=model, dtype=dtype)
    return HFSampler(policy, adapter, tokenizer, settings, grading, grade_while_generating=grade_while_generating)
