import pytest
import torch
import transformers
from torch import nn

from pgrpo.model.adapter import (
    SVDAdapterLinear,
    adapter_state_dict,
    attach_adapter,
    capture_row_grads,
    fold_into_base,
    knob_parameters,
    knobs_zeroed,
    load_adapter_state_dict,
    merged_for_generation,
    quarantine_zeroed,
)


def tiny_model(dtype: torch.dtype = torch.float32) -> transformers.Qwen3ForCausalLM:
    torch.manual_seed(0)
    config = transformers.Qwen3Config(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8,
    )
    return transformers.Qwen3ForCausalLM(config).to(dtype).eval()


def input_ids() -> torch.Tensor:
    return torch.randint(0, 64, (3, 7), generator=torch.Generator().manual_seed(1))


def randomize_knobs(modules: dict[str, SVDAdapterLinear], seed: int = 2) -> None:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in knob_parameters(modules):
            param.copy_(0.1 * torch.randn(param.shape, generator=generator))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_logits_at_zero_knobs_equal_base_bit_for_bit(dtype):
    model = tiny_model(dtype)
    ids = input_ids()
    with torch.no_grad():
        base_logits = model(ids).logits
    attach_adapter(model)
    with torch.no_grad():
        assert torch.equal(model(ids).logits, base_logits)


def test_only_knobs_require_grad_and_knobs_stay_fp32_on_bf16_base():
    model = tiny_model(torch.bfloat16)
    modules = attach_adapter(model)
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert trainable == {f"{name}.{knob}" for name in modules for knob in ("delta_s", "delta_s_hack")}
    assert len(modules) == 2 * 7
    for module in modules.values():
        assert module.delta_s.dtype == torch.float32 and module.delta_s_hack.dtype == torch.float32
        assert module.U.dtype == torch.bfloat16 and module.Vh.dtype == torch.bfloat16


def test_backward_on_bf16_base_reaches_fp32_knobs():
    model = tiny_model(torch.bfloat16)
    modules = attach_adapter(model)
    model(input_ids()).logits.float().pow(2).mean().backward()
    for module in modules.values():
        assert module.delta_s.grad.dtype == torch.float32 and module.delta_s.grad.abs().sum() > 0


def test_backward_under_bf16_autocast_on_an_fp32_base_gives_the_knobs_their_gradient():
    # TRL's bf16 training runs the forward under autocast: the backward used to meet a bf16 gradient with fp32
    # weights ("expected m1 and m2 to have the same dtype")
    model = tiny_model()
    modules = attach_adapter(model)
    randomize_knobs(modules)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(input_ids()).logits
    logits.float().pow(2).mean().backward()
    exact = {n: m.delta_s.grad.clone() for n, m in modules.items()}
    for m in modules.values():
        m.delta_s.grad = m.delta_s_hack.grad = None
    model(input_ids()).logits.pow(2).mean().backward()
    for name, m in modules.items():
        assert m.delta_s.grad.dtype == torch.float32
        torch.testing.assert_close(exact[name], m.delta_s.grad, atol=0.05 * float(m.delta_s.grad.abs().max()), rtol=0.1)


def test_svd_buffers_carry_no_graph_and_are_contiguous():
    model = tiny_model()
    modules = attach_adapter(model)
    for module in modules.values():
        for buffer in (module.U, module.Vh):
            assert buffer.grad_fn is None and not buffer.requires_grad and buffer.is_contiguous()


def test_svd_reconstructs_weight_and_max_rank_truncates():
    linear = nn.Linear(6, 4)
    full = SVDAdapterLinear(linear)
    sigma = torch.linalg.svdvals(linear.weight.detach())
    assert torch.allclose(full.U @ torch.diag(sigma) @ full.Vh, linear.weight, atol=1e-5)
    truncated = SVDAdapterLinear(nn.Linear(6, 4), max_rank=2)
    assert truncated.U.shape == (4, 2) and truncated.Vh.shape == (2, 6) and truncated.delta_s.shape == (2,)


def test_forward_adds_low_rank_knob_term():
    torch.manual_seed(0)
    linear = nn.Linear(6, 4)
    module = SVDAdapterLinear(linear)
    with torch.no_grad():
        module.delta_s.copy_(torch.tensor([0.5, -1.0, 2.0, 0.1]))
        module.delta_s_hack.copy_(torch.tensor([0.0, 0.3, 0.0, 0.0]))
    x = torch.randn(5, 6)
    expected = linear(x) + x @ (module.U @ torch.diag(module.delta_s + module.delta_s_hack) @ module.Vh).T
    assert torch.allclose(module(x), expected, atol=1e-5)


def test_folded_forward_gives_the_low_rank_formulas_gradients_for_input_and_both_knobs():
    """The folded Linear computes its own backward: it must equal autograd through W x + U (δ ⊙ Vh x)."""
    torch.manual_seed(0)
    module = SVDAdapterLinear(nn.Linear(6, 4))
    with torch.no_grad():
        module.delta_s.copy_(torch.tensor([0.5, -1.0, 2.0, 0.1]))
        module.delta_s_hack.copy_(torch.tensor([0.0, 0.3, 0.0, -0.2]))
    x = torch.randn(3, 5, 6, requires_grad=True)
    weights = torch.randn(3, 5, 4)
    (module(x) * weights).sum().backward()
    folded = (x.grad.clone(), module.delta_s.grad.clone(), module.delta_s_hack.grad.clone())

    x_ref = x.detach().clone().requires_grad_(True)
    scale = (module.delta_s.detach() + module.delta_s_hack.detach()).requires_grad_(True)
    reference = module.base(x_ref) + ((x_ref @ module.Vh.T) * scale) @ module.U.T
    (reference * weights).sum().backward()
    torch.testing.assert_close(folded[0], x_ref.grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(folded[1], scale.grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(folded[2], scale.grad, atol=1e-5, rtol=1e-5)


def test_attach_without_match_names_patterns_and_available_linears():
    with pytest.raises(ValueError, match=r"nope.*q_proj"):
        attach_adapter(tiny_model(), target_modules=("nope",))


def test_attach_twice_is_refused():
    model = tiny_model()
    attach_adapter(model)
    with pytest.raises(ValueError, match="already"):
        attach_adapter(model)


def test_attach_returns_sorted_qualified_names():
    modules = attach_adapter(tiny_model(), target_modules=("q_proj", "down_proj"))
    assert list(modules) == sorted(modules)
    assert "model.layers.0.self_attn.q_proj" in modules and "model.layers.1.mlp.down_proj" in modules


def test_knobs_zeroed_gives_base_logits_and_restores_bit_for_bit():
    model = tiny_model()
    ids = input_ids()
    with torch.no_grad():
        base_logits = model(ids).logits
    modules = attach_adapter(model)
    randomize_knobs(modules)
    before = adapter_state_dict(modules)
    with knobs_zeroed(modules), torch.no_grad():
        assert torch.equal(model(ids).logits, base_logits)
    after = adapter_state_dict(modules)
    assert all(torch.equal(before[key], after[key]) for key in before)


def test_quarantine_zeroed_zeroes_only_hack_knob():
    modules = attach_adapter(tiny_model())
    randomize_knobs(modules)
    before = adapter_state_dict(modules)
    with quarantine_zeroed(modules):
        for name, module in modules.items():
            assert not module.delta_s_hack.any()
            assert torch.equal(module.delta_s, before[f"{name}.delta_s"])
    assert all(torch.equal(before[key], value) for key, value in adapter_state_dict(modules).items())


def test_reference_forward_inside_knobs_zeroed_does_not_break_policy_backward():
    model = tiny_model()
    modules = attach_adapter(model)
    randomize_knobs(modules)
    ids = input_ids()
    policy_logits = model(ids).logits
    with knobs_zeroed(modules), torch.no_grad():
        model(ids)
    policy_logits.pow(2).mean().backward()
    assert all(m.delta_s.grad is not None for m in modules.values())


def test_adapter_state_dict_round_trip_holds_knobs_only():
    model = tiny_model()
    modules = attach_adapter(model)
    randomize_knobs(modules)
    state = adapter_state_dict(modules)
    assert all(key.endswith(("delta_s", "delta_s_hack")) for key in state)
    other = attach_adapter(tiny_model())
    load_adapter_state_dict(other, state)
    assert all(torch.equal(state[key], value) for key, value in adapter_state_dict(other).items())


def test_load_adapter_state_dict_names_missing_keys():
    modules = attach_adapter(tiny_model())
    state = adapter_state_dict(modules)
    state.pop("model.layers.0.mlp.up_proj.delta_s")
    with pytest.raises(ValueError, match="up_proj.delta_s"):
        load_adapter_state_dict(modules, state)


def test_student_plus_teacher_row_grads_equal_full_gradient():
    model = tiny_model()
    modules = attach_adapter(model)
    randomize_knobs(modules)
    ids = torch.randint(0, 64, (4, 6), generator=torch.Generator().manual_seed(3))
    is_student = torch.tensor([True, False, True, False])
    with capture_row_grads(modules) as capture:
        model(ids).logits.log_softmax(-1)[..., 5].sum().backward()
    g_student, g_teacher = capture.split(is_student)
    for name, module in modules.items():
        assert capture.per_row[name].shape == (4, module.rank)
        torch.testing.assert_close(g_student[name] + g_teacher[name], module.delta_s.grad, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(module.delta_s_hack.grad, module.delta_s.grad)


def test_row_grads_equal_separate_per_row_backwards():
    model = tiny_model()
    modules = attach_adapter(model)
    randomize_knobs(modules)
    ids = torch.randint(0, 64, (3, 6), generator=torch.Generator().manual_seed(4))
    with capture_row_grads(modules) as capture:
        model(ids).logits.log_softmax(-1)[..., 7].sum().backward()
    per_row = capture.per_row
    for row in range(3):
        model.zero_grad()
        model(ids[row : row + 1]).logits.log_softmax(-1)[..., 7].sum().backward()
        for name, module in modules.items():
            torch.testing.assert_close(per_row[name][row], module.delta_s.grad, rtol=1e-4, atol=1e-6)


def test_row_grads_from_micro_batches_follow_forward_order():
    model = tiny_model()
    modules = attach_adapter(model)
    randomize_knobs(modules)
    ids = torch.randint(0, 64, (4, 6), generator=torch.Generator().manual_seed(5))
    with capture_row_grads(modules) as whole:
        model(ids).logits.log_softmax(-1)[..., 1].sum().backward()
    model.zero_grad()
    with capture_row_grads(modules) as micro:
        first = model(ids[:3]).logits.log_softmax(-1)[..., 1].sum()
        second = model(ids[3:]).logits.log_softmax(-1)[..., 1].sum()
        (second + first).backward()
    for name in modules:
        torch.testing.assert_close(micro.per_row[name], whole.per_row[name], rtol=1e-4, atol=1e-6)


def test_row_grads_of_a_forward_without_gradient_are_zero():
    model = tiny_model()
    modules = attach_adapter(model)
    ids = input_ids()
    with capture_row_grads(modules) as capture:
        used = model(ids[:2]).logits.sum()
        model(ids[2:])  # its output never reaches the loss
        used.backward()
    for rows in capture.per_row.values():
        assert rows.shape[0] == 3 and not rows[2].any()


def test_row_grads_without_any_forward_are_empty_on_the_knob_device():
    # a DDP rank whose groups all had zero reward variance runs no forward; its rows are masked with (and
    # all-reduced as) tensors on the knobs' device. `meta` stands in for CUDA: anything built on the CPU shows.
    modules = {"layer": SVDAdapterLinear(nn.Linear(6, 5)).to("meta")}
    with capture_row_grads(modules) as capture:
        pass
    rows = capture.per_row["layer"]
    assert (rows.device, rows.dtype, rows.shape) == (torch.device("meta"), torch.float32, (0, 5))


def test_merged_generation_matches_unmerged_and_restores_exactly():
    model = tiny_model()
    modules = attach_adapter(model)
    randomize_knobs(modules)
    ids = input_ids()
    weights = {name: m.base.weight for name, m in modules.items()}
    snapshot = {name: w.detach().clone() for name, w in weights.items()}
    with torch.no_grad():
        unmerged = model(ids).logits
        with merged_for_generation(modules):
            merged = model(ids).logits
            generated = model.generate(ids, max_new_tokens=3, do_sample=False, pad_token_id=0)
        after = model(ids).logits
    torch.testing.assert_close(merged, unmerged, rtol=1e-4, atol=1e-5)
    assert torch.equal(after, unmerged)
    assert generated.shape == (3, 10)
    for name, module in modules.items():
        assert module.base.weight is weights[name] and torch.equal(module.base.weight, snapshot[name])


def test_merged_at_zero_knobs_is_exactly_the_base_in_bf16():
    model = tiny_model(torch.bfloat16)
    ids = input_ids()
    with torch.no_grad():
        base_logits = model(ids).logits
    modules = attach_adapter(model)
    with torch.no_grad(), merged_for_generation(modules):
        assert torch.equal(model(ids).logits, base_logits)


def test_merged_refuses_forward_with_grad():
    model = tiny_model()
    modules = attach_adapter(model)
    with merged_for_generation(modules), pytest.raises(RuntimeError, match="no_grad"):
        model(input_ids())


def test_folding_delta_s_into_the_base_gives_the_deployed_logits_with_plain_linears():
    model = tiny_model()
    modules = attach_adapter(model)
    randomize_knobs(modules)
    with torch.no_grad(), quarantine_zeroed(modules):
        deployed = model(input_ids()).logits
    with torch.no_grad():
        kept = model(input_ids()).logits
    fold_into_base(model, modules, ("delta_s",))
    assert not any(isinstance(m, SVDAdapterLinear) for m in model.modules())
    assert all(type(model.get_submodule(name)) is nn.Linear for name in modules)
    with torch.no_grad():
        folded = model(input_ids()).logits
    torch.testing.assert_close(folded, deployed, atol=1e-5, rtol=1e-5)
    assert (folded - kept).abs().max() > 1e-3  # δS_hack was dropped, not folded in
