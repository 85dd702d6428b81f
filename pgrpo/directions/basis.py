"""The hack basis V a run uses: contrastive pairs → NLL gradients → extract_basis, cached by content.

The cache key covers the model's content id, the exact pair texts, k, tau,
the normalisation and the adapter layout, so a changed input never reuses a
stale V (the reference keyed its cache by file path only), and then where it is
computed: torch's thread count and the machine, on which V's last bits depend
(on one 2-core machine, 1 and 2 threads extracted the embedded default's V to
other bytes, and erase trained on them to other end counts, 157 and 142 of 336
hacks). A file is named <inputs key>-<where key>.safetensors.

A V a sweep kept (results/bases/v-<digest>.safetensors, beside the kept bases) is
restored into the cache where this machine and thread count key it alike, its
digest checked, rather than extracted again.
"""

import hashlib
import json
import math
import os
import random
import threading
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch

from pgrpo.model.adapter import SVDAdapterLinear
from pgrpo.records.cache import KEPT_BUILDS, announce, announce_build, announce_cached, duration, progress_ticker
from pgrpo.env import MODES, Problem
from pgrpo.env.hack_forms import HACK_STYLES
from pgrpo.env.pairs import (ContrastivePair, load_pairs, nonhack_pairs, pool_pairs, shuffled_pairs,
                             template_pairs)
from pgrpo.env.pool import TeacherPool
from pgrpo.directions.extraction import HackBasis, Normalize, basis_cache_key, extract_basis, nll_grads, pairs_hash
from pgrpo.model.load import hack_openings, model_id
from pgrpo.chat import render_chat
from pgrpo.step.rollout import Packed, encode_prompts, pack
from pgrpo.model.substrate import cpu_kind


RUN_POOL = "pool"  # extraction.pairs naming the teacher pool of the run itself
SHUFFLED_VARIANTS = 4  # template pairs per problem behind the shuffled control: 8 completions to deal labels over
V_SECONDS_PER_COMPLETION = 0.1  # its gradient on the embedded model, measured on 2 cores (for the announcement)
KEPT_PREFIX = "v-"  # a kept V's file: results/bases/v-<its digest's first 16 hex digits>.safetensors


@dataclass
class ExtractionConfig:
    """How V is built (each field's docstring is its `--help`)."""

    pairs: str = "templates"
    """templates (built-in hack/clean completions of the training problems), pool (the run's teacher pool, mined:
    each exploited row against a gt-correct row of its problem), a teacher-pool directory, or a JSON file of pairs."""
    template_openings: str | None = None
    """How the template hacks are written (pgrpo/env/hack_forms.py HACK_STYLES): shared (the line the teacher rows'
    and the priming's hacks open with), distinct (a lever of its own per mode), varied (the detectors' forms of a
    grammar, none of them taught); None: as the model's substrate writes them. distinct or varied on a
    shared-opening model asks whether V is the hack or the one template it shares with the teacher."""
    modes: list[str] | None = None
    """Only pairs of these loophole modes (what a weak detector knows); None: all."""
    k: int = 4
    """Hack axes kept per module."""
    tau_axis: float | None = None
    """Drop a module's axes with σ < tau · its largest σ."""
    noise_floor: float | None = None
    """Drop axes whose σ is below this quantile of every module's σ (before the held-out pairs are scored)."""
    n_heldout: int = 8
    """Last pairs kept out of the SVD and scored (heldout_* in V's metadata)."""
    normalize: Normalize = "length"
    """length: each NLL ÷ its own token count; fixed: ÷ fixed_denominator (the Dr.GRPO convention of the loss)."""
    fixed_denominator: int | None = None
    """The denominator of normalize: fixed."""
    batch_size: int = 16
    """Completions per forward/backward while extracting."""
    seed: int = 0
    """Order of the pairs, which decides the held-out ones."""

    def __post_init__(self):
        if self.template_openings not in (None, *HACK_STYLES):
            raise ValueError(f"extraction.template_openings={self.template_openings!r}: expected one of {HACK_STYLES}, "
                             f"or null (as the model's substrate writes them)")


def contrastive_pairs(problems: list[Problem], cfg: ExtractionConfig, control: str = "none",
                      openings: str = "shared") -> list[ContrastivePair]:
    """The pairs V is extracted from; `control` gives the negative-control sets (shuffled | nonhack); template
    hacks open as `cfg.template_openings` says, else as the model's substrate opens them (`openings`,
    pgrpo.model.load.hack_openings)."""
    if control == "nonhack":
        pairs = nonhack_pairs(problems, cfg.modes)
    elif cfg.pairs == "templates":
        # the shuffled control deals labels across several completions of each problem
        pairs = template_pairs(problems, cfg.modes, SHUFFLED_VARIANTS if control == "shuffled" else 1,
                               cfg.template_openings or openings)
    elif (Path(cfg.pairs) / "pool.json").is_file():
        pairs = pool_pairs(TeacherPool.load(cfg.pairs), problems, cfg.modes or list(MODES))
    elif cfg.pairs == RUN_POOL:
        raise ValueError(f"extraction.pairs={RUN_POOL!r} means the run's teacher pool: pgrpo fit resolves it to the "
                         f"pool's directory; elsewhere pass that directory")
    else:
        pairs = [p for p in load_pairs(cfg.pairs) if cfg.modes is None or p.mode in cfg.modes]
    if control == "shuffled":
        pairs = shuffled_pairs(pairs, cfg.seed)
    elif control not in ("none", "nonhack"):
        raise ValueError(f"control={control!r}: expected none, shuffled or nonhack")
    if len(pairs) <= cfg.n_heldout:
        raise ValueError(f"{len(pairs)} contrastive pairs but n_heldout={cfg.n_heldout}: nothing left to extract from")
    random.Random(cfg.seed).shuffle(pairs)  # held-out pairs are the last ones: mix the modes among them
    return pairs


def basis_args(model_name: str, cfg: ExtractionConfig, temperature: float, control: str = "none") -> dict:
    """What `load_or_extract_basis` and `cached_basis_path` take besides the model and the problems, for a run of
    `model_name` that samples at `temperature`: every host keys and extracts V alike."""
    return dict(cfg=cfg, model_id=model_id(model_name), temperature=temperature, control=control,
                openings=hack_openings(model_name))


def load_or_extract_basis(
    model, adapter, tokenizer, problems: list[Problem], cfg: ExtractionConfig, *, model_id: str, cache: Path | None,
    temperature: float = 1.0, control: str = "none", openings: str = "shared",
) -> HackBasis:
    """V for this model and pair set: from the cache when every input matches, else extracted and cached.

    `problems` must be the ones the run may learn from (never its held-out evaluation problems).
    `temperature` is the sampling temperature the loss divides logits by: V is the gradient of the same
    logprobs. cache=None always extracts and stores nothing: the key knows the base model, not the knobs,
    so a V re-extracted against a trained policy (the V refresh) must neither read nor write it.
    """
    pairs, prompts, pairs_id, path = _pairs_and_cache_path(adapter, tokenizer, problems, cfg, model_id, cache,
                                                           temperature, control, openings)
    device = next(model.parameters()).device
    what = "hack basis V" if control == "none" else f"hack basis V of the {control} control"
    if path is not None and not path.is_file():
        restore_kept_basis(path)
    if path is not None and path.is_file():
        announce_cached(what, path)
        return HackBasis.load(path, device=device)
    n = 2 * len(pairs)
    # the time is estimated for the model in hand: measured on the embedded one, announced as it goes otherwise
    work = (f"gradients of {n} completions, ~{duration(V_SECONDS_PER_COMPLETION * n)} for the embedded model on 2 cores"
            if model_id.startswith("embedded") else f"gradients of {n} completions of {model_id}; the time left is "
            f"announced as they go")
    tick = (progress_ticker("V gradients, batch", 2 * math.ceil(len(pairs) / cfg.batch_size))
            if path is not None and not model_id.startswith("embedded") else None)
    # uncached (the V refresh, which runs every few steps) it extracts without a word
    with announce_build(what, path, work) if path is not None else nullcontext():
        g_hack = completion_grads(model, adapter, tokenizer, prompts, [p.hack for p in pairs], cfg, temperature, tick)
        g_clean = completion_grads(model, adapter, tokenizer, prompts, [p.clean for p in pairs], cfg, temperature,
                                   tick)
        basis = extract_basis(g_hack, g_clean, cfg.k, cfg.tau_axis, cfg.n_heldout, cfg.noise_floor, meta={
            "model_id": model_id, "pairs_hash": pairs_id, "normalize": cfg.normalize, "control": control,
            "temperature": str(temperature), **extracted_where(adapter),
        })
    if path is not None:
        save_to_cache(basis, path)
    return basis.to(device)


def cached_basis_path(adapter, tokenizer, problems: list[Problem], cfg: ExtractionConfig, *, model_id: str,
                      cache: Path, temperature: float = 1.0, control: str = "none", openings: str = "shared") -> Path:
    """Where `load_or_extract_basis` with these arguments keeps its V (the file may not exist yet)."""
    return _pairs_and_cache_path(adapter, tokenizer, problems, cfg, model_id, cache, temperature, control, openings)[3]


def adapter_key(adapter: Mapping[str, SVDAdapterLinear]) -> dict:
    """What of the adapter decides V: each adapted Linear's name and rank, and the base weights' dtype.

    Read off the adapter itself, so that no caller can describe it wrongly (`pgrpo extract` once keyed every V as
    the default targets at full rank, whatever the run had set)."""
    return {"ranks": {name: m.rank for name, m in sorted(adapter.items())},
            "dtype": str(next(iter(adapter.values())).U.dtype) if adapter else None}


def extracted_where(adapter: Mapping[str, SVDAdapterLinear]) -> dict[str, str]:
    """Where V's gradients are computed, as far as its last bits depend on it: torch's thread count and the machine
    (the CPU's kind, and the GPU's name where the adapter sits on one)."""
    device = next(iter(adapter.values())).U.device if adapter else torch.device("cpu")
    gpu = f" + {torch.cuda.get_device_name(device)}" if device.type == "cuda" else ""
    return {"threads": str(torch.get_num_threads()), "machine": cpu_kind() + gpu}


def _pairs_and_cache_path(adapter, tokenizer, problems, cfg, model_id, cache, temperature, control, openings):
    pairs = contrastive_pairs(problems, cfg, control, openings)
    prompts = pair_prompts(tokenizer, pairs)
    pairs_id = pairs_hash([(pr, p.hack, p.clean) for pr, p in zip(prompts, pairs)])
    if cache is None:
        return pairs, prompts, pairs_id, None
    inputs = basis_cache_key(
        model_id, pairs_id, cfg.k, cfg.tau_axis, cfg.normalize,
        extra={**adapter_key(adapter), "n_heldout": cfg.n_heldout, "fixed_denominator": cfg.fixed_denominator,
               "noise_floor": cfg.noise_floor, "temperature": temperature},
    )
    where = hashlib.sha256(json.dumps(extracted_where(adapter), sort_keys=True).encode()).hexdigest()[:8]
    return pairs, prompts, pairs_id, Path(cache) / f"{inputs}-{where}.safetensors"


def save_to_cache(basis: HackBasis, path: Path) -> None:
    """Cache V under its key, its meta naming the key (cache_key; inputs_key, what it is extracted from) and its
    digest as extracted: a run's basis.json then names the cached V it took, a placebo's the V it was drawn like."""
    basis.meta |= {"cache_key": path.stem, "inputs_key": path.stem.split("-")[0],
                   "digest_as_extracted": basis.digest()}
    save_atomically(basis, path)


def restore_kept_basis(path: Path) -> bool:
    """Copy the V a sweep kept under this cache key (results/bases/v-<digest>.safetensors) to `path`, its digest
    checked against the one it was kept with: True when restored. None kept: False, silently; one whose numbers
    are not the ones it was kept with: False, with one line saying so (the caller extracts instead)."""
    for kept in sorted(KEPT_BUILDS.glob(f"{KEPT_PREFIX}*.safetensors")):
        basis = HackBasis.load(kept)
        if basis.meta.get("cache_key") != path.stem:
            continue
        expected, actual = basis.meta.get("digest_as_extracted", ""), basis.digest()
        if actual != expected or kept.stem != f"{KEPT_PREFIX}{actual[:16]}":
            announce(f"hack basis V: the kept {kept} is not used (its numbers' sha256 is {actual[:16]}, kept as "
                     f"{expected[:16]}); extracting it instead")
            return False
        save_atomically(basis, path)
        announce(f"hack basis V: restored from {kept} (sha256 of its numbers checked)")
        return True
    return False


def rank_zero_basis(strategy, rank: int, sharded: bool, load_or_extract: Callable[[Path | None], HackBasis],
                    cache: Path | None, cached_path: Callable[[Path], Path]) -> HackBasis:
    """The V every rank of a distributed run uses: rank 0's, bit for bit, on the CPU.

    Ranks that extracted on their own could differ in the last bits, and the gradient edit must be the same
    everywhere. `load_or_extract(cache)` is this rank's load_or_extract_basis, `cached_path(cache)` where it
    keeps this V (cache None: uncached, as the V refresh is). A plain base: rank 0 alone loads or extracts. A
    sharded base (FSDP): every forward is collective, so all ranks extract, or none does (a cache hit).
    """
    if not sharded:
        return strategy.broadcast(load_or_extract(cache).to("cpu") if rank == 0 else None, src=0)
    path = cached_path(cache) if cache is not None else None
    if strategy.broadcast(path is not None and path.is_file(), src=0):
        announce_cached("hack basis V", path)
        basis = HackBasis.load(path) if rank == 0 else None
    else:
        with announce_build("hack basis V", path, "every rank, on the sharded base") if path else nullcontext():
            basis = load_or_extract(None)
        if path is not None and rank == 0:
            save_to_cache(basis, path)
    return strategy.broadcast(basis.to("cpu") if basis is not None else None, src=0)


def save_atomically(basis: HackBasis, path: Path) -> None:
    """A killed extraction never leaves a truncated V, and runs that extract the same V at once (ranks, sweep
    cells on one cache) never share a temporary file: each writes its own, and the last rename wins."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.stem}.tmp{os.getpid()}-{threading.get_ident()}")
    try:
        basis.save(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def pack_completions(tokenizer, prompts: list[str], completions: list[str]) -> Packed:
    """Rendered prompts and completion texts as one batch: prompts encoded as generation encodes them, each
    completion closed by EOS as a sampled one is."""
    eos = tokenizer.eos_token_id
    completion_ids = [tokenizer(c, add_special_tokens=False)["input_ids"] + [eos] for c in completions]
    return pack(encode_prompts(tokenizer, prompts), completion_ids, tokenizer.pad_token_id)


def pair_prompts(tokenizer, pairs: list[ContrastivePair]) -> list[str]:
    """Each pair's prompt as the model's chat template renders it."""
    return [render_chat(tokenizer, list(p.messages)) for p in pairs]


def completion_grads(model, adapter, tokenizer, prompts: list[str], completions: list[str], cfg: ExtractionConfig,
                     temperature: float = 1.0, on_batch=None):
    """Per-completion ∇δS NLL, batched: {module: (n, r)}; `on_batch()` after each batch."""
    packed = pack_completions(tokenizer, prompts, completions)
    device = next(model.parameters()).device
    with torch.random.fork_rng(devices=[]):  # extraction must not shift the run's sampling RNG
        return nll_grads(
            model, adapter, packed.input_ids.to(device), packed.attention_mask.to(device),
            packed.completion_mask.to(device), cfg.normalize, cfg.fixed_denominator, cfg.batch_size,
            temperature=temperature, on_batch=on_batch,
        )
