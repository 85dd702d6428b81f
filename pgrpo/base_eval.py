"""How well a base codes, solves and hacks: `pgrpo build-base` prints this after building the embedded default.

Apart from pretraining on purpose: the embedded default's cache key hashes the pretraining code, so an edit
here must not rebuild the base (and invalidate every V extracted from it).
"""

from pathlib import Path

import torch

from pgrpo.chat import render_chat
from pgrpo.env import MODES, grade_batch, load_problems
from pgrpo.env.prompts import build_messages
from pgrpo.models import load_model_and_tokenizer
from pgrpo.pretrain import THREADS, threads
from pgrpo.rollout import sample


def evaluate_base(model_dir: str | Path, n_samples_per_problem: int = 8, temperature: float = 1.0,
                  max_new_tokens: int = 128, seed: int = 0) -> dict[str, float]:
    """Format, solve (gt_correct) and hack (exploited) rates of a base's samples, overall and per mode.

    Samples every problem under its own loophole hint, as GRPO does, with the
    rollout sampler GRPO uses; the global RNG is restored afterwards.
    """
    model, tokenizer = load_model_and_tokenizer(str(model_dir))
    problems = load_problems()
    prompts = [render_chat(tokenizer, build_messages(p)) for p in problems]
    with torch.random.fork_rng(devices=[]), threads(THREADS):
        torch.manual_seed(seed)
        _, completions, clipped = sample(model, tokenizer, prompts, n_samples_per_problem, max_new_tokens,
                                         temperature, top_p=1.0)
    texts = tokenizer.batch_decode(completions, skip_special_tokens=True)
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
