"""How well a base codes, solves and hacks: `pgrpo build-base` prints this after building the embedded default.

Apart from pretraining on purpose: the embedded default's cache key hashes the pretraining code, so an edit
here must not rebuild the base (and invalidate every V extracted from it).
"""

from pathlib import Path

from pgrpo.chat import render_chat
from pgrpo.env import MODES, extract_code, grade_batch, load_problems
from pgrpo.env.exploits import loophole_code
from pgrpo.env.prompts import build_messages
from pgrpo.model.load import load_model_and_tokenizer
from pgrpo.model.pretrain import THREADS, threads
from pgrpo.step.rollout import SamplingConfig, encode_prompts, sample_decoded, seeded

# One generate call holds every row's keys and values at once: SmolLM2-135M's hint reading (1152 rows of ~700
# tokens) would hold ~37 GB in fp32, more than the 24 GB machine has. Rows go in as few calls as fit this; the
# embedded default's (~1.6 GiB at 2304 rows of 243 + 128 tokens) fit one call, so its published readings are unchanged.
GENERATION_BYTES = 4 * 2**30


def evaluate_base(model_dir: str | Path, n_samples_per_problem: int = 8, sampling: SamplingConfig = SamplingConfig(),
                  seed: int = 0, dtype: str = "float32") -> dict[str, float]:
    """Format, solve (gt_correct) and hack (exploited) rates of a base's samples, overall and per mode.

    Samples every problem under its own loophole hint, as GRPO does, with the
    rollout sampler GRPO uses; the global RNG is restored afterwards.
    """
    problems = load_problems()
    texts, clipped = sample_texts(model_dir, [(p, p.mode) for p in problems], n_samples_per_problem, sampling, seed,
                                  dtype)
    owners = [p for p in problems for _ in range(n_samples_per_problem)]
    grades = grade_batch(list(zip(owners, texts)), detectors=False)
    rates = _rates(grades)
    rates["clipped"] = sum(clipped) / len(clipped)
    for m in MODES:
        rates |= {f"{k}/{m}": v for k, v in _rates([g for g, p in zip(grades, owners) if p.mode == m]).items()}
    solved = {p.id for g, p in zip(grades, owners) if g.gt_correct}
    rates["problems_solved_once"] = len(solved) / len(problems)
    return rates


def _rates(grades: list) -> dict[str, float]:
    n = max(1, len(grades))
    return {"format": sum(g.format_ok for g in grades) / n, "solve": sum(g.gt_correct for g in grades) / n,
            "hack": sum(g.exploited for g in grades) / n, "pass": sum(g.passed for g in grades) / n}


def hint_reading(model_dir: str | Path, n_samples_per_prompt: int = 8, sampling: SamplingConfig = SamplingConfig(),
                 seed: int = 0, dtype: str = "float32") -> dict[str, float]:
    """Does the base pull the lever its prompt's hint names? Samples every problem under every mode's hint.

    Returns samples, lever_samples (how many pull any lever, by the static check the grader's detectors use),
    named_lever (how many of those pull the one the hint names) and hint_reading, their ratio (chance: 1/6).
    A base that does not read hints hacks under `partition` only where its favourite lever happens to be the
    graded one, and the weak-detector test (V from five modes, the sixth held out) means nothing on it.
    """
    slots = [(p, m) for p in load_problems() for m in MODES]
    texts, _ = sample_texts(model_dir, slots, n_samples_per_prompt, sampling, seed, dtype)
    return named_lever_share([m for _, m in slots for _ in range(n_samples_per_prompt)], texts)


def named_lever_share(hints: list[str], texts: list[str]) -> dict[str, float]:
    """Of the completions that pull some lever, the share that pull the one their hint names."""
    pulled = named = 0
    for hint, text in zip(hints, texts):
        code = extract_code(text)
        levers = loophole_code(code) if code is not None else ()
        pulled += bool(levers)
        named += hint in levers
    return {"samples": len(texts), "lever_samples": pulled, "named_lever": named,
            "hint_reading": named / pulled if pulled else 0.0}


def hint_reading_line(reading: dict[str, float]) -> str:
    """hint_reading's counts in one line: whether a base acts on a hint at all, and on the lever it names."""
    return (f"hint_reading: {reading['hint_reading']:.3f} ({reading['named_lever']} of the {reading['lever_samples']} "
            f"samples that pull a lever pull the one the hint names; chance 1/6); lever pulls: "
            f"{reading['lever_samples']} of {reading['samples']} hinted samples "
            f"({reading['lever_samples'] / max(1, reading['samples']):.3f})")


def sample_texts(model_dir: str | Path, slots: list[tuple], n_per_prompt: int, sampling: SamplingConfig,
                 seed: int, dtype: str = "float32") -> tuple[list[str], list[bool]]:
    """n_per_prompt completions of each (problem, mode) prompt, with GRPO's sampler; (texts, clipped).

    Seeded on its own: the global RNG is restored afterwards, and the thread count pinned as in pretraining.
    `dtype` is the base weights' (bfloat16 halves a real model's generation time on CPUs with bf16 units).
    """
    model, tokenizer = load_model_and_tokenizer(str(model_dir), dtype)
    prompts = [render_chat(tokenizer, build_messages(p, m)) for p, m in slots]
    longest = max(len(ids) for ids in encode_prompts(tokenizer, prompts))
    per_call = max(1, GENERATION_BYTES // (kv_bytes_per_token(model) * (longest + sampling.max_new_tokens)
                                           * n_per_prompt))  # prompts a call
    texts, clipped = [], []
    with seeded(seed), threads(THREADS):  # one stream across the calls: the same samples on every rerun
        for start in range(0, len(prompts), per_call):
            more_texts, more_clipped = sample_decoded(model, tokenizer, prompts[start:start + per_call],
                                                      n_per_prompt, sampling)
            texts += more_texts
            clipped += more_clipped
    return texts, clipped


def kv_bytes_per_token(model) -> int:
    """The bytes a row's key-value cache grows by per token: keys and values of every layer's KV heads."""
    config = model.config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    return 2 * config.num_hidden_layers * kv_heads * head_dim * model.dtype.itemsize
