"""Student sampling and the token layout every logprob pass uses.

Layout (as TRL): each row is a left-padded prompt followed by a right-padded
completion, so the completion is always the last T_c columns and
`token_logprobs(..., logits_to_keep=T_c)` reads it directly.
"""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor
from transformers.generation.streamers import BaseStreamer

from pgrpo.model.hf_compat import cache_name


@dataclass
class SamplingConfig:
    """How completions are sampled, wherever pgrpo samples (each field's docstring is its `--help`)."""

    max_new_tokens: int = 128
    """Completion budget; in training also Dr.GRPO's fixed denominator."""
    temperature: float = 1.0
    """Sampling temperature; in training the loss and V's extraction score logprobs at the same temperature."""
    top_p: float = 1.0
    """Nucleus sampling threshold (1: off)."""


@dataclass
class Packed:
    input_ids: Tensor  # (B, T_p + T_c)
    attention_mask: Tensor  # (B, T_p + T_c)
    completion_mask: Tensor  # (B, T_c): real completion tokens, EOS included, padding excluded
    prompt_of_row: Tensor | None = None  # (B,): rows with one value share their prompt's forward (token_logprobs)

    @property
    def completion_len(self) -> int:
        return self.completion_mask.shape[1]

    def to(self, device: torch.device | str) -> "Packed":
        return Packed(self.input_ids.to(device), self.attention_mask.to(device), self.completion_mask.to(device),
                      None if self.prompt_of_row is None else self.prompt_of_row.to(device))

    def rows(self, index: Tensor) -> "Packed":
        """These rows, cut to their own longest prompt and completion: the columns that only other rows'
        tokens needed are padding here, and would cost attention and logprobs for nothing."""
        mask, completion = self.attention_mask[index], self.completion_mask[index]
        prompt_width = mask.shape[1] - completion.shape[1]
        # leading columns no row's prompt reaches; the completion's columns up to its longest row
        lead = int((~mask[:, :prompt_width].any(0)).int().cumprod(0).sum()) if len(index) else 0
        width = max(1, int(completion.sum(1).max())) if len(index) else completion.shape[1]
        columns = slice(lead, prompt_width + width)
        shared = self.prompt_of_row[index] if self.prompt_of_row is not None else None
        return Packed(self.input_ids[index, columns], mask[:, columns], completion[:, :width], shared)


def encode_prompts(tokenizer, prompts: list[str]) -> list[list[int]]:
    """Prompt token ids as every pass sees them: generation, V's extraction and the teacher pool's prefix check
    all encode prompts here, so the same prompt never has two contexts.

    A chat template writes the special tokens its model needs (Llama 3's opens with its BOS), so text it
    rendered is encoded as is; plain text (no template) gets the tokenizer's own, such as a BOS.
    """
    return tokenizer(prompts, add_special_tokens=not tokenizer.chat_template)["input_ids"]


def left_pad(rows: list[list[int]], pad_id: int) -> tuple[Tensor, Tensor]:
    """(ids, attention mask), both (B, max len), rows flush right."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        if r:
            ids[i, width - len(r) :] = torch.tensor(r)
            attention[i, width - len(r) :] = 1
    return ids, attention


def pack(prompts: list[list[int]], completions: list[list[int]], pad_id: int) -> Packed:
    """Left-pad prompts, right-pad completions, concatenate."""
    if len(prompts) != len(completions):
        raise ValueError(f"{len(prompts)} prompts but {len(completions)} completions")
    if any(len(c) == 0 for c in completions):
        raise ValueError("every completion needs at least one token (append EOS)")
    prompt_ids, prompt_mask = left_pad(prompts, pad_id)  # (B, T_p)
    completion_ids = torch.full((len(completions), max(len(c) for c in completions)), pad_id, dtype=torch.long)
    completion_mask = torch.zeros_like(completion_ids)  # (B, T_c)
    for i, c in enumerate(completions):
        completion_ids[i, : len(c)] = torch.tensor(c)
        completion_mask[i, : len(c)] = 1
    return Packed(torch.cat([prompt_ids, completion_ids], 1), torch.cat([prompt_mask, completion_mask], 1),
                  completion_mask)


@torch.no_grad()
def sample(
    model,
    tokenizer,
    prompts: list[str],
    n_per_prompt: int,
    sampling: SamplingConfig,
    synced_gpus: bool = False,
    on_finished: Callable[[int, list[int]], None] | None = None,
) -> tuple[list[list[int]], list[list[int]], list[bool]]:
    """n_per_prompt completions for every prompt in ONE batched generate call.

    Returns (prompt ids per row, completion ids per row cut after the first EOS
    (EOS kept), clipped per row = no EOS within max_new_tokens). synced_gpus (HF's name, on any
    device): keep running forwards until every process has finished, as a sharded model needs.
    on_finished(row, completion ids with EOS): called the step a row emits EOS, while the others go on
    (a row that never does is not reported).

    Each prompt is prefilled once and its keys and values are handed to its n_per_prompt rows, so a
    group costs one prompt forward instead of n_per_prompt; generate then runs from the prompts' last token.
    """
    encoded = encode_prompts(tokenizer, prompts)
    prompt_ids = [ids for ids in encoded for _ in range(n_per_prompt)]
    unique_ids, unique_mask = left_pad(encoded, tokenizer.pad_token_id)  # (P, T_p)
    input_ids, attention_mask = (t.repeat_interleave(n_per_prompt, 0) for t in (unique_ids, unique_mask))  # (P*n, T_p)
    device = next(model.parameters()).device
    cache = cache_name(model)
    prefilled = None
    if unique_ids.shape[1] > 1:
        ids, mask = unique_ids[:, :-1].to(device), unique_mask[:, :-1].to(device)
        prefilled = getattr(model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
                                  use_cache=True, logits_to_keep=1), cache)
        prefilled.batch_repeat_interleave(n_per_prompt)
    out = model.generate(
        input_ids=input_ids.to(device),
        attention_mask=attention_mask.to(device),
        **{cache: prefilled},
        do_sample=True,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        top_k=0,
        max_new_tokens=sampling.max_new_tokens,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        synced_gpus=synced_gpus,
        streamer=_FinishedRows(len(prompt_ids), tokenizer.eos_token_id, on_finished) if on_finished else None,
    )
    new = out[:, input_ids.shape[1] :].tolist()
    completions, clipped = [], []
    for tokens in new:
        if tokenizer.eos_token_id in tokens:
            tokens = tokens[: tokens.index(tokenizer.eos_token_id) + 1]
            clipped.append(False)
        else:
            clipped.append(True)
        completions.append(tokens or [tokenizer.eos_token_id])
    return prompt_ids, completions, clipped


def sample_decoded(model, tokenizer, prompts: list[str], n_per_prompt: int,
                   sampling: SamplingConfig) -> tuple[list[str], list[bool]]:
    """`sample`'s completions as text (rows grouped by prompt), and whether each ran out of tokens."""
    _, completions, clipped = sample(model, tokenizer, prompts, n_per_prompt, sampling)
    return tokenizer.batch_decode(completions, skip_special_tokens=True), clipped


@contextmanager
def seeded(seed: int, device: torch.device | str = "cpu") -> Iterator[None]:
    """Sampling inside follows `seed` alone; the caller's RNG streams (CPU, and the device's) are as they were after."""
    device = torch.device(device)
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        yield


class _FinishedRows(BaseStreamer):
    """Hands each row to `on_finished` the step it emits EOS (generate streams one token per row per step)."""

    def __init__(self, n_rows: int, eos_id: int, on_finished: Callable[[int, list[int]], None]):
        self.tokens: list[list[int]] = [[] for _ in range(n_rows)]
        self.done = [False] * n_rows
        self.eos_id, self.on_finished = eos_id, on_finished
        self.prompts_seen = False

    def put(self, value: Tensor) -> None:
        if not self.prompts_seen:  # the first call streams the prompts
            self.prompts_seen = True
            return
        for row, token in enumerate(value.tolist()):
            if self.done[row]:
                continue
            self.tokens[row].append(token)
            if token == self.eos_id:
                self.done[row] = True
                self.on_finished(row, self.tokens[row])

    def end(self) -> None:
        pass
