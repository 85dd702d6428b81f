"""`pgrpo bench` (or `make bench`): each hot path against its plain version, measured side by side in one process.

Every figure is a ratio of two things timed here, their repetitions alternating
(the order rotating each round) so that load from other processes falls on both
sides alike; each side counts its median. Figures to read, not a pass/fail test.
Two models: the embedded default, and a larger CPU model (8 layers, hidden 512;
the embedded config with a random init, built once into the cache).
"""

import hashlib
import json as jsonlib
import logging
import statistics
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import lightning as L
import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from transformers import Qwen3Config, Qwen3ForCausalLM
from typing_extensions import override

from pgrpo.model.adapter import DEFAULT_TARGETS, SVDAdapterLinear, attach_adapter, capture_row_grads, knobs_zeroed
from pgrpo.model.adapter import merged_for_generation
from pgrpo.directions.basis import ExtractionConfig, completion_grads, contrastive_pairs
from pgrpo.records.cache import cache_dir
from pgrpo.hosts.lightning.data import GRPODataModule, StepBatches
from pgrpo.step.batch import PromptGroup, Samples
from pgrpo.env import grade_batch, load_problems
from pgrpo.env.benchmark import benchmark_grading
from pgrpo.env.prompts import build_messages
from pgrpo.step.loss import LossConfig, group_advantages, grpo_loss, token_logprobs
from pgrpo.chat import render_chat
from pgrpo.model.load import load_model_and_tokenizer, load_tokenizer, resolve_model_path
from pgrpo.step.generation import GenerationConfig, Sampler, build_sampler
from pgrpo.hosts.lightning.module import ProjectedGRPO
from pgrpo.interventions.erase import Erase
from pgrpo.interventions.route import Route
from pgrpo.interventions.vanilla import Vanilla
from pgrpo.step.projection import measure_grads
from pgrpo.step.rollout import Packed, SamplingConfig, pack, sample

PHASES = ("generate", "grade", "assemble", "backward", "project", "optimizer")
# route parks a projected position, never a gradient
ARMS = {"vanilla": Vanilla, "erase": Erase, "route": lambda: Route(target="position"), "naive": Erase,
        "unshared": Vanilla}
TARGETS = {  # figure -> (comparison, bound), from the performance issue
    "erase_over_vanilla_step": ("<=", 1.10),
    "vanilla_over_unshared_steps_per_s": (">=", 1.3),
    "route_over_vanilla_step": ("<=", 1.15),
    "split_over_single_backward": ("<=", 1.15),
    "adapter_over_base_generate_tokens_per_s": (">=", 0.90),
    "batched_over_loop_extraction_speed": (">=", 5.0),
    "logprob_peak_memory_ratio": ("<=", 0.5),
    "end_to_end_over_naive_steps_per_s": (">=", 2.0),
}
LARGER_SHAPE = {"hidden_size": 512, "intermediate_size": 1536, "num_hidden_layers": 8, "num_attention_heads": 8,
                "num_key_value_heads": 4, "head_dim": 64}
# Qwen3-4B's targeted Linears (out, in) per layer, 36 layers: its adapter memory without a download
QWEN3_4B_LINEARS = [(4096, 2560), (1024, 2560), (1024, 2560), (2560, 4096), (9728, 2560), (9728, 2560), (2560, 9728)]
QWEN3_4B_LAYERS = 36


@dataclass(frozen=True)
class Sizes:
    """How much work each measurement does."""

    steps: int = 6  # steps per fit (the first is not timed)
    rounds: int = 2  # fits per arm, alternating the arms
    step_batch: tuple[int, int, int] = (4, 8, 128)  # prompts per step, group size, max_new_tokens (the configs')
    repeats: int = 3  # rounds of each micro-benchmark
    backward: tuple[int, int, int] = (16, 192, 96)  # rows, prompt tokens, completion tokens
    generate: tuple[int, int, int] = (4, 8, 64)  # prompts, samples each, new tokens
    extraction_pairs: int = 32


LARGER = Sizes(steps=3, rounds=1, step_batch=(2, 4, 32), repeats=1, backward=(4, 128, 64), generate=(2, 4, 32),
               extraction_pairs=4)
QUICK = Sizes(steps=2, rounds=1, step_batch=(2, 2, 4), repeats=1, backward=(2, 16, 8), generate=(1, 2, 4),
              extraction_pairs=2)


def bench(model: str = "embedded", larger: bool = True, quick: bool = False, json: bool = False,
          problems: str | None = None, vllm: bool = False) -> None:
    """Measure the fast paths against their plain versions, side by side in this process, and print a table.

    Training steps of vanilla, erase, route, the step as it was before prompt sharing (every row its own prompt,
    the reference forward every step) and a naive loop (one prompt at a time, unmerged generation,
    sequential grading, full log-softmax, two backward passes) alternate in one process, with the
    per-phase breakdown; then the one-backward student/teacher split against a plain backward,
    generation with the adapter (δ ≠ 0, folded) against the bare base, batched V extraction against one
    completion at a time, logprob peak memory against a full fp32 log-softmax (vocab 32k), parallel
    against sequential grading, and U + Vh memory against the targeted weights. About 15 minutes on
    2 cores; --quick runs tiny sizes in about two (a check that it works: its figures are noise).

    Args:
        model: "embedded", a checkpoint directory, or a cached hub id.
        larger: also measure a larger CPU model (8 layers, hidden 512, random init).
        quick: tiny sizes.
        json: also print every figure as one JSON object on the last line.
        problems: an rl-rewardhacking JSONL file (e.g. ../shared/data/leetcode_medhard_dev.jsonl): also time one
            real step's backward (its prompts are ~650 tokens) against the bare model's forward+backward on
            the same packed batch, with the folded adapter and with the low-rank term beside the Linear.
        vllm: also time the student's generation with the vLLM backend against HF generate (needs vLLM).
    """
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)  # no trainer banners between the rows
    sizes = QUICK if quick else Sizes()
    result = model_figures(model, sizes)
    if larger:
        result["larger_cpu"] = model_figures(str(larger_model_dir()), QUICK if quick else LARGER)
    result |= logprob_memory(*((2, 32, 4096) if quick else (8, 256, 32768)))
    grading = benchmark_grading(n=4 if quick else 32)
    result |= {"grading_parallel_over_sequential": grading["grading_parallel_over_sequential"], "grading": grading}
    result |= adapter_memory(model)
    if problems:
        result |= real_step_figures(model, problems, *((1, 8) if quick else (3, 128)))
    if vllm:
        result |= vllm_figures(model, *sizes.step_batch, 1 if quick else 3)
    print(format_report(result))
    if json:
        print(jsonlib.dumps(result))


def model_figures(model: str, sizes: Sizes) -> dict:
    figures = step_figures(model, sizes)
    policy, tokenizer = load_model_and_tokenizer(model)
    base = load_model_and_tokenizer(model)[0]  # the bare base: no adapter at all
    adapter = attach_adapter(policy)
    figures |= backward_figures(policy, adapter, *sizes.backward, sizes.repeats)
    figures |= generation_figures(policy, adapter, base, tokenizer, *sizes.generate, sizes.repeats)
    figures |= extraction_figures(policy, adapter, tokenizer, sizes.extraction_pairs)
    return figures


def time_alternating(sides: Mapping[str, Callable[[], object]], repeats: int, warmup: bool = True) -> dict[str, float]:
    """Median seconds of each side over `repeats` rounds (after one warm-up call each); the order rotates."""
    names = list(sides)
    for name in names if warmup else ():
        sides[name]()
    seconds: dict[str, list[float]] = {name: [] for name in names}
    for r in range(repeats):
        for name in names[r % len(names):] + names[: r % len(names)]:
            start = time.perf_counter()
            sides[name]()
            seconds[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in seconds.items()}


def _randomize(adapter: Mapping[str, SVDAdapterLinear], scale: float = 0.01) -> None:
    """Non-zero knobs, as after some training (at δ = 0 some paths could shortcut)."""
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for m in adapter.values():
            m.delta_s.copy_(scale * torch.randn(m.rank, generator=generator))


def _max_rel_diff(a: Mapping[str, Tensor], b: Mapping[str, Tensor]) -> float:
    return max(float((a[n] - b[n]).norm() / b[n].norm().clamp(min=1e-30)) for n in b)


# -- training steps --------------------------------------------------------------------------------------------


class StepTimes(L.Callback):
    """The step's own `time/<phase>` figures plus its wall time, skipping each fit's first step."""

    def __init__(self):
        self.steps: list[dict[str, float]] = []
        self._start = 0.0

    @override
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._start = time.perf_counter()

    @override
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if batch_idx == 0:
            return
        metrics = outputs["metrics"]
        times = {p: metrics.get(f"time/{p}", 0.0) for p in PHASES}
        times["step"] = time.perf_counter() - self._start
        self.steps.append(times)


class NaiveGRPO(ProjectedGRPO):
    """The same step written straightforwardly: per prompt, generate through the unmerged adapter, grade one
    completion at a time, full log-softmax, and the student and teacher gradients from two backward passes."""

    @override
    def training_step(self, batch: list[PromptGroup], batch_idx: int) -> dict:
        seconds = dict.fromkeys(PHASES, 0.0)
        opt, sched = self.optimizers(), self.lr_schedulers()
        opt.zero_grad(set_to_none=True)
        split = {part: {n: torch.zeros(m.rank) for n, m in self.adapter.items()} for part in ("student", "teacher")}
        total_rows = sum(grp.n_student + len(grp.teacher) for grp in batch)
        g, eos = self.generation, self.tokenizer.eos_token_id
        for grp in batch:
            start = time.perf_counter()
            prompt_ids, completions, _ = sample(self.policy, self.tokenizer, [grp.prompt], grp.n_student, g)
            texts = self.tokenizer.batch_decode(completions, skip_special_tokens=True)
            seconds["generate"] += time.perf_counter() - start
            start = time.perf_counter()
            grades = grade_batch([(grp.problem, t) for t in texts], workers=1, reward=self.reward,
                                 timeout_s=self.hparams.grade_timeout)
            seconds["grade"] += time.perf_counter() - start
            start = time.perf_counter()
            rows = completions + [self.tokenizer(t.completion, add_special_tokens=False)["input_ids"] + [eos]
                                  for t in grp.teacher]
            rewards = torch.tensor([[r.reward for r in grades] + [t.reward for t in grp.teacher]])
            advantages, zero_std = group_advantages(rewards, self.hparams.advantage_scale)
            packed = pack(prompt_ids[:1] * len(rows), rows, self.tokenizer.pad_token_id)
            with torch.no_grad(), knobs_zeroed(self.adapter):
                ref = full_logprobs(self.policy, packed, g.temperature)
            seconds["assemble"] += time.perf_counter() - start
            if zero_std.all():
                continue
            start = time.perf_counter()
            logp = full_logprobs(self.policy, packed, g.temperature)
            for part, rows_of in (("student", slice(0, grp.n_student)), ("teacher", slice(grp.n_student, None))):
                if part == "teacher" and not grp.teacher:
                    continue
                loss, _ = grpo_loss(logp[rows_of], None, ref[rows_of], advantages[0, rows_of],
                                    packed.completion_mask[rows_of], self.loss_cfg, denominator_rows=total_rows,
                                    max_new_tokens=g.max_new_tokens)
                self.manual_backward(loss, retain_graph=part == "student")
                for n, m in self.adapter.items():
                    split[part][n] += m.delta_s.grad
                    m.delta_s.grad = m.delta_s_hack.grad = None
            seconds["backward"] += time.perf_counter() - start
        for n, m in self.adapter.items():  # what one backward over everything leaves in .grad
            m.delta_s.grad = split["student"][n] + split["teacher"][n]
            m.delta_s_hack.grad = m.delta_s.grad.clone()
        start = time.perf_counter()
        measure_grads(self.adapter, self.basis, split["student"], split["teacher"])
        for m in self.adapter.values():
            m.delta_s_hack.grad = None
        self.intervention.gradient(self)
        seconds["project"] = time.perf_counter() - start
        start = time.perf_counter()
        self.engine.clip()
        opt.step()
        sched.step()
        seconds["optimizer"] = time.perf_counter() - start
        return {"metrics": {f"time/{k}": v for k, v in seconds.items()}, "samples": []}


def full_logprobs(model, packed: Packed, temperature: float = 1.0) -> Tensor:
    """The plain version of token_logprobs: the whole (B, T_c, V) fp32 log-softmax, then a gather."""
    position_ids = (packed.attention_mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=packed.input_ids, attention_mask=packed.attention_mask, position_ids=position_ids,
                   use_cache=False).logits[:, -packed.completion_len - 1 : -1]
    log_probs = (logits.float() / temperature).log_softmax(-1)  # (B, T_c, V)
    return log_probs.gather(-1, packed.input_ids[:, -packed.completion_len :, None]).squeeze(-1)


def time_arm(kind: str, model: str, sizes: Sizes, root: Path) -> list[dict[str, float]]:
    """One fit of `sizes.steps` steps under `kind`; the per-step phase times after the first."""
    prompts, group, new_tokens = sizes.step_batch
    L.seed_everything(0, verbose=False)
    cls = NaiveGRPO if kind == "naive" else ProjectedGRPO
    # "unshared" is the step as it was before prompt sharing: every row runs its own prompt, and the
    # reference forward runs every step although beta = 0
    unshared = {"share_prompts": False, "kl_every": 1} if kind == "unshared" else {}
    module = cls(model=model, intervention=ARMS[kind](),
                 generation=GenerationConfig(max_new_tokens=new_tokens), **unshared)
    data = GRPODataModule(model=model, seed=0, group_size=group, prompts_per_step=prompts)
    timer = StepTimes()
    trainer = L.Trainer(max_steps=sizes.steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, callbacks=[timer], default_root_dir=root,
                        num_sanity_val_steps=0, limit_val_batches=0)
    trainer.fit(module, data)
    return timer.steps


def step_figures(model: str, sizes: Sizes) -> dict:
    """Fits of every arm and of the naive loop, alternating, with the same prompts; medians per phase."""
    timed: dict[str, list[dict[str, float]]] = {kind: [] for kind in ARMS}
    for _ in range(sizes.rounds):
        for kind in ARMS:
            timed[kind] += time_arm(kind, model, sizes, Path("logs") / "bench")
    phases = {kind: {k: statistics.median(r[k] for r in rows) for k in rows[0]} for kind, rows in timed.items()}
    step = {kind: p["step"] for kind, p in phases.items()}
    return {
        "erase_over_vanilla_step": step["erase"] / step["vanilla"],
        "route_over_vanilla_step": step["route"] / step["vanilla"],
        "end_to_end_over_naive_steps_per_s": step["naive"] / step["erase"],
        "vanilla_over_unshared_steps_per_s": step["unshared"] / step["vanilla"],
        "steps_per_s": 1 / step["erase"],
        "step_settings": dict(zip(("prompts_per_step", "group_size", "max_new_tokens"), sizes.step_batch)),
        "phases": phases,
    }


# -- a real step's batch; vLLM ---------------------------------------------------------------------------------


def _module_and_batch(model: str, problems: str | None, **generation) -> tuple[ProjectedGRPO, list[PromptGroup]]:
    """A vanilla module on a CPU trainer (knobs randomized) and step 0's prompt groups of the shipped config."""
    L.seed_everything(0, verbose=False)
    module = ProjectedGRPO(model=model, generation=GenerationConfig(**generation))
    module.configure_model()
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, max_steps=1)
    trainer.strategy.connect(module)  # manual_backward goes through the trainer's strategy
    module.trainer = trainer
    _randomize(module.adapter)
    data = GRPODataModule(model=model, problems=problems, seed=0)
    data.setup()
    return module, StepBatches(data, 1)[0]


def real_step_figures(model: str, problems: str, repeats: int, max_new_tokens: int = 128) -> dict:
    """One step of the shipped config on real problems: its backward (logprobs with grad, loss, the one
    split backward) against the bare base's forward+backward on the same packed rows, in one run.

    The bare side runs the step's live rows (those of groups with reward variance) whole, with no prompt
    sharing, and gradients flowing from the completion logprobs back to the input embeddings: the network's
    full backward, no adapter at all.
    """
    module, groups = _module_and_batch(model, problems, max_new_tokens=max_new_tokens)
    start = time.perf_counter()
    students = module.sampler.sample(groups)
    generate_s = time.perf_counter() - start
    rollouts = module.engine.assemble(groups, students, module.sampler.grade(groups, students))
    live = (~rollouts.zero_std).repeat_interleave(rollouts.rewards.shape[1])
    packed = rollouts.packed.rows(live.nonzero().flatten())  # the rows the step backpropagates, each whole
    base = load_model_and_tokenizer(model)[0]

    def bare() -> None:
        bare_forward_backward(base, packed)

    def step(fold: bool) -> Callable[[], dict[str, Tensor]]:
        def run() -> dict[str, Tensor]:
            for m in module.adapter.values():
                m.fold = fold
            module.policy.zero_grad(set_to_none=True)
            module.engine.backward(rollouts)
            return {n: m.delta_s.grad.clone() for n, m in module.adapter.items()}
        return run

    seconds = time_alternating({"bare": bare, "folded": step(True), "beside": step(False)}, repeats)
    beside = step(False)()
    folded = step(True)()  # the module's own setting last
    rows, width = packed.input_ids.shape
    return {
        "real_step_live_rows": rows,
        "real_step_folded_vs_unfolded_grad_max_rel_diff": _max_rel_diff(folded, beside),
        "real_step_backward_over_bare_fwd_bwd": seconds["folded"] / seconds["bare"],
        "real_step_unfolded_backward_over_bare_fwd_bwd": seconds["beside"] / seconds["bare"],
        "real_step_backward_s": seconds["folded"],
        "real_step_bare_fwd_bwd_s": seconds["bare"],
        "real_step_generate_s": generate_s,
        "real_step_batch": {"rows": rows, "tokens_per_row": width, "completion_tokens": packed.completion_len},
    }


def bare_forward_backward(base, packed: Packed) -> None:
    """The bare model's forward and backward on packed rows, no adapter: a frozen base has no trainable
    parameter, so the backward runs from the completion logprobs back to the input embeddings."""
    embeds = base.get_input_embeddings()(packed.input_ids).detach().requires_grad_(True)
    position_ids = (packed.attention_mask.cumsum(-1) - 1).clamp(min=0)
    logits = base(inputs_embeds=embeds, attention_mask=packed.attention_mask, position_ids=position_ids,
                  logits_to_keep=packed.completion_len + 1).logits[:, :-1].float()  # (B, T_c, V)
    logp = torch.log_softmax(logits, -1).gather(-1, packed.input_ids[:, -packed.completion_len:, None])
    (logp.squeeze(-1) * packed.completion_mask).sum().backward()


def vllm_figures(model: str, prompts: int, group: int, new_tokens: int, repeats: int) -> dict:
    """The student's generation, one step's prompts and group, through vLLM and through HF generate."""
    module, groups = _module_and_batch(model, None, max_new_tokens=new_tokens)
    samplers, startup = backend_samplers(module)
    timed = sample_side_by_side(samplers, [replace(g, n_student=group) for g in groups[:prompts]], repeats)
    return {
        "vllm_over_hf_generate_tokens_per_s": timed["vllm"].tokens_per_s / timed["hf"].tokens_per_s,
        "vllm_generate_tokens_per_s": timed["vllm"].tokens_per_s,
        "hf_generate_tokens_per_s": timed["hf"].tokens_per_s,
        "vllm_engine_startup_s": startup,
    }


def backend_samplers(module: ProjectedGRPO) -> tuple[dict[str, Sampler], float]:
    """The module's policy sampled by HF generate and by a vLLM engine (started here: its seconds returned)."""
    hp = module.hparams
    samplers = {backend: build_sampler(module.policy, module.adapter, module.tokenizer,
                                       replace(module.generation, backend=backend), module.sampler.grading,
                                       model=hp.model, dtype=hp.dtype) for backend in ("hf", "vllm")}
    start = time.perf_counter()
    samplers["vllm"].engine()
    return samplers, time.perf_counter() - start


@dataclass
class Sampled:
    """One backend's calls on one batch of groups: the median call's seconds, tokens per call, every call's samples."""
    seconds: float
    tokens: int
    samples: list[Samples]

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds


def sample_side_by_side(samplers: Mapping[str, Sampler], groups: list[PromptGroup], repeats: int,
                        warmup: bool = True) -> dict[str, Sampled]:
    """Each sampler's call on the same groups, alternating (time_alternating); the samples kept for grading."""
    samples: dict[str, list[Samples]] = {name: [] for name in samplers}

    def call(name: str) -> Callable[[], None]:
        def run() -> None:
            drawn = samplers[name].sample(groups)
            if drawn.grading is not None:  # grades started while sampling: not what is timed, and not needed
                drawn.grading.close()
                drawn.grading = None
            samples[name].append(drawn)
        return run

    seconds = time_alternating({name: call(name) for name in samplers}, repeats, warmup)
    return {name: Sampled(seconds[name], sum(map(len, samples[name][-1].completions)), samples[name])
            for name in samplers}


# -- one backward, generation, extraction -----------------------------------------------------------------------


def backward_figures(policy, adapter, rows: int, prompt_len: int, completion_len: int, repeats: int) -> dict:
    """Logprobs + GRPO loss + backward: plain, with the per-row split captured, and as two passes."""
    generator = torch.Generator().manual_seed(0)
    vocab = policy.config.vocab_size
    prompts = [torch.randint(3, vocab, (prompt_len,), generator=generator).tolist() for _ in range(rows)]
    completions = [torch.randint(3, vocab, (completion_len - i % 7,), generator=generator).tolist()
                   for i in range(rows)]
    packed = pack(prompts, completions, 0)
    is_student = torch.arange(rows) < max(1, rows * 3 // 4)
    advantages = torch.randn(rows, generator=generator)
    cfg = LossConfig()
    _randomize(adapter)

    def loss_of(logp: Tensor, rows_of: Tensor | slice = slice(None)) -> Tensor:
        return grpo_loss(logp[rows_of], None, None, advantages[rows_of], packed.completion_mask[rows_of], cfg,
                         denominator_rows=rows, max_new_tokens=completion_len)[0]

    def logprobs() -> Tensor:
        return token_logprobs(policy, packed.input_ids, packed.attention_mask, packed.completion_len)[0]

    def plain() -> dict[str, Tensor]:
        policy.zero_grad(set_to_none=True)
        loss_of(logprobs()).backward()
        return {n: m.delta_s.grad.clone() for n, m in adapter.items()}

    def split() -> dict[str, Tensor]:
        policy.zero_grad(set_to_none=True)
        with capture_row_grads(adapter) as captured:
            loss_of(logprobs()).backward()
        g_student, g_teacher = captured.split(is_student)
        return {n: g_student[n] + g_teacher[n] for n in adapter}

    def two_pass() -> None:
        policy.zero_grad(set_to_none=True)
        logp = logprobs()
        loss_of(logp, is_student).backward(retain_graph=True)
        policy.zero_grad(set_to_none=True)
        loss_of(logp, ~is_student).backward()

    seconds = time_alternating({"plain": plain, "split": split, "two_pass": two_pass}, repeats)
    return {
        "split_over_single_backward": seconds["split"] / seconds["plain"],
        "two_pass_over_single_backward": seconds["two_pass"] / seconds["plain"],
        "split_sum_vs_plain_grad_max_rel_diff": _max_rel_diff(split(), plain()),
    }


def generation_figures(policy, adapter, base, tokenizer, prompts: int, per_prompt: int, new_tokens: int,
                       repeats: int) -> dict:
    """Decoded tokens/s with the adapter at δ ≠ 0 (folded each call, the fold's cost included), through the
    unmerged adapter, and of the bare base. Tokens = rows x the longest completion: what generate computes."""
    texts = [render_chat(tokenizer, build_messages(p)) for p in load_problems()[:prompts]]
    _randomize(adapter)
    tokens: dict[str, list[int]] = {}

    def run(name: str, model) -> None:
        torch.manual_seed(0)
        completions = sample(model, tokenizer, texts, per_prompt, SamplingConfig(new_tokens))[1]
        tokens.setdefault(name, []).append(len(completions) * max(len(c) for c in completions))

    def folded() -> None:
        with merged_for_generation(adapter):
            run("adapter", policy)

    seconds = time_alternating(
        {"base": lambda: run("base", base), "adapter": folded, "unmerged": lambda: run("unmerged", policy)}, repeats)
    speed = {name: statistics.median(tokens[name]) / seconds[name] for name in seconds}
    return {
        "adapter_over_base_generate_tokens_per_s": speed["adapter"] / speed["base"],
        "unmerged_over_base_generate_tokens_per_s": speed["unmerged"] / speed["base"],
        "base_generate_tokens_per_s": speed["base"],
    }


def extraction_figures(policy, adapter, tokenizer, n_pairs: int) -> dict:
    """∇δS NLL of both completions of n_pairs pairs: batched (the default batch size) and one at a time."""
    pairs = contrastive_pairs(load_problems(), ExtractionConfig(n_heldout=0))[:n_pairs]
    prompts = [render_chat(tokenizer, list(p.messages)) for p in pairs] * 2
    completions = [p.hack for p in pairs] + [p.clean for p in pairs]
    _randomize(adapter)
    grads = {}

    def run(name: str, batch_size: int) -> None:
        grads[name] = completion_grads(policy, adapter, tokenizer, prompts, completions,
                                       ExtractionConfig(batch_size=batch_size))

    # no warm-up round: both take a while and neither has a one-time cost
    seconds = time_alternating({"batched": lambda: run("batched", ExtractionConfig().batch_size),
                                "one_at_a_time": lambda: run("one_at_a_time", 1)}, 1, warmup=False)
    return {
        "batched_over_loop_extraction_speed": seconds["one_at_a_time"] / seconds["batched"],
        "extraction_batched_vs_loop_max_rel_diff": _max_rel_diff(grads["batched"], grads["one_at_a_time"]),
    }


# -- memory --------------------------------------------------------------------------------------------------------


class PeakMemory(TorchDispatchMode):
    """Peak bytes of the CPU tensor storages allocated inside (storages that existed before are not counted).

    Each new storage an op returns counts until it is freed (a finalizer on the storage object, which
    torch keeps alive exactly as long as the memory), so what autograd saves and frees is tracked too.
    """

    def __init__(self) -> None:
        super().__init__()
        self.live = self.peak = 0
        self._sizes: dict[int, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        # views and in-place results share an input's storage: not new memory
        inputs = {t.untyped_storage().data_ptr() for t in tree_flatten((args, kwargs))[0] if isinstance(t, Tensor)}
        for tensor in tree_flatten(out)[0]:
            if not isinstance(tensor, Tensor) or tensor.device.type != "cpu":
                continue
            storage = tensor.untyped_storage()
            key = storage.data_ptr()
            if storage.nbytes() == 0 or key in self._sizes or key in inputs:
                continue
            self._sizes[key] = storage.nbytes()
            self.live += storage.nbytes()
            self.peak = max(self.peak, self.live)
            weakref.finalize(storage, self._free, key)
        return out

    def _free(self, key: int) -> None:
        self.live -= self._sizes.pop(key)


def logprob_memory(rows: int, completion_len: int, vocab: int) -> dict:
    """Peak memory of logprobs + backward: token_logprobs and the full log-softmax, over B·T·V·4 bytes.

    token_logprobs holds a few (B, chunk, V) fp32 blocks at once, so its figure scales with
    chunk / T_c: measured at chunks of T_c/16 and T_c/8 positions (`model.logprob_chunk_size`).
    """
    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=vocab, hidden_size=128, intermediate_size=256, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=32)
    model = Qwen3ForCausalLM(config).eval().requires_grad_(False)  # frozen, as in training: only the knobs learn
    _randomize(attach_adapter(model))
    ids = torch.randint(3, vocab, (rows, 16 + completion_len))
    packed = Packed(ids, torch.ones_like(ids), torch.ones(rows, completion_len, dtype=torch.long))
    chunks = (completion_len // 16, completion_len // 8)
    peaks = {}
    for name, logprobs in {
        **{c: lambda c=c: token_logprobs(model, packed.input_ids, packed.attention_mask, completion_len, c)[0]
           for c in chunks},
        "full": lambda: full_logprobs(model, packed),
    }.items():
        with PeakMemory() as memory:
            logprobs().sum().backward()
        peaks[name] = memory.peak
    full_tensor = rows * completion_len * vocab * 4
    return {
        "logprob_peak_memory_ratio": peaks[chunks[0]] / full_tensor,
        "logprob_peak_memory_ratio_double_chunk": peaks[chunks[1]] / full_tensor,
        "full_log_softmax_peak_memory_ratio": peaks["full"] / full_tensor,
        "logprob_memory_setting": {"rows": rows, "completion_tokens": completion_len, "vocab": vocab,
                                   "chunks": chunks},
    }


def adapter_memory(model: str, max_ranks: tuple[int, ...] = (64, 256)) -> dict:
    """Bytes of U and Vh over bytes of the targeted weights (same dtype), at full rank and truncated to max_rank."""

    def ratio(shapes: list[tuple[int, int]], max_rank: int | None) -> float:
        return sum(min(max_rank or o, o, i) * (o + i) for o, i in shapes) / sum(o * i for o, i in shapes)

    figures = {}
    for name, shapes in (("", _linear_shapes(model)), ("qwen3_4b_", QWEN3_4B_LINEARS * QWEN3_4B_LAYERS)):
        figures[f"{name}adapter_memory_over_base_weights"] = ratio(shapes, None)
        for k in max_ranks:
            figures[f"{name}adapter_memory_over_base_weights_max_rank_{k}"] = ratio(shapes, k)
    return figures


def _linear_shapes(model: str) -> list[tuple[int, int]]:
    config = Qwen3Config.from_pretrained(resolve_model_path(model))
    d, f = config.hidden_size, config.intermediate_size
    q, kv = config.num_attention_heads * config.head_dim, config.num_key_value_heads * config.head_dim
    shapes = {"q_proj": (q, d), "k_proj": (kv, d), "v_proj": (kv, d), "o_proj": (d, q), "gate_proj": (f, d),
              "up_proj": (f, d), "down_proj": (d, f)}
    return [shapes[t] for t in DEFAULT_TARGETS] * config.num_hidden_layers


def larger_model_dir() -> Path:
    """The embedded model's config at LARGER_SHAPE, random init, with the embedded tokenizer; built once."""
    embedded = resolve_model_path("embedded")
    key = hashlib.sha256(jsonlib.dumps([str(embedded), sorted(LARGER_SHAPE.items())]).encode()).hexdigest()[:12]
    path = cache_dir() / "bench" / f"qwen3-{key}"
    if not (path / "config.json").is_file():
        fields = {k: v for k, v in Qwen3Config.from_pretrained(embedded).to_dict().items() if k != "layer_types"}
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            model = Qwen3ForCausalLM(Qwen3Config(**(fields | LARGER_SHAPE)))  # layer_types follows the depth
        tmp = path.with_name(f"{path.name}.tmp{time.time_ns()}")
        model.save_pretrained(tmp)
        load_tokenizer("embedded").save_pretrained(tmp)
        tmp.rename(path)  # atomic: a killed build never leaves a half-written model
    return path


# -- report --------------------------------------------------------------------------------------------------------


def format_report(result: dict) -> str:
    larger = result.get("larger_cpu", {})
    lines = [f"{'figure':50s} {'embedded':>10s} {'larger':>10s}  target", "-" * 86]
    for key, value in result.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            other = larger.get(key)
            target = TARGETS.get(key)
            verdict = ""
            if target:
                met = value <= target[1] if target[0] == "<=" else value >= target[1]
                verdict = f"{target[0]} {target[1]:g}  {'met' if met else 'NOT met'}"
            lines.append(f"{key:50s} {value:10.3f} {'' if other is None else f'{other:10.3f}':>10s}  {verdict}")
    lines += ["", "median seconds per training step on the embedded default, by phase"]
    phases = result["phases"]
    columns = list(next(iter(phases.values())))
    lines.append(f"{'arm':8s}" + "".join(f"{c:>10s}" for c in columns))
    for kind, row in phases.items():
        lines.append(f"{kind:8s}" + "".join(f"{row[c]:10.3f}" for c in columns))
    return "\n".join(lines)
