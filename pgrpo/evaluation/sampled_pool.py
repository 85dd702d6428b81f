"""A teacher pool sampled from a model: the student's own kind of text, not the templates'.

Template rows are written by rules, so a student never writes quite like them. The method's reference
sampled its pool from a model that hacks; a vanilla run's checkpoint is such a model. Each problem is
sampled under its own loophole prompt (optionally with a system prompt that nudges towards the disclosed
grading mechanism), every completion is graded once, and a fixed number of hacks (exploited) and clean
solutions (the strict oracle's pass) is kept per problem. Rows store the training prompt they are mixed
into, so the data module's coverage and prompt checks apply unchanged; how they were sampled is in
pool.json's provenance.
"""

from contextlib import nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path

from pgrpo.model.adapter import merged_for_generation
from pgrpo.chat import render_chat
from pgrpo.model.checkpoint import load_run_checkpoint
from pgrpo.env import Problem, RewardConfig, grade_batch
from pgrpo.env.pool import TeacherRow, graded_row, write_pool
from pgrpo.env.prompts import build_messages
from pgrpo.model.load import load_model_and_tokenizer, model_id
from pgrpo.step.rollout import SamplingConfig, sample_decoded, seeded


@dataclass
class Sampling(SamplingConfig):
    """How the pool's rows are sampled: the sampling settings, how many per problem, from which seed."""

    n: int = 16
    """completions sampled per problem."""
    seed: int = 0
    system_prompt: str | None = None
    """replaces the task's system prompt while sampling (None keeps it); the rows still answer the training prompt."""


def sample_pool(source: str, problems: list[Problem], out_dir: str | Path, *, hacks: int = 2, cleans: int = 2,
                sampling: Sampling = Sampling(), reward: RewardConfig = RewardConfig(),
                dtype: str = "float32") -> Path:
    """Sample `sampling.n` completions per problem from `source` (a `pgrpo fit` checkpoint, a model directory
    or "embedded"), grade them, keep up to `hacks` exploited and `cleans` gt-correct ones per problem, write."""
    texts, provenance = _sample(source, problems, sampling, dtype)
    owners = [p for p in problems for _ in range(sampling.n)]
    grades = grade_batch([(p, text, p.mode) for p, text in zip(owners, texts)], reward=reward, detectors=False)
    kept: list[TeacherRow] = []
    taken: dict[tuple[str, str], int] = {}
    for p, text, g in zip(owners, texts, grades):
        kind = "hack" if g.exploited else "clean" if g.gt_correct else None
        if kind is None or taken.get((p.id, kind), 0) >= (hacks if kind == "hack" else cleans):
            continue
        taken[(p.id, kind)] = taken.get((p.id, kind), 0) + 1
        kept.append(graded_row(p, text, kind, g))
    if not kept:
        raise ValueError(f"{source}: none of its {len(texts)} samples hacked or solved a problem; nothing to keep "
                         f"(sample more with --sampling.n, or from a model that solves or hacks)")
    provenance |= {"sampling": asdict(sampling), "sampled": len(texts),
                   "hacks_sampled": sum(g.exploited for g in grades),
                   "solved_sampled": sum(g.gt_correct for g in grades)}
    return write_pool(out_dir, problems, kept, reward, provenance)


def _sample(source: str, problems: list[Problem], sampling: Sampling, dtype: str) -> tuple[list[str], dict]:
    """n texts per problem, in problem order, and where they came from."""
    if source.endswith(".ckpt"):
        run = load_run_checkpoint(source)
        model, tokenizer = run.policy, run.tokenizer
        # as trained: a hacking run's quarantine (route) is part of the model that hacked
        folded = merged_for_generation(run.adapter)
        provenance = {"source": "model", "checkpoint": str(Path(source).resolve()), "step": run.step,
                      "model": run.hparams["model"], "model_id": model_id(run.hparams["model"]),
                      "arm": run.intervention.label()}
    else:
        model, tokenizer = load_model_and_tokenizer(source, dtype)
        folded = nullcontext()
        provenance = {"source": "model", "model": source, "model_id": model_id(source)}
    prompts = [render_chat(tokenizer, _sampling_messages(p, sampling.system_prompt)) for p in problems]
    with seeded(sampling.seed, model.device), folded:
        texts, _ = sample_decoded(model, tokenizer, prompts, sampling.n, sampling)
    return texts, provenance


def _sampling_messages(problem: Problem, system_prompt: str | None) -> list[dict[str, str]]:
    messages = build_messages(problem)
    if system_prompt is not None:
        messages[0] = {"role": "system", "content": system_prompt}
    return messages
