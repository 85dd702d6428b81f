"""A colocated vLLM engine that samples the student's rollouts with the adapter's current weights.

vLLM is an optional extra (`pip install -e ".[vllm]"`, see docs/performance.md): nothing imports this module
unless `model.generation.backend: vllm` asks for it. The engine runs in this process
(VLLM_ENABLE_V1_MULTIPROCESSING=0), reads the base from its directory once, and from then on gets the
adapted weights pushed in memory: before each sampling call the folded weight W + U diag(δS + δS_hack) Vh
of every adapted Linear, and of the Linears fused with it in vLLM's kernels, goes through the worker's
in-place `reload_weights`. Nothing is written to disk. The push happens only when a knob changed since
the last one, so the deployment eval (δS_hack zeroed) and the next training step (kept) each sample
from the weights they should, and a resumed run's first step pushes its restored knobs.
"""

import logging
import os
import random
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from pgrpo.model.adapter import KNOB_NAMES, SVDAdapterLinear, folded_weight
from pgrpo.step.rollout import SamplingConfig


def _import_vllm():
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # in-process: the push is a function call
    try:
        import vllm
    except ImportError as e:
        raise ImportError("model.generation.backend=vllm needs vLLM: install the extra with "
                          "`make setup-vllm` (CPU) or `pip install -e \".[vllm]\"` beside a CUDA torch; see "
                          "docs/performance.md, 'Generating with vLLM'") from e
    return vllm


class VLLMEngine:
    def __init__(self, model_dir: Path, dtype: str, seed: int, kv_cache_gib: float, max_model_len: int | None):
        """
        Args:
            model_dir: the base checkpoint directory (the one the trainer loaded).
            dtype: the base's dtype; vLLM computes in it, as the trainer's forward does.
            seed: the engine's own seed; each sampling call also gets a per-prompt seed from torch's RNG.
            kv_cache_gib: memory reserved for the KV cache (CPU RAM on a CPU, GPU memory on a GPU).
            max_model_len: longest prompt + completion (None: the model's own limit).
        """
        vllm = _import_vllm()
        threads = torch.get_num_threads()  # vLLM drops torch to one thread "for serving"; the trainer needs all
        # vLLM seeds python's, numpy's and torch's global RNGs with its own seed; the run's streams must not
        # depend on when the engine started (a resumed run starts it steps later than an uninterrupted one)
        python_rng, numpy_rng = random.getstate(), np.random.get_state()
        cuda = list(range(torch.cuda.device_count()))
        self._view = weights_view(model_dir)  # kept while the engine lives: vLLM may read the files again
        with torch.random.fork_rng(devices=cuda):
            self.llm = self._start(vllm, Path(self._view.name) if self._view else model_dir, dtype, seed,
                                   kv_cache_gib, max_model_len)
        random.setstate(python_rng)
        np.random.set_state(numpy_rng)
        torch.set_num_threads(threads)
        # each push carries the Linears only, by design; vLLM would list the norms and embeddings every time
        for name in ("inplace", "layerwise"):
            logging.getLogger(f"vllm.model_executor.model_loader.reload.{name}").setLevel(logging.ERROR)
        self._pushed: Tensor | None = None
        self.pushes = 0

    @staticmethod
    def _start(vllm, model_dir: Path, dtype: str, seed: int, kv_cache_gib: float, max_model_len: int | None):
        return vllm.LLM(
            model=str(model_dir), dtype=dtype, seed=seed, max_model_len=max_model_len,
            kv_cache_memory_bytes=int(kv_cache_gib * (1 << 30)),
            # the logprobs of the distribution actually sampled (after temperature), which is what the
            # trainer recomputes (token_logprobs divides by the same temperature)
            logprobs_mode="processed_logprobs",
            skip_tokenizer_init=True,  # token ids in, token ids out: pgrpo's tokenizer renders and decodes
            enforce_eager=not torch.cuda.is_available(),  # CUDA graphs pay off on a GPU; on CPU there are none
            # the model's generation_config would add its other end tokens (Qwen3's <|endoftext|>) as stops;
            # pgrpo stops at the tokenizer's EOS alone, as HF generate does here
            generation_config="vllm",
            # every prompt prefilled whole: a prompt split over two scheduler steps has the token sampled at the
            # end of its first part discarded, and vLLM rewinds the request's seeded generator by an offset,
            # which a CPU generator does not have ("CPU Generator does not use offset": a call of more prompt
            # tokens than one step's budget, as the end-of-run evaluation's 16 problems x 8 samples, died)
            enable_chunked_prefill=False,
            # on a GPU vLLM refuses to start unless this share of the device is free; the trainer already holds
            # the base, U and Vh, so ask for what is free now (the KV cache is sized by kv_cache_memory_bytes)
            **({"gpu_memory_utilization": 0.95 * _free_share()} if torch.cuda.is_available() else {}),
        )

    # -- weights ---------------------------------------------------------------------------------
    def sync(self, policy: nn.Module, adapter: Mapping[str, SVDAdapterLinear]) -> bool:
        """Push the adapted weights if a knob changed since the last push; returns whether it pushed."""
        knobs = torch.cat([getattr(m, k).detach().flatten().cpu() for m in adapter.values() for k in KNOB_NAMES])
        if self._pushed is not None and torch.equal(knobs, self._pushed):
            return False
        weights = pushed_weights(policy, adapter)
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
        # cached prompt keys and values were computed by the old weights: a prompt seen before (the same
        # problem next epoch, the eval's held-out prompts) would otherwise be continued from stale ones
        self.llm.reset_prefix_cache()
        self._pushed = knobs.clone()
        self.pushes += 1
        return True

    # -- sampling --------------------------------------------------------------------------------
    def sample(self, prompts: list[list[int]], n_per_prompt: int, sampling: SamplingConfig,
               eos_id: int) -> tuple[list[list[int]], list[bool], list[list[float]]]:
        """n_per_prompt completions per prompt (rows grouped by prompt, as rollout.sample).

        Returns (completion ids cut after the first EOS, EOS kept; clipped = no EOS within max_new_tokens;
        the sampler's logprob of each completion token). Each prompt's seed is drawn from torch's RNG, so
        a run's samples follow its seed and a resumed run continues the same stream.
        """
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        seeds = torch.randint(0, 2**31 - 1, (len(prompts),)).tolist()
        params = [SamplingParams(n=n_per_prompt, temperature=sampling.temperature, top_p=sampling.top_p, top_k=0,
                                 max_tokens=sampling.max_new_tokens, stop_token_ids=[eos_id], logprobs=0, seed=s,
                                 detokenize=False) for s in seeds]
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
        completions, clipped, logprobs = [], [], []
        for out in outputs:
            for sample in sorted(out.outputs, key=lambda o: o.index):
                tokens = list(sample.token_ids)
                if eos_id in tokens:
                    tokens = tokens[: tokens.index(eos_id) + 1]
                clipped.append(eos_id not in tokens)
                completions.append(tokens or [eos_id])
                logprobs.append([step[t].logprob for step, t in zip(sample.logprobs, tokens)])
        return completions, clipped, logprobs


def weights_view(model_dir: Path) -> tempfile.TemporaryDirectory | None:
    """A directory of links to `model_dir`'s files less the safetensors files that are not its weights, where it
    holds any; else None (vLLM reads `model_dir` itself).

    transformers reads a checkpoint's weights from model.safetensors (or the shards its index names); vLLM, given
    a local directory with no index, reads every top-level *.safetensors file as a shard of them, and refuses one
    that holds other tensors (a primed base keeps its low-rank update, update.safetensors, beside its merged
    weights). The view shows vLLM the checkpoint transformers loads, and leaves the directory, whose files are
    the base's digest, as it is.
    """
    weights = model_dir / "model.safetensors"
    if (model_dir / "model.safetensors.index.json").is_file() or not weights.is_file():
        return None  # sharded: vLLM keeps to the index's shards itself
    foreign = {f.name for f in model_dir.glob("*.safetensors")} - {weights.name}
    if not foreign:
        return None
    view = tempfile.TemporaryDirectory(prefix="pgrpo-vllm-weights-")
    for f in model_dir.iterdir():
        if f.name not in foreign:
            (Path(view.name) / f.name).symlink_to(f.resolve())
    return view


def _free_share() -> float:
    free, total = torch.cuda.mem_get_info()
    return free / total


def pushed_weights(policy: nn.Module, adapter: Mapping[str, SVDAdapterLinear]) -> Iterator[tuple[str, Tensor]]:
    """(checkpoint name, tensor) of every Linear the push must carry: the adapted ones folded, and their
    unadapted siblings as they are, one at a time (a real model's folded weights are not all held at once).

    vLLM fuses q/k/v and gate/up into one kernel and repacks a fused layer only once it has received
    every part (biases included), so adapting only q_proj still sends k_proj and v_proj of that block.
    """
    for parent in sorted({name.rpartition(".")[0] for name in adapter}):
        for child_name, child in policy.get_submodule(parent).named_children():
            name = f"{parent}.{child_name}"
            if name in adapter:
                linear, weight = adapter[name].base, folded_weight(adapter[name], KNOB_NAMES)
            elif isinstance(child, nn.Linear):
                linear, weight = child, child.weight.detach()
            else:
                continue
            yield f"{name}.weight", weight
            if linear.bias is not None:
                yield f"{name}.bias", linear.bias.detach()
