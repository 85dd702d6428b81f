"""The step at real-model size, without weights: randomly initialised models of SmolLM2-135M's and Qwen3-0.6B's
shapes, timed on one device side by side (`python -m benchmarks.real_size --device cuda`).

What a step costs does not depend on what the weights say, only on their shapes, so no download is needed:
generation with the adapter merged against the bare base (tokens/s), a forward + backward of a lab-sized batch
with the adapter against the bare base's, the per-row gradient capture's and the projection's share of the step,
and peak device memory of each. Every ratio comes from sides whose repetitions alternate in one process.
"""

import argparse
import copy
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace

import torch
from torch import Tensor
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen3Config

from benchmarks.bench import _randomize, bare_forward_backward, generation_figures, time_alternating
from pgrpo.model.adapter import attach_adapter, capture_row_grads
from pgrpo.directions.extraction import HackBasis
from pgrpo.interventions.erase import Erase
from pgrpo.step.loss import LossConfig, grpo_loss, token_logprobs
from pgrpo.model.load import DTYPES, load_tokenizer
from pgrpo.step.projection import grad_hack_fraction, measure_grads
from pgrpo.step.rollout import pack

# the published configs' shapes (SmolLM2-135M-Instruct is a Llama, Qwen3-0.6B a Qwen3; both tie the embeddings)
SHAPES = {
    "smollm2-135m": (LlamaConfig, dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                                       num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
                                       rope_theta=100000.0, rms_norm_eps=1e-5, tie_word_embeddings=True)),
    "qwen3-0.6b": (Qwen3Config, dict(vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                                     num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                                     max_position_embeddings=40960, rope_theta=1e6, rms_norm_eps=1e-6,
                                     tie_word_embeddings=True)),
}
# a rehearsal on a CPU keeps each architecture and shrinks it
TINY_SHAPE = dict(vocab_size=4096, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16)
V_ROWS = 4  # hack directions per Linear, as model.extraction.k's default keeps at most


@dataclass(frozen=True)
class Work:
    """How much one measurement does: the lab's step by default (4 prompts x 8 samples x 128 new tokens)."""

    prompts: int = 4
    group: int = 8
    new_tokens: int = 128
    prompt_tokens: int = 200  # the built-in problems' prompts run 150-250 tokens
    repeats: int = 3


TINY_WORK = Work(prompts=2, group=2, new_tokens=8, prompt_tokens=16, repeats=1)


def shape_figures(shape: str, device: str, dtype: str, tokenizer_from: str, tiny: bool = False) -> dict:
    """Every figure for one shape on one device (see the module's docstring)."""
    work = TINY_WORK if tiny else Work()
    config_class, fields = SHAPES[shape]
    config = config_class(**(fields | (TINY_SHAPE if tiny else {})))
    start = time.perf_counter()
    with torch.device(device):  # initialised where it runs: a 0.6 B init on the host takes longer than the step
        torch.manual_seed(0)
        base = AutoModelForCausalLM.from_config(config, dtype=DTYPES[dtype]).eval().requires_grad_(False)
    policy = copy.deepcopy(base)
    adapter = attach_adapter(policy)  # the SVD of every targeted Linear, on the device
    setup_s = time.perf_counter() - start
    tokenizer = load_tokenizer(tokenizer_from)
    figures = {"shape": shape, "device": device, "dtype": dtype, "work": work.__dict__, "setup_s": setup_s,
               "parameters": sum(p.numel() for p in base.parameters()),
               "adapter_linears": len(adapter)}
    generation = {}
    figures |= _peak(device, "generate_peak_gib", lambda: generation.update(generation_figures(
        policy, adapter, base, tokenizer, work.prompts, work.group, work.new_tokens, work.repeats)))
    figures |= generation
    # a step's generation at the merged adapter's speed (a random model's samples run to max_new_tokens)
    rows_tokens = work.prompts * work.group * work.new_tokens
    generate_s = rows_tokens / (generation["base_generate_tokens_per_s"]
                                * generation["adapter_over_base_generate_tokens_per_s"])
    return figures | step_figures(policy, adapter, base, work, device, generate_s)


def step_figures(policy, adapter, base, work: Work, device: str, generate_s: float) -> dict:
    """A lab-sized batch's forward + backward (bare base; adapter; adapter with the per-row capture) and the
    projection of its gradient, timed alternating; their shares of a step that also generates for generate_s."""
    rows = work.prompts * work.group
    generator = torch.Generator().manual_seed(0)
    vocab = policy.config.vocab_size
    prompts = [torch.randint(3, vocab, (work.prompt_tokens,), generator=generator).tolist() for _ in range(rows)]
    completions = [torch.randint(3, vocab, (work.new_tokens - i % 7,), generator=generator).tolist()
                   for i in range(rows)]
    packed = pack(prompts, completions, 0).to(device)
    advantages = torch.randn(rows, generator=generator).to(device)
    is_student = (torch.arange(rows) < rows * 3 // 4).to(device)
    basis = _random_basis(adapter, device)
    step_view = SimpleNamespace(adapter=adapter, basis=basis)
    _randomize(adapter)
    split: dict[str, tuple[dict[str, Tensor], dict[str, Tensor]]] = {}

    def loss_of(model) -> Tensor:
        logp = token_logprobs(model, packed.input_ids, packed.attention_mask, packed.completion_len)[0]
        return grpo_loss(logp, None, None, advantages, packed.completion_mask, LossConfig(), denominator_rows=rows,
                         max_new_tokens=work.new_tokens)[0]

    def bare() -> None:
        bare_forward_backward(base, packed)

    def adapter_plain() -> None:
        policy.zero_grad(set_to_none=True)
        loss_of(policy).backward()

    def adapter_captured() -> None:
        policy.zero_grad(set_to_none=True)
        with capture_row_grads(adapter) as captured:
            loss_of(policy).backward()
        split["grads"] = captured.split(is_student)

    def project() -> None:
        # what the step does after its backward under erase: measure the hack-ward share, edit the gradient,
        # measure it again
        raw = {n: m.delta_s.grad.clone() for n, m in adapter.items()}
        measure_grads(adapter, basis, *split["grads"])
        Erase().gradient(step_view)
        grad_hack_fraction(adapter, basis)
        for n, m in adapter.items():  # the next round projects the same gradient again
            m.delta_s.grad.copy_(raw[n])

    adapter_captured()
    synced = {name: _synced(fn, device) for name, fn in
              {"bare_fwd_bwd": bare, "adapter_fwd_bwd": adapter_plain, "captured_fwd_bwd": adapter_captured,
               "project": project}.items()}
    seconds = time_alternating(synced, work.repeats)
    figures = {f"{name}_s": s for name, s in seconds.items()}
    for name in ("bare_fwd_bwd", "adapter_fwd_bwd", "captured_fwd_bwd"):
        figures |= _peak(device, f"{name}_peak_gib", synced[name])
    step_s = generate_s + seconds["captured_fwd_bwd"] + seconds["project"]
    return figures | {
        "step_generate_s": generate_s,
        "adapter_over_bare_fwd_bwd": seconds["adapter_fwd_bwd"] / seconds["bare_fwd_bwd"],
        "capture_over_plain_fwd_bwd": seconds["captured_fwd_bwd"] / seconds["adapter_fwd_bwd"],
        "capture_share_of_step": (seconds["captured_fwd_bwd"] - seconds["adapter_fwd_bwd"]) / step_s,
        "projection_share_of_step": seconds["project"] / step_s,
        "generate_share_of_step": generate_s / step_s,
        "batch": {"rows": rows, "prompt_tokens": work.prompt_tokens, "completion_tokens": packed.completion_len},
    }


def _random_basis(adapter, device: str) -> HackBasis:
    generator = torch.Generator().manual_seed(0)
    V = {}
    for name, m in adapter.items():
        q, _ = torch.linalg.qr(torch.randn(m.rank, V_ROWS, generator=generator))  # (r, k) orthonormal columns
        V[name] = q.T.contiguous().to(device)
    return HackBasis(V, {name: torch.ones(V_ROWS, device=device) for name in V})


def _synced(fn: Callable[[], object], device: str) -> Callable[[], None]:
    """fn, then wait for the device: a CUDA kernel launch returns before the kernel ran."""
    def run() -> None:
        fn()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
    return run


def _peak(device: str, key: str, fn: Callable[[], object]) -> dict:
    """Peak GiB the device's allocator held while fn ran (CUDA only: a CPU has no such counter)."""
    if not device.startswith("cuda"):
        fn()
        return {key: None}
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return {key: torch.cuda.max_memory_allocated() / 2**30}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16", choices=list(DTYPES))
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--tokenizer", default="embedded", help="a model whose tokenizer renders the prompts")
    parser.add_argument("--tiny", action="store_true", help="each architecture shrunk (a rehearsal on a CPU)")
    args = parser.parse_args()
    result = {}
    for shape in args.shapes:
        result[shape] = shape_figures(shape, args.device, args.dtype, args.tokenizer, args.tiny)
        print(f"{shape}: " + ", ".join(f"{k} {v:.3g}" for k, v in result[shape].items()
                                       if isinstance(v, float)), flush=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
