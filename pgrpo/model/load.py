"""One loader for the embedded default, local checkpoint directories and cached hub models.

`name_or_path` is "embedded" (the model pgrpo builds itself, see pgrpo.model.embedded; "embedded-distinct" is its
twin pretrained on hacks that open with a token of their own per mode, exploits.DISTINCT_LEVERS),
`<model>+primed` (that model after `pgrpo prime`'s warm start, see pgrpo.model.priming; `<model>+primed-v2` and
every other named priming: priming.NAMED_PRIMINGS), a checkpoint directory,
a GGUF model (a `.gguf` path, or a packaged name such as
"smollm2-135m-instruct": converted once to a checkpoint directory, see
pgrpo.model.gguf_model), or a hub id such as "Qwen/Qwen3-4B" that is already in the
local Hugging Face cache. Nothing is ever downloaded.
"""

import functools
import hashlib
import json
from pathlib import Path

import torch
from huggingface_hub import try_to_load_from_cache
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from pgrpo.records.cache import announce, file_sha256, files_digest
from pgrpo.model.embedded import cached_build_digest, embedded_default_path, recipe_hash
from pgrpo.model.gguf_model import converted_checkpoint, is_gguf_model
from pgrpo.model.priming import (RECORD as PRIMING_RECORD, named_priming, primed_checkpoint, primed_target,
                                 published_update)
from pgrpo.model.substrate import cpu_kind, has_bf16_units

EMBEDDED = "embedded"
# `<model>+primed`: the model after `pgrpo prime`'s default warm start (pgrpo.model.priming), built once, cached;
# every named priming (`+primed-v2`, ...) is an entry of priming.NAMED_PRIMINGS, read through priming.named_priming
PRIMED = "+primed"
# the embedded substrates by name: how the hacks its base was pretrained on open (exploits.OPENINGS)
EMBEDDED_OPENINGS = {EMBEDDED: "shared", f"{EMBEDDED}-distinct": "distinct"}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_model_path(name_or_path: str) -> Path:
    """The local directory that holds the model's config, weights and tokenizer."""
    if named := named_priming(name_or_path):
        base, _, settings = named
        return primed_checkpoint(resolve_model_path(base), model_id(base), settings)
    if name_or_path in EMBEDDED_OPENINGS:
        return embedded_default_path(openings=EMBEDDED_OPENINGS[name_or_path])
    if is_gguf_model(name_or_path):
        return converted_checkpoint(name_or_path)
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return path.resolve()
    snapshot = _cached_hub_snapshot(name_or_path)
    if snapshot is None:
        raise FileNotFoundError(
            f"model {name_or_path!r} is not a directory and not in the local Hugging Face cache; "
            f"use `model: {EMBEDDED}`, a path to a checkpoint directory or a .gguf file, or a packaged GGUF model "
            f"(smollm2-135m-instruct)"
        )
    return snapshot


def load_model_and_tokenizer(
    name_or_path: str, dtype: str = "float32", device: str | torch.device = "cpu"
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """A frozen causal LM in eval mode and its tokenizer, set up for left-padded batch generation."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r} is not supported; use one of {', '.join(DTYPES)}")
    if dtype == "bfloat16" and torch.device(device).type == "cpu" and has_bf16_units() is False:
        _warn_slow_bf16()
    path = resolve_model_path(name_or_path)
    tokenizer = _prepare_tokenizer(AutoTokenizer.from_pretrained(path, local_files_only=True), name_or_path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=DTYPES[dtype], local_files_only=True)
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.to(device).eval()
    model.requires_grad_(False)  # the adapter adds the only trainable parameters
    return model, tokenizer


@functools.cache  # a run loads its base more than once: one warning is enough
def _warn_slow_bf16() -> None:
    announce(f"dtype bfloat16 on {cpu_kind()}: this CPU has no bf16 matrix instructions (avx512_bf16, amx_bf16), "
             f"and torch's bf16 matmuls on such a CPU ran 53x slower than float32's (pgrpo.model.substrate); "
             f"--model.dtype float32 runs in a fraction of the time, as another setting of the experiment")


def model_id(name_or_path: str) -> str:
    """A stable identifier of the model's content, for cache keys (V bases, teacher pools)."""
    if named_priming(name_or_path):  # the base's id and the settings' key, named without building it
        return f"{name_or_path}@{_primed_target(name_or_path).name}"
    if name_or_path in EMBEDDED_OPENINGS:
        return f"{EMBEDDED}-{recipe_hash(EMBEDDED_OPENINGS[name_or_path])}"
    if is_gguf_model(name_or_path):
        return f"{name_or_path}@{converted_checkpoint(name_or_path).name}"  # the file's name and bytes
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return f"{path.resolve().name}@{_directory_hash(path)}"  # by content: a copied checkpoint keeps its id
    return f"{name_or_path}@{resolve_model_path(name_or_path).name}"  # snapshot dir name = commit


def base_record(name_or_path: str) -> dict[str, str]:
    """What a run records of its base: the name it was given, its model_id and a digest of its files (for a base
    pgrpo builds, embedded or primed, sha256 over its files: two machines that built the same recipe to different
    bytes differ here; for a directory, its model_id's hash of the config and the weight files' bytes), and for a
    primed base the CPU that trained its update (merged from a published update, its bytes are any CPU's)."""
    found = model_id(name_or_path)
    record = {"model": name_or_path, "model_id": found, "digest": cached_digest(name_or_path) or found}
    if named_priming(name_or_path):  # the CPU that trained its update (pgrpo.model.substrate)
        if built_on := json.loads((_primed_target(name_or_path) / PRIMING_RECORD).read_text()).get("built_on"):
            record["built_on"] = built_on
    return record


def cached_digest(name_or_path: str, build_id: str | None = None) -> str | None:
    """sha256 over the files of the base pgrpo built for `name_or_path`: an embedded one's cached build `build_id`
    (by default its current recipe's; None when the cache lacks it), or a primed one (its record, which holds
    the key, aside). None for a model pgrpo does not build."""
    if name_or_path in EMBEDDED_OPENINGS:
        return cached_build_digest(build_id or model_id(name_or_path))
    if named_priming(name_or_path):
        target = _primed_target(name_or_path)
        return files_digest(target, besides=(PRIMING_RECORD,)) if (target / PRIMING_RECORD).is_file() else None
    return None


def _primed_target(name_or_path: str) -> Path:
    """Where a named priming (`<model>+primed`, `<model>+primed-v2`, ...) lives, built or not
    (priming.primed_target)."""
    return _named_priming_of(name_or_path)[1]


def merges_published_update(name_or_path: str) -> bool:
    """Whether a named priming (`<model>+primed`, ...) is made by merging the update the repository publishes for it
    (pgrpo/model/primings/): then its bytes are the same on every CPU, wherever the update was trained."""
    if not named_priming(name_or_path):
        return False
    base_path, _, key = _named_priming_of(name_or_path)
    return published_update(base_path, key) is not None


def _named_priming_of(name_or_path: str) -> tuple[Path, Path, str]:
    """A named priming's base checkpoint, where the priming lives and its key (its settings: NAMED_PRIMINGS)."""
    base, _, settings = named_priming(name_or_path)
    base_path = resolve_model_path(base)
    return base_path, *primed_target(base_path, model_id(base), settings)


def same_base(recorded: str, current: str) -> bool:
    """Whether the model a run recorded (its model_id) is the one `current` names now: the same id, or two
    embedded builds whose recipes differ (a refactor of the hashed sources) but whose cached files are identical."""
    if recorded == current:
        return True
    digests = [cached_build_digest(i) if i.startswith(f"{EMBEDDED}-") else None for i in (recorded, current)]
    return digests[0] is not None and digests[0] == digests[1]


def check_same_base(trained_on: str | None, name_or_path: str, what: str) -> None:
    """Refuse knobs (a checkpoint's, `what`) trained on another base than the one `name_or_path` is now:
    δS shifts this base's singular values, and V is this base's directions."""
    found = model_id(name_or_path)
    if trained_on is not None and not same_base(trained_on, found):
        raise ValueError(f"{what}: trained on base {trained_on!r}, but model {name_or_path!r} now is {found!r} (an "
                         f"embedded build of another recipe counts as the same when both are cached and identical "
                         f"file for file); its knobs only make sense on the base they were trained on")


def hack_openings(name_or_path: str) -> str:
    """How the template hacks (teacher pool, contrastive pairs) are written for this model (hack_forms.HACK_STYLES):
    as its base was pretrained to write them for an embedded substrate, as a named priming wrote its hacks
    ("varied" for `+primed-v2`: the teacher pool writes taught forms, V's pairs detector forms), else "shared"."""
    if named := named_priming(name_or_path):
        return named[2].hacks
    return EMBEDDED_OPENINGS.get(name_or_path, "shared")


def load_tokenizer(name_or_path: str) -> PreTrainedTokenizerBase:
    """The tokenizer alone (what the data module needs to render and check prompts)."""
    return _prepare_tokenizer(AutoTokenizer.from_pretrained(resolve_model_path(name_or_path), local_files_only=True),
                              name_or_path)


def _prepare_tokenizer(tokenizer: PreTrainedTokenizerBase, name_or_path: str) -> PreTrainedTokenizerBase:
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ValueError(f"model {name_or_path!r}: tokenizer has neither a pad nor an eos token")
        tokenizer.pad_token = tokenizer.eos_token
    # Decoder-only generation appends after the prompt, so prompts must end flush right.
    tokenizer.padding_side = "left"
    return tokenizer


def _cached_hub_snapshot(repo_id: str) -> Path | None:
    try:
        config = try_to_load_from_cache(repo_id, "config.json")
    except ValueError:  # not a valid repo id either (e.g. a missing absolute path)
        return None
    return Path(config).parent if isinstance(config, str) else None


def _directory_hash(path: Path) -> str:
    # The config pins the architecture and the weights are hashed by their bytes, so a checkpoint copied to another
    # machine or path (new modification times) keeps its id and finds its V bases, pools and kept cells, while
    # weights rewritten in place give a new one.
    config = path / "config.json"
    digest = hashlib.sha256(config.read_bytes() if config.is_file() else b"")
    for weights in sorted([*path.glob("*.safetensors"), *path.glob("*.bin")]):
        digest.update(f"{weights.name}:{file_sha256(weights)}".encode())
    return digest.hexdigest()[:16]
