"""Where pgrpo keeps what it builds once and reuses (the embedded model, teacher pools, V bases), and the
lines that say when it builds one, how far along it is, or that it found one."""

import functools
import hashlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from lightning.pytorch.utilities import rank_zero_only


# What the repository keeps of the cache (results/bases/): embedded builds (<build id>/, each with a SHA256SUMS of its
# files) and the Vs kept cells trained with (v-<digest>.safetensors); a cache that lacks one restores it from here,
# its digest checked. Absent where pgrpo is installed without its repository.
KEPT_BUILDS = Path(__file__).resolve().parents[2] / "results" / "bases"


def cache_dir() -> Path:
    """$PGRPO_CACHE if set, else ~/.cache/pgrpo."""
    return Path(os.environ.get("PGRPO_CACHE") or Path.home() / ".cache" / "pgrpo")


def files_digest(directory: Path, besides: tuple[str, ...] = ()) -> str:
    """sha256 over the name and bytes of every file in `directory` but `besides` (a build's marker or record): two
    machines that built one recipe to different bytes differ here."""
    digest = hashlib.sha256()
    for path in sorted(p for p in directory.iterdir() if p.is_file() and p.name not in besides):
        digest.update(path.name.encode() + b"\0")
        hash_file_into(digest, path)
    return digest.hexdigest()


def weights_digest(checkpoint: Path) -> str:
    """sha256 over the tensors of a checkpoint's model*.safetensors (name, dtype, shape, bytes, in name order): its
    weights, whatever wrote the files. A transformers of another version writes its version into config.json and
    may lay a file's header out otherwise; the model's numbers are these."""
    from safetensors import safe_open

    digest = hashlib.sha256()
    for path in sorted(checkpoint.glob("model*.safetensors")):
        with safe_open(path, framework="pt") as f:
            for name in sorted(f.keys()):
                hash_tensor_into(digest, name, f.get_tensor(name))
    return digest.hexdigest()


def hash_tensor_into(digest, name: str, tensor) -> None:
    """Feed a named tensor's name, dtype, shape and bytes (on the CPU) to `digest`."""
    import torch

    tensor = tensor.detach().cpu().contiguous()
    digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}\0".encode())
    digest.update(tensor.view(-1).view(torch.uint8).numpy().tobytes())


def file_sha256(path: Path, prefix: str = "") -> str:
    """sha256 of `prefix` then the file's bytes, read once a process (a real model's GBs): memoised by size and
    modification time too, so a file rewritten in place is read again."""
    stat = path.stat()
    return _file_sha256(path.resolve(), stat.st_size, stat.st_mtime_ns, prefix)


@functools.cache
def _file_sha256(path: Path, _size: int, _mtime_ns: int, prefix: str) -> str:
    digest = hashlib.sha256(prefix.encode())
    hash_file_into(digest, path)
    return digest.hexdigest()


def hash_file_into(digest, path: Path) -> None:
    """Feed `path`'s bytes to `digest` in 16 MiB reads (a real model's weights are GBs)."""
    with path.open("rb") as f:
        while chunk := f.read(2**24):
            digest.update(chunk)


@rank_zero_only
def announce(message: str) -> None:
    """One line on stderr, from rank 0 only: under DDP every process resolves the same caches."""
    print(message, file=sys.stderr, flush=True)


@functools.cache  # a run resolves the same cached model several times: one line is enough
def announce_cached(what: str, path: Path) -> None:
    announce(f"{what}: cached ({path})")


@contextmanager
def announce_build(what: str, path: Path, work: str) -> Iterator[None]:
    """Says what is built, what that takes and where it goes before the build, and how long it took after."""
    announce(f"building the {what} ({work}; once, cached in {path})")
    start = time.perf_counter()
    yield
    announce(f"{what}: built in {duration(time.perf_counter() - start)}")


def progress_ticker(label: str, total: int) -> Callable[[], None]:
    """A function to call once per step; at every tenth of `total` it announces steps done, time spent and left."""
    start, done = time.perf_counter(), 0

    def tick() -> None:
        nonlocal done
        done += 1
        if done % max(1, total // 10) and done != total:
            return
        spent = time.perf_counter() - start
        left = f", ~{duration(spent / done * (total - done))} left" if done < total else ""
        announce(f"  {label} {done}/{total}, {duration(spent)}{left}")

    return tick


def duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 100 else f"{seconds / 60:.1f} min"
