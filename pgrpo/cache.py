"""Where pgrpo keeps what it builds once and reuses: the embedded model, teacher pools, V bases."""

import os
from pathlib import Path


def cache_dir() -> Path:
    """$PGRPO_CACHE if set, else ~/.cache/pgrpo."""
    return Path(os.environ.get("PGRPO_CACHE") or Path.home() / ".cache" / "pgrpo")
