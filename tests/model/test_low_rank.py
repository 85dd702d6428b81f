"""pgrpo.model.low_rank: an update trained as a side path, merged into the weights to the same bits on any CPU."""

import hashlib
import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM

from pgrpo.model.low_rank import LowRankUpdate, merge, target_linears

RANK = 4


def tiny_model() -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    return LlamaForCausalLM(config).eval()


def trained_update(model, seed: int = 0) -> LowRankUpdate:
    """An update whose B is no longer zero, as training leaves it."""
    update = LowRankUpdate(model, RANK, seed)
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for b in update.b:
            b.copy_(torch.randn(b.shape, generator=generator) * 0.05)
    return update


def weights_digest(model) -> str:
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode() + tensor.contiguous().numpy().tobytes())
    return digest.hexdigest()


IDS = torch.tensor([[1, 5, 9, 13, 2, 7]])


def test_every_linear_but_the_output_embeddings_is_updated():
    names = set(target_linears(tiny_model()))
    assert "lm_head" not in names and len(names) == 2 * 7  # q, k, v, o, gate, up, down in each layer


def test_an_untrained_update_leaves_the_model_as_it_was():
    model = tiny_model()
    before = model(IDS).logits
    hooks = LowRankUpdate(model, RANK, seed=0).attach(model)
    assert torch.equal(model(IDS).logits, before)  # B starts at zero
    for hook in hooks:
        hook.remove()


def test_the_merged_model_computes_what_the_side_path_trained():
    model = tiny_model()
    update = trained_update(model)
    hooks = update.attach(model)
    side_path = model(IDS).logits
    for hook in hooks:
        hook.remove()
    assert not torch.allclose(model(IDS).logits, side_path, atol=1e-3)  # the update changes what it computes
    merge(model, update.factors(torch.float32))
    assert torch.allclose(model(IDS).logits, side_path, atol=1e-5)


MERGE_IN_A_CHILD = """
import hashlib, sys, torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM
from pgrpo.model.low_rank import merge
torch.set_num_threads(int(sys.argv[3]))
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32)
merge(model, load_file(sys.argv[2]))
digest = hashlib.sha256()
for name, tensor in sorted(model.state_dict().items()):
    digest.update(name.encode() + tensor.contiguous().numpy().tobytes())
print(digest.hexdigest())
"""


def test_the_merge_is_the_exact_sum_rounded_once_which_no_kernel_changes():
    """bf16 factors' products are exact in float64, so the merged weight is W + B @ A computed exactly and rounded
    once to float32: one value, whatever the CPU. A float32 matmul rounds its partial sums, in an order its kernel
    picks for the CPU (here it misses the exact value at 243 of 41472 weights)."""
    model = tiny_model()
    factors = trained_update(model).factors(torch.bfloat16)
    before = {name: linear.weight.detach().clone() for name, linear in target_linears(model).items()}
    merge(model, factors)
    for name, linear in target_linears(model).items():
        a, b = factors[f"{name}.lora_a"].double(), factors[f"{name}.lora_b"].double()
        assert torch.equal(linear.weight, (before[name].double() + b @ a).float()), name


def test_merging_gives_the_same_bits_whatever_the_cpus_kernels_and_threads(tmp_path):
    """What makes a published update one base everywhere: the merge must not depend on the kernels the CPU in
    hand picks (torch's default ones stand in for another CPU's) nor on the thread count."""
    model = tiny_model()
    update = trained_update(model)
    model.save_pretrained(tmp_path / "base")
    save_file(update.factors(torch.bfloat16), tmp_path / "update.safetensors")
    merge(model, update.factors(torch.bfloat16))
    here = weights_digest(model)

    def merged_in_a_child(threads: int, capability: str | None) -> str:
        env = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}
        if capability:
            env["ATEN_CPU_CAPABILITY"] = capability
        done = subprocess.run([sys.executable, "-c", MERGE_IN_A_CHILD, str(tmp_path / "base"),
                               str(tmp_path / "update.safetensors"), str(threads)],
                              env=env, capture_output=True, text=True, check=True)
        return done.stdout.strip()

    assert merged_in_a_child(1, "default") == merged_in_a_child(2, None) == here


def test_factors_of_another_model_are_refused_naming_the_layers():
    model = tiny_model()
    factors = trained_update(model).factors(torch.float32)
    missing = {k: v for k, v in factors.items() if not k.startswith("model.layers.1.mlp.down_proj")}
    with pytest.raises(ValueError, match=r"missing \['model.layers.1.mlp.down_proj'\]"):
        merge(model, missing)
    wrong = {**factors, "model.layers.0.self_attn.q_proj.lora_b": torch.zeros(7, RANK)}
    with pytest.raises(ValueError, match=r"model.layers.0.self_attn.q_proj's factors \(7, 4\)"):
        merge(model, wrong)
