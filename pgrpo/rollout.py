"""Student sampling and the token layout every logprob pass uses.

Layout (as TRL): each row is a left-padded prompt followed by a right-padded
completion, so the completion is always the last T_c columns and
`token_logprobs(..., logits_to_keep=T_c)` reads it directly.
"""

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class Packed:
    input_ids: Tensor  # (B, T_p + T_c)
    attention_mask: Tensor  # (B, T_p + T_c)
    completion_mask: Tensor  # (B, T_c): real completion tokens, EOS included, padding excluded

    @property
    def completion_len(self) -> int:
        return self.completion_mask.shape[1]

    def rows(self, index: Tensor) -> "Packed":
        return Packed(self.input_ids[index], self.attention_mask[index], self.completion_mask[index])


def pack(prompts: list[list[int]], completions: list[list[int]], pad_id: int) -> Packed:
    """Left-pad prompts, right-pad completions, concatenate."""
    if len(prompts) != len(completions):
        raise ValueError(f"{len(prompts)} prompts but {len(completions)} completions")
    if any(len(c) == 0 for c in completions):
        raise ValueError("every completion needs at least one token (append EOS)")
    t_p = max(len(p) for p in prompts)
    t_c = max(len(c) for c in completions)
    batch = len(prompts)
    ids = torch.full((batch, t_p + t_c), pad_id, dtype=torch.long)
    attention = torch.zeros((batch, t_p + t_c), dtype=torch.long)
    for i, (p, c) in enumerate(zip(prompts, completions)):
        ids[i, t_p - len(p) : t_p] = torch.tensor(p)
        ids[i, t_p : t_p + len(c)] = torch.tensor(c)
        attention[i, t_p - len(p) : t_p + len(c)] = 1
    return Packed(ids, attention, attention[:, t_p:].clone())


@torch.no_grad()
def sample(
    model,
    tokenizer,
    prompts: list[str],
    n_per_prompt: int,
    max_new_tokens: int,
    temperature: float,
    top_p: float,
    synced_gpus: bool = False,
) -> tuple[list[list[int]], list[list[int]], list[bool]]:
    """n_per_prompt completions for every prompt in ONE batched generate call.

    Returns (prompt ids per row, completion ids per row cut after the first EOS
    (EOS kept), clipped per row = no EOS within max_new_tokens). synced_gpus (HF's name, on any
    device): keep running forwards until every process has finished, as a sharded model needs.
    """
    rows = [p for p in prompts for _ in range(n_per_prompt)]
    enc = tokenizer(rows, return_tensors="pt", padding=True, padding_side="left")
    device = next(model.parameters()).device
    out = model.generate(
        input_ids=enc["input_ids"].to(device),
        attention_mask=enc["attention_mask"].to(device),
        do_sample=True,
        temperature=temperature,
        top_p=top_p,
        top_k=0,
        max_new_tokens=max_new_tokens,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        synced_gpus=synced_gpus,
    )
    new = out[:, enc["input_ids"].shape[1] :].tolist()
    prompt_ids = [ids[mask.bool()].tolist() for ids, mask in zip(enc["input_ids"], enc["attention_mask"])]
    completions, clipped = [], []
    for tokens in new:
        if tokenizer.eos_token_id in tokens:
            tokens = tokens[: tokens.index(tokenizer.eos_token_id) + 1]
            clipped.append(False)
        else:
            clipped.append(True)
        completions.append(tokens or [tokenizer.eos_token_id])
    return prompt_ids, completions, clipped
