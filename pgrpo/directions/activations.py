"""Mean-pooled hidden states of completions: what an activation detector (a linear probe, a shortcut direction)
reads of a rollout or of a contrastive pair's completion."""

import torch
from torch import Tensor

from pgrpo.model.adapter import knobs_zeroed, merged_for_generation
from pgrpo.directions.basis import pack_completions, pair_prompts
from pgrpo.env.pairs import ContrastivePair
from pgrpo.step.rollout import Packed


@torch.no_grad()
def pooled_states(model, packed: Packed, batch_size: int = 16) -> Tensor:
    """(B, L+1, d) fp32: every layer's hidden states (the embeddings first) averaged over each row's completion
    tokens. The model's own forward runs, not its decoder's (under FSDP only the root's hooks gather the
    embeddings), with the logits of one position per row: nothing of the (B, T, V) logits is computed."""
    parts = []
    for rows in torch.arange(len(packed.input_ids), device=packed.input_ids.device).split(batch_size):
        part = packed.rows(rows)  # cut to these rows' own lengths
        position_ids = (part.attention_mask.long().cumsum(-1) - 1).clamp(min=0)  # as generation and the loss
        hidden = model(input_ids=part.input_ids, attention_mask=part.attention_mask, position_ids=position_ids,
                       output_hidden_states=True, use_cache=False, logits_to_keep=1).hidden_states  # L+1 of (b, T, d)
        mask = part.completion_mask[:, :, None].float()  # (b, T_c, 1): the completion is the last T_c columns
        width = part.completion_len
        parts.append(torch.stack([(h[:, -width:].float() * mask).sum(1) / mask.sum(1) for h in hidden], 1))
    return torch.cat(parts)


def policy_states(policy, adapter, packed: Packed) -> Tensor:
    """pooled_states of `packed` under the policy as it trains now (its knobs folded in: base-model speed)."""
    with merged_for_generation(adapter):
        return pooled_states(policy, packed)


def pair_states(policy, adapter, tokenizer, pairs: list[ContrastivePair]) -> tuple[Tensor, Tensor]:
    """(hack, clean) pooled states of the pairs' completions, each (n, L+1, d), under the base model (knobs
    zeroed), so that a detector built at train start is the same one when a resumed run builds it again.

    On the host, wherever the policy runs: the detector is fitted there (a few pairs' states; its fit and its
    placebo's random direction are host tensors), and scores live rollouts on their device."""
    prompts = pair_prompts(tokenizer, pairs)
    device = next(policy.parameters()).device
    with knobs_zeroed(adapter), merged_for_generation(adapter):
        return tuple(pooled_states(policy, pack_completions(tokenizer, prompts, texts).to(device)).cpu()
                     for texts in ([p.hack for p in pairs], [p.clean for p in pairs]))
