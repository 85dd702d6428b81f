import dataclasses
import math

import pytest
import torch

from pgrpo.step.loss import LossConfig, group_advantages, grpo_loss, kl_per_token, token_logprobs
from test_extraction import tiny_model


def padded_batch() -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(1, 64, (3, 9), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[0, :2] = 0  # left-padded prompt
    mask[1, -2:] = 0  # right-padded completion
    return ids, mask


def naive_logprobs_and_entropy(model, ids, mask, keep):
    position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=position_ids).logits[:, -keep - 1 : -1].float()
    log_probs = logits.log_softmax(-1)
    logp = log_probs.gather(-1, ids[:, -keep:, None]).squeeze(-1)
    return logp, -(log_probs.exp() * log_probs).sum(-1)


def test_dr_grpo_advantage_is_reward_minus_group_mean_and_flags_zero_variance():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.25, 0.25, 0.25, 0.25], [1.25, 0.25, 0.25, 0.25]])
    advantages, zero_std = group_advantages(rewards)
    expected = torch.tensor([[0.5, -0.5, -0.5, 0.5], [0.0, 0.0, 0.0, 0.0], [0.75, -0.25, -0.25, -0.25]])
    torch.testing.assert_close(advantages, expected)
    assert zero_std.tolist() == [False, True, False]


def test_grpo_advantage_divides_by_unbiased_group_std():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0]])
    advantages, _ = group_advantages(rewards, scale="group", eps=1e-6)
    std = math.sqrt(4 * 0.25 / 3)
    torch.testing.assert_close(advantages, torch.tensor([[0.5, -0.5, -0.5, 0.5]]) / (std + 1e-6))


def test_batch_scaled_advantage_divides_by_std_of_all_rewards():
    rewards = torch.tensor([[1.0, 0.0], [3.0, 3.0]])
    advantages, zero_std = group_advantages(rewards, scale="batch", eps=1e-6)
    batch_std = rewards.flatten().std()
    torch.testing.assert_close(advantages, torch.tensor([[0.5, -0.5], [0.0, 0.0]]) / (batch_std + 1e-6))
    assert zero_std.tolist() == [False, True]


def test_screened_rows_get_zero_advantage_and_leave_the_group_statistics():
    rewards = torch.tensor([[1.25, 1.25, 0.25, 1.25], [1.25, 0.25, 0.25, 0.25], [1.25, 0.25, 0.25, 0.25]])
    keep = torch.tensor([[False, True, True, True], [False, True, True, True], [True, False, False, False]])
    advantages, zero_std = group_advantages(rewards, keep=keep)
    # group 0: the kept rewards 1.25, 0.25, 1.25 have mean 0.9167; group 1 keeps only equal rewards (no signal);
    # group 2 keeps one row (no signal)
    m = (1.25 + 0.25 + 1.25) / 3
    torch.testing.assert_close(advantages, torch.tensor([[0.0, 1.25 - m, 0.25 - m, 1.25 - m], [0.0] * 4, [0.0] * 4]))
    assert zero_std.tolist() == [False, True, True]
    grouped, _ = group_advantages(rewards[:1], scale="group", keep=keep[:1])
    kept_std = torch.tensor([1.25, 0.25, 1.25]).std()
    torch.testing.assert_close(grouped, advantages[:1] / (kept_std + 1e-6))


def test_keeping_every_row_changes_nothing():
    rewards = torch.tensor([[1.0, 0.0, 0.25, 1.0], [0.5, 0.5, 0.5, 0.5]])
    for scale in ("none", "group", "batch"):
        plain = group_advantages(rewards, scale)
        kept = group_advantages(rewards, scale, keep=torch.ones_like(rewards, dtype=torch.bool))
        torch.testing.assert_close(plain[0], kept[0])
        assert plain[1].tolist() == kept[1].tolist()


def test_group_advantages_rejects_bad_input():
    with pytest.raises(ValueError, match="scale"):
        group_advantages(torch.zeros(2, 3), scale="std")
    with pytest.raises(ValueError, match="shape"):
        group_advantages(torch.zeros(4))


def test_chunked_logprobs_and_entropy_equal_naive_log_softmax():
    model = tiny_model()
    ids, mask = padded_batch()
    with torch.no_grad():
        logp, entropy = token_logprobs(model, ids, mask, logits_to_keep=5, chunk_size=2, with_entropy=True)
        naive_logp, naive_entropy = naive_logprobs_and_entropy(model, ids, mask, 5)
    torch.testing.assert_close(logp, naive_logp, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(entropy, naive_entropy, rtol=1e-5, atol=1e-5)


def test_chunked_logprobs_gradient_equals_naive():
    model = tiny_model()
    model.lm_head.weight.requires_grad_(True)
    ids, mask = padded_batch()
    weights = torch.randn(3, 5, generator=torch.Generator().manual_seed(2))
    logp, entropy = token_logprobs(model, ids, mask, logits_to_keep=5, chunk_size=2)
    (logp * weights).sum().backward()
    chunked_grad = model.lm_head.weight.grad.clone()
    model.zero_grad()
    (naive_logprobs_and_entropy(model, ids, mask, 5)[0] * weights).sum().backward()
    assert entropy is None
    torch.testing.assert_close(chunked_grad, model.lm_head.weight.grad, rtol=1e-4, atol=1e-6)


def test_shared_prompt_logprobs_and_gradient_equal_each_row_running_its_own_prompt():
    model = tiny_model()
    for param in model.parameters():
        param.requires_grad_(True)
    g = torch.Generator().manual_seed(3)
    prompts = torch.randint(1, 64, (2, 6), generator=g)  # two prompts, the first left-padded by 2
    ids = torch.cat([prompts.repeat_interleave(3, 0), torch.randint(1, 64, (6, 5), generator=g)], 1)  # (6, 11)
    mask = torch.ones_like(ids)
    mask[:3, :2] = 0
    mask[1, -3:] = 0  # a short completion, right-padded
    weights = torch.randn(6, 5, generator=g)
    grads = []
    for shared in (None, torch.tensor([0, 0, 0, 1, 1, 1])):
        model.zero_grad()
        logp, _ = token_logprobs(model, ids, mask, logits_to_keep=5, chunk_size=2, prompt_of_row=shared)
        (logp * weights * mask[:, -5:]).sum().backward()
        grads.append((logp.detach(), [p.grad.clone() for p in model.parameters()]))
    (flat_logp, flat_grads), (shared_logp, shared_grads) = grads
    torch.testing.assert_close(shared_logp * mask[:, -5:], flat_logp * mask[:, -5:], rtol=1e-5, atol=1e-5)
    for flat, shared in zip(flat_grads, shared_grads):
        torch.testing.assert_close(shared, flat, rtol=1e-4, atol=1e-6)


def test_sharing_a_prompt_between_rows_whose_prompts_differ_is_refused():
    model = tiny_model()
    ids, mask = padded_batch()
    with pytest.raises(ValueError, match="prompts differ"):
        token_logprobs(model, ids, mask, logits_to_keep=5, prompt_of_row=torch.zeros(3, dtype=torch.long))


def test_logprobs_use_temperature_and_reject_bad_keep():
    model = tiny_model()
    ids, mask = padded_batch()
    with torch.no_grad():
        hot, _ = token_logprobs(model, ids, mask, logits_to_keep=4, temperature=2.0)
        logits = model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0)).logits
        expected = (logits[:, -5:-1] / 2.0).log_softmax(-1).gather(-1, ids[:, -4:, None]).squeeze(-1)
    torch.testing.assert_close(hot, expected, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="logits_to_keep"):
        token_logprobs(model, ids, mask, logits_to_keep=9)


def test_k3_matches_formula_and_k1_k2():
    logp, ref = torch.tensor([-1.0, -2.0]), torch.tensor([-1.5, -1.0])
    expected_k3 = torch.tensor([math.exp(-0.5) + 0.5 - 1, math.exp(1.0) - 1.0 - 1])
    torch.testing.assert_close(kl_per_token(logp, ref, "k3"), expected_k3)
    torch.testing.assert_close(kl_per_token(logp, ref, "k1"), torch.tensor([0.5, -1.0]))
    torch.testing.assert_close(kl_per_token(logp, ref, "k2"), torch.tensor([0.125, 0.5]))


def test_dr_grpo_loss_sums_tokens_over_fixed_denominator():
    logp = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, -9.0]], requires_grad=True)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    advantages = torch.tensor([1.0, -2.0])
    loss, _ = grpo_loss(logp, None, None, advantages, mask, LossConfig(), max_new_tokens=4)
    # ρ ≡ 1: per-token loss is −A; 3 tokens of −1 and 2 tokens of +2 over 2 rows × 4 tokens.
    torch.testing.assert_close(loss, torch.tensor((-3.0 + 4.0) / 8))
    loss.backward()
    torch.testing.assert_close(logp.grad, torch.tensor([[-1.0, -1.0, -1.0], [2.0, 2.0, 0.0]]) / 8)


def test_token_weight_scales_each_tokens_loss_and_gradient_and_is_a_constant():
    logp = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, -9.0]], requires_grad=True)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    advantages = torch.tensor([1.0, -2.0])
    weight = torch.tensor([[2.0, 0.5, 1.0], [1.0, 0.25, 7.0]], requires_grad=True)
    loss, _ = grpo_loss(logp, None, None, advantages, mask, LossConfig(), max_new_tokens=4, token_weight=weight)
    torch.testing.assert_close(loss, torch.tensor((-2.0 - 0.5 - 1.0 + 2.0 + 0.5) / 8))
    loss.backward()
    torch.testing.assert_close(logp.grad, torch.tensor([[-2.0, -0.5, -1.0], [2.0, 0.5, 0.0]]) / 8)
    assert weight.grad is None  # no gradient flows into the importance weights


def test_grpo_reduction_averages_each_row_then_rows():
    logp = torch.zeros(2, 3)
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    loss, _ = grpo_loss(logp, None, None, torch.tensor([1.0, -2.0]), mask, LossConfig(reduction="grpo"))
    torch.testing.assert_close(loss, torch.tensor((-1.0 + 2.0) / 2))


def test_denominator_rows_makes_micro_batch_losses_sum_to_step_loss():
    logp = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1]])
    advantages = torch.tensor([1.0, -1.0, 0.5, 2.0])
    for cfg in (LossConfig(), LossConfig(reduction="grpo")):
        step, _ = grpo_loss(logp, None, None, advantages, mask, cfg, max_new_tokens=3)
        halves = [grpo_loss(logp[s], None, None, advantages[s], mask[s], cfg, denominator_rows=4, max_new_tokens=3)[0]
                  for s in (slice(0, 2), slice(2, 4))]
        torch.testing.assert_close(halves[0] + halves[1], step)


def test_clip_uses_epsilon_high_and_reports_trl_clip_ratios():
    old = torch.zeros(1, 4)
    logp = torch.log(torch.tensor([[0.7, 1.25, 1.35, 1.1]]))
    cfg = LossConfig(epsilon=0.2, epsilon_high=0.28)
    loss, stats = grpo_loss(logp, old, None, torch.tensor([1.0]), torch.ones(1, 4), cfg, max_new_tokens=4)
    # A > 0: min(ρ, clip(ρ, 0.8, 1.28)) -> 0.7, 1.25, 1.28, 1.1 (the low side is not clipped for A > 0).
    torch.testing.assert_close(loss, torch.tensor(-(0.7 + 1.25 + 1.28 + 1.1) / 4))
    assert stats["clip_ratio/high_mean"].item() == pytest.approx(0.25)
    assert stats["clip_ratio/low_mean"].item() == 0.0
    assert stats["clip_ratio/region_mean"].item() == pytest.approx(0.25)
    _, negative = grpo_loss(logp, old, None, torch.tensor([-1.0]), torch.ones(1, 4), cfg, max_new_tokens=4)
    assert negative["clip_ratio/low_mean"].item() == pytest.approx(0.25)
    assert negative["clip_ratio/high_mean"].item() == 0.0


def test_kl_term_adds_beta_times_k3_and_reports_masked_mean():
    logp = torch.tensor([[-1.0, -2.0]])
    ref = torch.tensor([[-1.5, -1.0]])
    mask = torch.tensor([[1, 0]])
    k3 = math.exp(-0.5) + 0.5 - 1
    cfg = LossConfig(beta=0.1)
    loss, stats = grpo_loss(logp, None, ref, torch.tensor([0.0]), mask, cfg, max_new_tokens=2)
    torch.testing.assert_close(loss, torch.tensor(0.1 * k3 / 2))
    torch.testing.assert_close(stats["kl"], torch.tensor(k3))


def test_beta_needs_reference_logprobs():
    with pytest.raises(ValueError, match="ref_logp"):
        grpo_loss(torch.zeros(1, 2), None, None, torch.zeros(1), torch.ones(1, 2), LossConfig(beta=0.04), max_new_tokens=2)


@pytest.mark.parametrize(
    "field, value",
    [("epsilon", 0.0), ("beta", -1.0), ("kl_estimator", "k4"), ("reduction", "mean")],
)
def test_loss_config_names_the_bad_field(field, value):
    with pytest.raises(ValueError, match=field):
        LossConfig(**{field: value})


def test_the_drgrpo_reduction_needs_the_generation_budget_and_is_no_loss_knob():
    # the fixed denominator is generation.max_new_tokens, passed by the step: a knob beside it could disagree
    assert "max_new_tokens" not in {f.name for f in dataclasses.fields(LossConfig)}
    for budget in (None, 0):
        with pytest.raises(ValueError, match="max_new_tokens"):
            grpo_loss(torch.zeros(1, 2), None, None, torch.zeros(1), torch.ones(1, 2), LossConfig(), max_new_tokens=budget)


def test_forwards_that_will_be_differentiated_never_choose_cudnn_attention():
    # cuDNN's attention backward returns NaN under a padding mask at some lengths on H100/H200 (pytorch#196678):
    # the GPU check found V's gradients all NaN in bf16. The kernel is chosen in the forward, so it is excluded there.
    model = tiny_model()
    ids, mask = padded_batch()
    seen = []
    model.model.layers[0].self_attn.register_forward_pre_hook(
        lambda *_: seen.append(torch.backends.cuda.cudnn_sdp_enabled()))
    assert torch.backends.cuda.cudnn_sdp_enabled()  # the process-wide default is left as it is
    token_logprobs(model, ids, mask, 4)
    token_logprobs(model, ids, mask, 4, prompt_of_row=torch.tensor([0, 1, 2]))
    assert seen and not any(seen)
    assert torch.backends.cuda.cudnn_sdp_enabled()
