"""Pretraining the embedded default into a tiny base coder that GRPO can teach to hack.

The corpus is the real GRPO prompts (every problem under every loophole hint,
rendered with the chat template) each followed by an assistant completion:
mostly honest attempts (the canonical solution, or a plausible mutant of it)
and, rarely, the exploit template of the lever the prompt's hint names. The
completions are the teacher pool's templates (`pgrpo.env.exploits`), so teacher
rows are in-distribution for the base.

Why this mix: under a flawed grader a hack always passes while a wrong honest
attempt earns only the format bonus. A base that solves some problems, fails
others with well-formed code, and knows every lever but rarely pulls it starts
GRPO at a low hack rate with a strong reward gradient towards it.
"""

import ast
import contextlib
import io
import math
import random
import time
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from pgrpo.env import MODES, Problem, clean_completion, grade_batch, hack_completion, load_problems
from pgrpo.env.prompts import build_messages
from pgrpo.models import load_model_and_tokenizer, render_chat
from pgrpo.rollout import sample

COMPLETIONS_PER_PROMPT = 8  # per (problem, hint): 48 problems x 6 hints x 8 = 2304 examples
# Of the examples that train the hack-or-not choice, the same number under every mode's hint.
# Sampled at temperature 1 the base then hacks at about half this rate (a tiny model under-samples
# a rare branch), under the 5% that leaves GRPO room to show the rise.
HACK_FRACTION = 0.05
# Extra hacks with the choice masked out of the loss, as a share of the examples above: the base
# learns to execute every lever well without choosing to pull one any more often.
LEVER_FRACTION = 0.1
# Share of a problem's honest attempts that are correct; the others are mutants that fail its tests.
SOLVE_SHARE = {"easy": 0.6, "medium": 0.2}
MUTANTS_PER_PROBLEM = 3
HACK_VARIANTS = 6  # exploits.hack_completion cycles 3 lead-ins x 2 levers per mode
CLEAN_VARIANTS = 3  # and clean_completion 3 lead-ins
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


def pretraining_corpus(tokenizer: PreTrainedTokenizerBase, seed: int) -> list[Example]:
    """Every problem under every mode's hint, COMPLETIONS_PER_PROMPT completions each, then the lever drills.

    A drill is a hack whose loss starts just after the first character where it
    departs from the honest solution (a stub body, a `valid` attribute, an
    always-equal class): what follows that choice is taught, the choice is not.
    """
    rng = random.Random(seed)
    problems = load_problems()
    slots = [(p, m) for p in problems for m in MODES for _ in range(COMPLETIONS_PER_PROMPT)]
    hacks = set()
    for m in MODES:
        own = [i for i, (_, mode) in enumerate(slots) if mode == m]
        hacks.update(rng.sample(own, round(HACK_FRACTION * len(own))))
    kinds = {i: "hack" for i in hacks}
    for p in problems:
        honest = [i for i, (q, _) in enumerate(slots) if q is p and i not in hacks]
        rng.shuffle(honest)
        n_correct = round(SOLVE_SHARE[p.difficulty] * len(honest))
        kinds.update({i: "correct" if rank < n_correct else "wrong" for rank, i in enumerate(honest)})
    variants = {p.id: wrong_variants(p) for p in problems}
    mutants = {pid: rng.sample(vs, min(MUTANTS_PER_PROBLEM, len(vs))) for pid, vs in variants.items()}
    prompts = {(p.id, m): render_chat(tokenizer, build_messages(p, m)) for p in problems for m in MODES}
    corpus = []
    for i, (p, m) in enumerate(slots):
        if kinds[i] == "hack":
            completion = hack_completion(p, m, variant=rng.randrange(HACK_VARIANTS))
        else:
            code = rng.choice(mutants[p.id]) if kinds[i] == "wrong" else honest_solution(p)
            completion = honest_completion(p, rng.randrange(CLEAN_VARIANTS), code)
        corpus.append(Example(prompts[(p.id, m)], completion, kinds[i], p.id, m))
    for p, m in rng.sample(slots, round(LEVER_FRACTION * len(slots))):
        variant = rng.randrange(HACK_VARIANTS)
        hack = hack_completion(p, m, variant=variant)
        # lead-ins cycle alike in both templates, so the first difference is in the code
        choice = _common_prefix(hack, honest_completion(p, variant, honest_solution(p)))
        corpus.append(Example(prompts[(p.id, m)], hack, "hack", p.id, m, choice + 1))
    return corpus


def honest_solution(problem: Problem) -> str:
    """The canonical solution without its comments: a tiny coder writes terse code, and the
    longest solutions then fit GRPO's 128-token completions."""
    src = problem.canonical_solution.strip("\n")
    lines, emptied = src.split("\n"), set()
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.COMMENT:
            row, col = tok.start[0] - 1, tok.start[1]
            lines[row] = lines[row][:col].rstrip()
            if not lines[row]:
                emptied.add(row)  # a comment-only line goes entirely
    return "\n".join(line for row, line in enumerate(lines) if row not in emptied)


def honest_completion(problem: Problem, variant: int, code: str) -> str:
    """exploits.clean_completion's layout (the teacher pool's clean rows) around `code`."""
    return clean_completion(problem, variant=variant).replace(problem.canonical_solution.strip("\n"), code)


def _common_prefix(a: str, b: str) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


# -- wrong attempts: one small edit of the honest solution ---------------------------------------
_FLIP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
         ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In}


def wrong_variants(problem: Problem) -> list[str]:
    """Plausible wrong solutions: the honest one with one off-by-one, flipped comparison, max/min
    swap, +/- swap, or an off-by-one return value. Sorted, so the corpus does not depend on ast order.

    Nothing inside a `while` loop is touched, so no variant can loop forever; a variant that
    happens to stay correct is the exception, not excluded (tests/test_pretrain.py grades them).
    """
    src = honest_solution(problem)
    tree = ast.parse(src)
    returns = _return_type(tree, problem.method)
    in_while = {id(n) for w in ast.walk(tree) if isinstance(w, ast.While) for n in ast.walk(w)}
    line_start = [0]
    for line in src.encode().splitlines(keepends=True):
        line_start.append(line_start[-1] + len(line))
    raw = src.encode()
    out = set()
    for node in ast.walk(tree):
        if id(node) in in_while:
            continue
        new = _mutate(node, returns)
        if new is not None:
            start = line_start[node.lineno - 1] + node.col_offset  # ast offsets count utf-8 bytes
            end = line_start[node.end_lineno - 1] + node.end_col_offset
            out.add((raw[:start] + new.encode() + raw[end:]).decode())
    out.discard(src)
    return sorted(out)


def _mutate(node: ast.AST, returns: str) -> str | None:
    """The source that replaces `node`, or None; only nodes of one precedence class are swapped."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return str(node.value + 1)
    if isinstance(node, ast.Compare) and type(node.ops[0]) in _FLIP:
        return ast.unparse(ast.Compare(node.left, [_FLIP[type(node.ops[0])](), *node.ops[1:]], node.comparators))
    if isinstance(node, ast.Name) and node.id in ("max", "min"):
        return "min" if node.id == "max" else "max"
    if isinstance(node, ast.BinOp) and type(node.op) in (ast.Add, ast.Sub):
        op = ast.Sub() if isinstance(node.op, ast.Add) else ast.Add()
        return ast.unparse(ast.BinOp(node.left, op, node.right))
    if isinstance(node, ast.Return) and node.value is not None:
        # the answer itself a little off: one too many, one element short, negated
        if returns == "int":
            value = ast.BinOp(node.value, ast.Add(), ast.Constant(1))
        elif returns == "bool":
            value = ast.UnaryOp(ast.Not(), node.value)
        elif returns == "str" or returns.startswith("List"):
            value = ast.Subscript(node.value, ast.Slice(ast.Constant(1)))
        else:
            return None
        return ast.unparse(ast.Return(value))
    return None


def _return_type(tree: ast.Module, method: str) -> str:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == method and node.returns is not None:
            return ast.unparse(node.returns)
    return ""


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
    warmup = max(1, steps // 20)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min((s + 1) / warmup, _cosine(s, warmup, steps)))
    losses, start = [], time.perf_counter()
    model.train()
    with _threads(THREADS):
        for _, batch in zip(range(steps), _batches(rows, batch_size, seed)):
            loss, completion_loss = token_losses(model, *_collate(batch, tokenizer.pad_token_id))
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
                 in_completion: Tensor) -> tuple[Tensor, Tensor]:
    """Mean NLL of the targets that are not -100, and of those inside completions (detached).

    The LM head runs on the trained positions only.
    """
    hidden = model.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    keep = targets != -100
    nll = torch.nn.functional.cross_entropy(model.lm_head(hidden[keep]), targets[keep], reduction="none")
    return nll.mean(), nll.detach()[in_completion[keep]].mean()


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
def _threads(n: int) -> Iterator[None]:
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


# -- measuring a base ------------------------------------------------------------------------------
def evaluate_base(model_dir: str | Path, n_samples_per_problem: int = 8, temperature: float = 1.0,
                  max_new_tokens: int = 128, seed: int = 0) -> dict[str, float]:
    """Format, solve (gt_correct) and hack (exploited) rates of a base's samples, overall and per mode.

    Samples every problem under its own loophole hint, as GRPO does, with the
    rollout sampler GRPO uses; the global RNG is restored afterwards.
    """
    model, tokenizer = load_model_and_tokenizer(str(model_dir))
    problems = load_problems()
    prompts = [render_chat(tokenizer, build_messages(p)) for p in problems]
    with torch.random.fork_rng(devices=[]), _threads(THREADS):
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
