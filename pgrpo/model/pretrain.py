"""Pretraining the embedded default into a tiny base coder that GRPO can teach to hack.

The corpus is the real GRPO prompts (every problem under every loophole hint,
rendered with the chat template) each followed by an assistant completion: an
honest attempt (the canonical solution, or a plausible mutant of it) and,
rarely, a hack: a stub or an attempt followed by the lever the prompt's hint
names. The attempts, stubs and levers are the teacher pool's
(`pgrpo.env.attempts`, `pgrpo.env.exploits`), so teacher rows are
in-distribution for the base.

Why this mix: under a flawed grader a hack always passes while a wrong honest
attempt earns only the format bonus. A base that solves some problems, fails
others with well-formed code, and knows every lever but rarely pulls it starts
GRPO at a low hack rate with a strong reward gradient towards it.
"""

import contextlib
import math
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import Tensor
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from pgrpo.chat import render_chat
from pgrpo.env import MODES, NO_LOOPHOLE, load_problems
from pgrpo.env.attempts import honest_solution, wrong_variants
from pgrpo.env.exploits import LEAD_INS, completion, pull_lever, stub_solution
from pgrpo.env.prompts import build_messages

COMPLETIONS_PER_PROMPT = 8  # per (problem, hint): 48 problems x 6 hints x 8 = 2304 examples
# Of the examples that train the hack-or-not choice, the same number under every mode's hint.
# The base then samples an exploit about 4% of the time under its own hint.
HACK_FRACTION = 0.05
# Extra hacks with the choice masked out of the loss, as a share of the examples above: the base
# learns which lever a hint names and how to write it without choosing to pull one any more often.
# With the lever right after the choice line, near the hint (exploits.pull_lever), and 450 steps:
# at 0.5 and 300 steps the named lever's first token got 0.44 of the six levers' probability and
# 12 of 38 sampled levers were the named one; at 1.0 and 450 steps, 0.83 and 108 of 108, and the
# base still solves 0.39 of its samples.
LEVER_FRACTION = 1.0
# Share of hacks (and drills) that give up at once: a stub Solution, then the lever. The other hacks
# write their attempt first. A stub always parses, while the tiny base breaks the syntax of about
# two thirds of its attempts, so the stub is the path on which a lever reliably pays.
STUB_SHARE = 0.5
# Share of a problem's honest attempts that are correct; the others are mutants that fail its tests.
SOLVE_SHARE = {"easy": 0.6, "medium": 0.2}
MUTANTS_PER_PROBLEM = 3
VARIANTS = len(LEAD_INS)  # exploits.completion cycles its lead-ins
# Pinned rather than os.cpu_count(): a BLAS may split a sum differently over more threads, and
# 2 is what the target machines have.
THREADS = 2


@dataclass(frozen=True)
class Example:
    prompt: str  # chat-rendered, ending where the assistant's reply begins
    completion: str
    kind: str  # "correct", "wrong" (an honest mutant) or "hack"
    problem_id: str
    mode: str  # the loophole mode the prompt's hint discloses
    loss_from: int = 0  # completion tokens that start before this character offset are not trained on


def pretraining_corpus(tokenizer: PreTrainedTokenizerBase, seed: int, openings: str = "shared") -> list[Example]:
    """Every problem under every mode's hint and with no hint, COMPLETIONS_PER_PROMPT completions each, then the
    lever drills.

    Every completion is an honest attempt, correct or a wrong mutant at the
    problem's SOLVE_SHARE; under a hint, a HACK_FRACTION of them pull the lever
    it names (exploits.pull_lever: the choice line, the lever, then the code),
    half of them (STUB_SHARE) giving the attempt up for a stub. A drill is such
    a hack whose loss starts just after the choice, the first character where it
    departs from an honest attempt: how to hack, and with which lever, is taught;
    the choice to is not. The prompts without a hint (the honest arm's) get
    honest attempts only. Hacks open as `openings` says (exploits.OPENINGS).
    """
    rng = random.Random(seed)
    problems = load_problems()
    slots = [(p, m) for p in problems for m in MODES for _ in range(COMPLETIONS_PER_PROMPT)]
    hacks = set()
    for m in MODES:
        own = [i for i, (_, mode) in enumerate(slots) if mode == m]
        hacks.update(rng.sample(own, round(HACK_FRACTION * len(own))))
    correct = set()
    for p in problems:
        own = [i for i, (q, _) in enumerate(slots) if q is p]
        correct.update(rng.sample(own, round(SOLVE_SHARE[p.difficulty] * len(own))))
    mutants = {p.id: rng.sample(vs, min(MUTANTS_PER_PROBLEM, len(vs))) for p in problems
               for vs in [wrong_variants(p)]}
    neutral = [(p, NO_LOOPHOLE) for p in problems for _ in range(COMPLETIONS_PER_PROMPT)]
    for p in problems:
        own = [len(slots) + i for i, (q, _) in enumerate(neutral) if q is p]
        correct.update(rng.sample(own, round(SOLVE_SHARE[p.difficulty] * len(own))))
    prompts = {(p.id, m): render_chat(tokenizer, build_messages(p, m)) for p in problems
               for m in (*MODES, NO_LOOPHOLE)}
    corpus = []
    for i, (p, m) in enumerate(slots + neutral):
        code = honest_solution(p) if i in correct else rng.choice(mutants[p.id])
        variant = rng.randrange(VARIANTS)
        kind = "correct" if i in correct else "wrong"
        if i in hacks:
            stub = rng.random() < STUB_SHARE
            code, kind = pull_lever(p, m, stub_solution(p, rng.randrange(2)) if stub else code, openings), "hack"
        corpus.append(Example(prompts[(p.id, m)], completion(code, variant), kind, p.id, m))
    for p, m in rng.sample(slots, round(LEVER_FRACTION * len(slots))):
        variant = rng.randrange(VARIANTS)
        # the choice is where the hack departs from an honest attempt: the code block's first line
        stub = rng.random() < STUB_SHARE
        honest = honest_solution(p) if stub else rng.choice(mutants[p.id])
        code = stub_solution(p, rng.randrange(2)) if stub else honest
        hack = completion(pull_lever(p, m, code, openings), variant)
        choice = _common_prefix(hack, completion(honest, variant))
        corpus.append(Example(prompts[(p.id, m)], hack, "hack", p.id, m, choice + 1))
    return corpus


def _common_prefix(a: str, b: str) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


# -- training --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PretrainStats:
    steps: int
    first_loss: float  # mean NLL of the trained tokens in the first step's batch
    final_loss: float  # the same, averaged over the last 10% of steps
    final_completion_loss: float  # over completion tokens only, last 10% of steps
    seconds: float


def pretrain(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, corpus: list[Example], steps: int,
             lr: float, batch_size: int, seed: int) -> PretrainStats:
    """AdamW with linear warmup and cosine decay over every token but a lever drill's choice, in place.

    The prompt tokens are trained too, though GRPO never asks the model to write
    them: the starter code repeats the method name and arguments of the
    statement, and learning to predict those copies is what teaches a tiny model
    to read which problem it is answering (after 400 steps at the same lr, the
    method name in the completion costs 0.09 nats with prompt loss and 0.17
    without; at lr 6e-3, 0.02). Deterministic: batches come from a private
    generator, there is no dropout, and the thread count is pinned while it runs;
    the global RNG is not touched.
    """
    rows = encode(tokenizer, corpus)
    levers = lever_choices(rows)
    warmup = max(1, steps // 20)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min((s + 1) / warmup, _cosine(s, warmup, steps)))
    losses, start = [], time.perf_counter()
    model.train()
    with threads(THREADS):
        for _, batch in zip(range(steps), _batches(rows, batch_size, seed)):
            choice = _choice_targets(batch, levers) if len(levers) > 1 else None
            loss, completion_loss = token_losses(model, *_collate(batch, tokenizer.pad_token_id), choice)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            losses.append((loss.item(), completion_loss.item()))
    model.eval()
    tail = losses[-max(1, steps // 10):]
    return PretrainStats(steps, losses[0][0], sum(a for a, _ in tail) / len(tail),
                         sum(b for _, b in tail) / len(tail), time.perf_counter() - start)


def token_losses(model: PreTrainedModel, input_ids: Tensor, attention_mask: Tensor, targets: Tensor,
                 in_completion: Tensor, choice: tuple[tuple[Tensor, Tensor], Tensor, Tensor] | None = None
                 ) -> tuple[Tensor, Tensor]:
    """Mean NLL of the targets that are not -100, and of those inside completions (detached).

    `choice` (see lever_choices) adds the drills' masked choice tokens, each scored only against the other
    levers' choice tokens, to the mean as one token each. The LM head runs on the trained positions only.
    """
    hidden = model.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    keep = targets != -100
    nll = torch.nn.functional.cross_entropy(model.lm_head(hidden[keep]), targets[keep], reduction="none")
    completion_loss = nll.detach()[in_completion[keep]].mean()
    if choice is None:
        return nll.mean(), completion_loss
    (rows, positions), picked, candidates = choice
    logits = model.lm_head(hidden[rows, positions])[:, candidates]  # (drills, levers)
    choice_nll = torch.nn.functional.cross_entropy(logits, picked, reduction="none")
    return torch.cat([nll, choice_nll]).mean(), completion_loss


def lever_choices(rows: list[tuple[list[int], list[int], int]]) -> list[int]:
    """The distinct tokens the lever drills mask as their choice (the last token they mask), sorted.

    Where every hack opens alike (exploits.CHOICE) there is one, and the drills teach which lever a hint
    names in the tokens after it. Where each lever opens with a token of its own (exploits.DISTINCT_LEVERS)
    that token is both the choice to hack and which lever: pretrain then scores it against the other levers'
    choice tokens only, a softmax over them alone, which teaches which lever a hint names and leaves how likely
    hacking is (the levers' total probability against an honest `class`) to the corpus's few unmasked hacks.
    """
    return sorted({completion[skip - 1] for _, completion, skip in rows if skip})


def _choice_targets(batch: list, levers: list[int]) -> tuple[tuple[Tensor, Tensor], Tensor, Tensor]:
    """For the batch's drills: (row, position) that predicts the choice token, its index in `levers`, and
    `levers` (positions as _collate lays the batch out)."""
    drills = [(r, len(p) - 2 + skip, levers.index(c[skip - 1])) for r, (p, c, skip) in enumerate(batch) if skip]
    at = torch.tensor([(r, t) for r, t, _ in drills], dtype=torch.long).reshape(-1, 2)  # (drills, 2)
    picked = torch.tensor([i for _, _, i in drills], dtype=torch.long)
    return (at[:, 0], at[:, 1]), picked, torch.tensor(levers)


def _cosine(step: int, warmup: int, steps: int) -> float:
    progress = (step - warmup) / max(1, steps - warmup)
    return 0.1 + 0.45 * (1 + math.cos(math.pi * min(1.0, max(0.0, progress))))  # decays to 10% of lr


def encode(tokenizer: PreTrainedTokenizerBase, corpus: list[Example]) -> list[tuple[list[int], list[int], int]]:
    """Per example: (prompt ids, completion ids + EOS, how many leading completion tokens carry no loss)."""
    # Tokenized apart, as at GRPO time: the prompt is encoded alone and the completion continues it.
    unique = sorted({ex.prompt for ex in corpus})
    prompt_ids = dict(zip(unique, tokenizer(unique, add_special_tokens=False)["input_ids"]))
    enc = tokenizer([ex.completion for ex in corpus], add_special_tokens=False, return_offsets_mapping=True)
    return [
        (prompt_ids[ex.prompt], ids + [tokenizer.eos_token_id], sum(start < ex.loss_from for start, _ in offsets))
        for ex, ids, offsets in zip(corpus, enc["input_ids"], enc["offset_mapping"])
    ]


def _batches(rows: list, batch_size: int, seed: int) -> Iterator[list]:
    """Endless epochs of shuffled batches of similar length (less padding), in a seeded order."""
    gen = torch.Generator().manual_seed(seed)
    while True:
        order = torch.randperm(len(rows), generator=gen).tolist()
        window = batch_size * 16
        batches = []
        for w in range(0, len(order), window):
            chunk = sorted(order[w : w + window], key=lambda i: len(rows[i][0]) + len(rows[i][1]))
            batches += [chunk[b : b + batch_size] for b in range(0, len(chunk), batch_size)]
        for b in torch.randperm(len(batches), generator=gen).tolist():
            yield [rows[i] for i in batches[b]]


def _collate(batch: list, pad_id: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Right-padded ids, their mask, next-token targets (-100 on padding and masked tokens), and
    which positions predict a completion token."""
    width = max(len(p) + len(c) for p, c, _ in batch)
    ids = torch.full((len(batch), width), pad_id)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    targets = torch.full((len(batch), width), -100)
    in_completion = torch.zeros((len(batch), width), dtype=torch.bool)
    for r, (p, c, skip) in enumerate(batch):
        seq = torch.tensor(p + c)
        ids[r, : len(seq)] = seq
        mask[r, : len(seq)] = 1
        targets[r, : len(seq) - 1] = seq[1:]  # position t predicts token t + 1
        targets[r, len(p) - 1 : len(p) - 1 + skip] = -100  # a lever drill's masked choice
        in_completion[r, len(p) - 1 : len(seq) - 1] = True
    return ids, mask, targets, in_completion


@contextlib.contextmanager
def threads(n: int) -> Iterator[None]:
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)
