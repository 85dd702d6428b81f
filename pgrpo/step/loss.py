"""GRPO loss family: group advantages, memory-efficient token logprobs, clipped policy loss with KL."""

import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.checkpoint import checkpoint

from pgrpo.model.hf_compat import cache_name

AdvantageScale = Literal["none", "group", "batch"]
KLEstimator = Literal["k1", "k2", "k3"]
Reduction = Literal["drgrpo", "grpo"]
TeacherWeight = Literal["one", "student_prob"]
TeacherAdvantage = Literal["signed", "positive"]


def group_advantages(rewards: Tensor, scale: AdvantageScale = "none", eps: float = 1e-6,
                     keep: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Group-relative advantages for rewards (P, G): P prompts, G completions each.

    scale="none" is Dr.GRPO (A = R − group mean); "group" is classic GRPO
    (divide by the group std, unbiased, + eps); "batch" centres per group and
    divides by the std of all rewards in the batch (TRL's scale_rewards="batch").
    keep (P, G) bool, if given, says which rows enter the statistics; the others
    get A = 0 (ground-truth screening, see skyline.py).
    Returns (advantages (P, G), zero_std (P,) bool): groups whose kept rewards
    span less than eps (or that keep fewer than 2 rows) carry no signal, get
    A = 0 and are flagged (their mean is frac_reward_zero_std).
    """
    if rewards.dim() != 2 or rewards.shape[1] < 2:
        raise ValueError(f"rewards must be (prompts, group>=2), got shape {tuple(rewards.shape)}")
    if scale not in ("none", "group", "batch"):
        raise ValueError(f"scale must be 'none', 'group' or 'batch', got {scale!r}")
    rewards = rewards.float()
    keep = torch.ones_like(rewards, dtype=torch.bool) if keep is None else keep.to(torch.bool)
    kept = keep.sum(1, keepdim=True)  # (P, 1)
    span = rewards.masked_fill(~keep, -math.inf).amax(1) - rewards.masked_fill(~keep, math.inf).amin(1)
    zero_std = (kept.squeeze(1) < 2) | ~(span >= eps)  # (P,); a group with nothing kept has span nan
    mean = (rewards * keep).sum(1, keepdim=True) / kept.clamp(min=1)  # (P, 1)
    advantages = rewards - mean  # (P, G)
    if scale == "group":
        var = ((advantages * keep) ** 2).sum(1, keepdim=True) / (kept - 1).clamp(min=1)
        advantages = advantages / (var.sqrt() + eps)
    elif scale == "batch":
        advantages = advantages / (rewards[keep].std() + eps)
    advantages = advantages.masked_fill(zero_std[:, None] | ~keep, 0.0)
    return advantages, zero_std

# The attention kernels a forward that will be differentiated may use: every one but cuDNN's, whose backward returns
# NaN for some sequence lengths (T % 128 == 64) when a padding mask is passed, in bf16 and fp16 on H100/H200, from
# torch 2.11 on (pytorch#196678; the GPU check met it: docs/performance.md). The others compute the same function.
GRADIENT_ATTENTION = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def token_logprobs(
    model: nn.Module,
    input_ids: Tensor,
    attention_mask: Tensor,
    logits_to_keep: int,
    chunk_size: int = 128,
    temperature: float = 1.0,
    with_entropy: bool = False,
    prompt_of_row: Tensor | None = None,
) -> tuple[Tensor, Tensor | None]:
    """Logprobs (B, T_c) of the last `logits_to_keep` = T_c tokens of input_ids, and optionally their entropy.

    Layout as in TRL: input_ids = left-padded prompt + right-padded completion,
    the completion being the last T_c columns. Position ids come from the
    attention mask (as HF generate does), so left padding does not shift positions.
    The LM head runs chunk by chunk over the sequence under activation
    checkpointing: neither full (B, T_c, V) logits nor their fp32 log-softmax are
    ever held, only one (B, chunk, V) block at a time. Logits are divided by the
    sampling `temperature` first, so logprobs match the sampling distribution.
    The entropy is a detached diagnostic.

    prompt_of_row (B,): rows with the same value share their prompt, token for token, padding included (a
    group's completions). Each shared prompt is then run once and its keys and values are handed to every
    row, so a group of G rows costs one prompt forward instead of G (the prompt is most of a row's tokens).
    The result is the same function of the weights; gradients reach the prompt through the shared pass.
    """
    batch, seq_len = input_ids.shape
    if not 0 < logits_to_keep < seq_len:
        raise ValueError(
            f"logits_to_keep must be in [1, {seq_len - 1}] for input length {seq_len}, got {logits_to_keep}"
        )
    if chunk_size < 1 or temperature <= 0:
        raise ValueError(f"chunk_size must be >= 1 and temperature > 0, got {chunk_size} and {temperature}")
    if getattr(model.config, "final_logit_softcapping", None) is not None:
        raise ValueError("token_logprobs does not apply final_logit_softcapping; this model needs it")
    position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)  # (B, T)
    split = seq_len - logits_to_keep - 1  # the prompt without its last token, which predicts the first completion token
    if prompt_of_row is not None and split < 1:
        raise ValueError("prompt_of_row needs prompts of at least two tokens: a one-token prompt has nothing to share")
    with sdpa_kernel(GRADIENT_ATTENTION):  # the backward runs the kernel its forward chose
        if prompt_of_row is None:
            hidden = _decoder_states(model, input_ids, attention_mask, position_ids)[:, -logits_to_keep - 1 : -1]
        else:
            units, row_unit = torch.unique(prompt_of_row, return_inverse=True)  # (U,), (B,)
            first = torch.full_like(units, batch).scatter_reduce(0, row_unit, torch.arange(batch, device=units.device),
                                                                 "amin")  # (U,): each unit's first row
            prefix = slice(None, split)
            shared = first[row_unit]
            if not (torch.equal(input_ids[shared, prefix], input_ids[:, prefix])
                    and torch.equal(attention_mask[shared, prefix], attention_mask[:, prefix])):
                raise ValueError("prompt_of_row joins rows whose prompts differ")
            past = getattr(model(input_ids=input_ids[first, prefix], attention_mask=attention_mask[first, prefix],
                                 position_ids=position_ids[first, prefix], use_cache=True,
                                 logits_to_keep=_no_logits(input_ids)), cache_name(model))
            past.batch_select_indices(row_unit.to(input_ids.device))  # every row reads its unit's keys and values
            suffix = slice(split, -1)  # (B, T_c): the prompt's last token and the completion but its last token
            hidden = _decoder_states(model, input_ids[:, suffix], attention_mask[:, :-1], position_ids[:, suffix], past)
    targets = input_ids[:, -logits_to_keep:]  # (B, T_c)
    head = model.get_output_embeddings()

    def chunk_stats(h: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
        logits = head(h).float() / temperature  # (B, c, V)
        lse = torch.logsumexp(logits, -1)  # (B, c)
        logp = logits.gather(-1, target[..., None]).squeeze(-1) - lse  # (B, c)
        with torch.no_grad():
            entropy = lse - (torch.softmax(logits, -1) * logits).sum(-1) if with_entropy else lse.new_empty(0)
        return logp, entropy

    logps, entropies = [], []
    for start in range(0, logits_to_keep, chunk_size):
        h, target = hidden[:, start : start + chunk_size], targets[:, start : start + chunk_size]
        if torch.is_grad_enabled():
            logp, entropy = checkpoint(chunk_stats, h, target, use_reentrant=False)
        else:
            logp, entropy = chunk_stats(h, target)
        logps.append(logp)
        entropies.append(entropy)
    logp = torch.cat(logps, 1)
    return logp, (torch.cat(entropies, 1) if with_entropy else None)


def _no_logits(input_ids: Tensor) -> Tensor:
    return torch.zeros(0, dtype=torch.long, device=input_ids.device)


def _decoder_states(model: nn.Module, input_ids: Tensor, attention_mask: Tensor, position_ids: Tensor,
                    past=None) -> Tensor:
    """The decoder's last hidden states (B, T, d) for input_ids, with no logits computed.

    The whole model is called, keeping no logits (an empty position index), and the decoder's output is
    taken from a hook: the forward goes through the model's own __call__, which FSDP needs (shard_base's
    root all-gathers the embedding, final norm and LM head there), at the cost of an LM head on 0 rows.
    """
    captured = []
    hook = model.get_decoder().register_forward_hook(lambda _m, _a, out: captured.append(out.last_hidden_state))
    try:
        model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
              use_cache=past is not None, **{cache_name(model): past},
              logits_to_keep=_no_logits(input_ids))
    finally:
        hook.remove()
    (hidden,) = captured
    return hidden


@dataclass
class LossConfig:
    """GRPO loss knobs (each field's docstring is its `--help`)."""

    epsilon: float = 0.2
    """PPO clip: the ratio is clipped to [1 − epsilon, 1 + epsilon_high]."""
    epsilon_high: float | None = None
    """Upper clip (None: symmetric, = epsilon)."""
    beta: float = 0.0
    """KL coefficient against the free reference (knobs zeroed); 0 disables the term (kl is still measured)."""
    kl_estimator: KLEstimator = "k3"
    """k1 = logπ − ref, k2 = ½(logπ − ref)², k3 = exp(ref − logπ) − (ref − logπ) − 1."""
    reduction: Reduction = "drgrpo"
    """drgrpo: masked token losses summed over rows × the generation's max_new_tokens; grpo: each row averaged
    over its own tokens, then over rows."""
    teacher_weight: TeacherWeight = "one"
    """How a teacher row's tokens enter the loss. The rows are off-policy: cached completions the student did not
    sample. one: as if on-policy (ratio ≡ 1, unclipped: the seed's treatment); student_prob: each token weighted
    by the student's own probability of it, π_θ(y_t), the importance weight π_θ/π_teacher against a teacher that
    writes its text with probability 1 (so never above 1; a constant, no gradient through it): a sequence the
    student would not write moves it little, whichever the sign of its advantage."""
    teacher_advantage: TeacherAdvantage = "signed"
    """signed: a teacher row's group-normalised advantage as it is; positive: max(A, 0), a demonstration that
    is learned from when it beats its group and never pushed down."""

    def __post_init__(self) -> None:
        if not self.epsilon > 0:
            raise ValueError(f"LossConfig.epsilon must be > 0, got {self.epsilon}")
        if self.epsilon_high is not None and not self.epsilon_high > 0:
            raise ValueError(f"LossConfig.epsilon_high must be > 0 or None, got {self.epsilon_high}")
        if not self.beta >= 0:
            raise ValueError(f"LossConfig.beta must be >= 0, got {self.beta}")
        if self.kl_estimator not in ("k1", "k2", "k3"):
            raise ValueError(f"LossConfig.kl_estimator must be 'k1', 'k2' or 'k3', got {self.kl_estimator!r}")
        if self.reduction not in ("drgrpo", "grpo"):
            raise ValueError(f"LossConfig.reduction must be 'drgrpo' or 'grpo', got {self.reduction!r}")
        if self.teacher_weight not in ("one", "student_prob"):
            raise ValueError(f"LossConfig.teacher_weight must be 'one' or 'student_prob', got {self.teacher_weight!r}")
        if self.teacher_advantage not in ("signed", "positive"):
            raise ValueError(f"LossConfig.teacher_advantage must be 'signed' or 'positive', "
                             f"got {self.teacher_advantage!r}")


def teacher_advantages(advantages: Tensor, is_student: Tensor, cfg: LossConfig) -> Tensor:
    """(B,) advantages with the teacher rows' treated as `cfg.teacher_advantage` says; student rows untouched."""
    if cfg.teacher_advantage == "signed":
        return advantages
    return torch.where(is_student.to(advantages.device), advantages, advantages.clamp(min=0))


def teacher_token_weights(logp: Tensor, is_student: Tensor, cfg: LossConfig) -> Tensor | None:
    """(B, T_c) token weights of `cfg.teacher_weight`: π_θ(y_t) on teacher rows, 1 on student rows (None: all 1)."""
    if cfg.teacher_weight == "one":
        return None
    return torch.where(is_student.to(logp.device)[:, None], torch.ones_like(logp), logp.detach().exp().clamp(max=1))


def kl_per_token(logp: Tensor, ref_logp: Tensor, estimator: KLEstimator) -> Tensor:
    """Per-token estimate of KL(π ‖ π_ref) from samples of π."""
    log_ratio = ref_logp - logp
    if estimator == "k1":
        return -log_ratio
    if estimator == "k2":
        return 0.5 * log_ratio**2
    return torch.exp(log_ratio) - log_ratio - 1


def grpo_loss(
    logp: Tensor,
    old_logp: Tensor | None,
    ref_logp: Tensor | None,
    advantages: Tensor,
    mask: Tensor,
    cfg: LossConfig,
    denominator_rows: int | None = None,
    max_new_tokens: int | None = None,
    token_weight: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Clipped GRPO loss on token logprobs (B, T_c) with per-row advantages (B,).

    old_logp None means one inner step (ρ ≡ 1, gradient of ρA is A∇logπ).
    Reductions divide by `denominator_rows` (default B): drgrpo by
    denominator_rows × max_new_tokens (the generation's budget: Dr.GRPO's fixed length, required there)
    — the step's G × prompts × max_new_tokens when the whole step is one batch; grpo by denominator_rows
    after averaging each row over its own tokens. When a step is split into micro-batches, pass the
    step's total row count so the micro-batch losses sum to the step loss.
    token_weight (B, T_c), if given, multiplies each token's loss (the policy term and the KL term, as TRL
    applies its truncated importance-sampling correction); it is a constant: no gradient flows through it.
    Stats (detached, TRL names): kl (masked mean, when ref_logp is given),
    clip_ratio/low_mean, clip_ratio/high_mean, clip_ratio/region_mean.
    """
    if logp.dim() != 2 or mask.shape != logp.shape or advantages.shape != logp.shape[:1]:
        raise ValueError(
            f"expected logp (B, T), mask (B, T), advantages (B,); got {tuple(logp.shape)}, "
            f"{tuple(mask.shape)}, {tuple(advantages.shape)}"
        )
    if cfg.reduction == "drgrpo" and not (isinstance(max_new_tokens, int) and max_new_tokens > 0):
        raise ValueError(f"the drgrpo reduction divides by the generation budget: pass max_new_tokens, a positive "
                         f"int (got {max_new_tokens!r})")
    if cfg.beta > 0 and ref_logp is None:
        raise ValueError(f"ref_logp is required when LossConfig.beta > 0 (beta={cfg.beta})")
    rows = logp.shape[0] if denominator_rows is None else denominator_rows
    mask = mask.to(logp.dtype)
    adv = advantages.to(logp.dtype)[:, None]  # (B, 1)
    ratio = torch.exp(logp - (logp.detach() if old_logp is None else old_logp))  # (B, T)
    eps_low, eps_high = cfg.epsilon, cfg.epsilon if cfg.epsilon_high is None else cfg.epsilon_high
    clipped = torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
    per_token = -torch.min(ratio * adv, clipped * adv)  # (B, T)
    stats = {}
    if ref_logp is not None:
        kl = kl_per_token(logp, ref_logp, cfg.kl_estimator)  # (B, T)
        stats["kl"] = _masked_mean(kl.detach(), mask)
        if cfg.beta > 0:
            per_token = per_token + cfg.beta * kl
    if token_weight is not None:
        per_token = per_token * token_weight.detach()
    if cfg.reduction == "drgrpo":
        loss = (per_token * mask).sum() / (rows * max_new_tokens)
    else:
        loss = ((per_token * mask).sum(1) / mask.sum(1).clamp(min=1)).sum() / rows
    with torch.no_grad():
        low = (ratio < 1 - eps_low) & (adv < 0)
        high = (ratio > 1 + eps_high) & (adv > 0)
        stats["clip_ratio/low_mean"] = _masked_mean(low.to(mask.dtype), mask)
        stats["clip_ratio/high_mean"] = _masked_mean(high.to(mask.dtype), mask)
        stats["clip_ratio/region_mean"] = _masked_mean((low | high).to(mask.dtype), mask)
    return loss, stats


def _masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    return (values * mask).sum() / mask.sum().clamp(min=1)
