"""Which code a run ran: the commit of pgrpo's git checkout and whether its tree was clean, or, for a pgrpo
installed without its repository, the installed version.

A kept cell's numbers are what its code computed; a commit alone cannot say that where the tree held uncommitted
changes, so the record names them. The repository's results/ is left out of the question: a sweep keeps its cells
there while it runs (data the code made, committed as it lands), and they change no code.
"""

import importlib.metadata
import subprocess
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]  # the directory that holds pgrpo/: its checkout's root, if any
NOT_CODE = "results"  # the kept results, left out of the tree's cleanliness


def code_record(repository: Path = REPOSITORY) -> dict:
    """{"commit", "clean", "changed"} (git status's lines, results/ left out) where pgrpo runs from the root of a git
    checkout, else {"version"} (the installed pgrpo's; None where it is not installed)."""
    try:
        root = _git(repository, "rev-parse", "--show-toplevel").strip()
        # a pgrpo installed into a virtual environment inside some other checkout is not that checkout's code
        if Path(root).resolve() != repository.resolve():
            raise OSError(f"{repository} is not the root of its git checkout ({root})")
        commit = _git(repository, "rev-parse", "HEAD").strip()
        changed = _git(repository, "status", "--porcelain", "--", ".", f":(exclude){NOT_CODE}").splitlines()
    except (OSError, subprocess.SubprocessError):  # no git, no checkout, one git will not read, or a hung git
        return {"version": installed_version()}
    return {"commit": commit, "clean": not changed, "changed": changed}


def installed_version() -> str | None:
    try:
        return importlib.metadata.version("pgrpo")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree on the path, never installed
        return None


def describe(record: dict) -> str:
    """One code record in a few words: 'commit 0123456789ab (clean)', 'commit 0123456789ab (dirty: 2 uncommitted
    changes)' or 'pgrpo 0.1.0 (not a git checkout)'."""
    if "commit" not in record:
        return f"pgrpo {record.get('version')} (not a git checkout)"
    if record["clean"]:
        return f"commit {record['commit'][:12]} (clean)"
    n = len(record["changed"])
    return f"commit {record['commit'][:12]} (dirty: {n} uncommitted {'change' if n == 1 else 'changes'})"


def _git(repository: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repository), *args], capture_output=True, text=True, check=True,
                          timeout=60).stdout
