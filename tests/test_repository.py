"""The repository as a clone receives it: small enough for a GPU machine's 64 MiB transfer beside what it carries."""

import subprocess
from pathlib import Path

import pytest

from pgrpo.commands.report.figures import FIGURES_FILE

ROOT = Path(__file__).resolve().parents[1]
LIMIT_MIB = 32  # a lent GPU machine receives the tree and the carried paths together within 64 MiB


def tracked_files() -> list[Path]:
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the size limit is on what a clone receives")
    return [ROOT / name for name in listed.decode().split("\0") if name]


def test_the_tracked_tree_stays_within_32_mib():
    sizes = {path: path.stat().st_size for path in tracked_files() if path.is_file()}
    total = sum(sizes.values()) / 2**20
    largest = sorted(sizes, key=sizes.get, reverse=True)[:5]
    assert total <= LIMIT_MIB, (f"the tracked tree is {total:.1f} MiB, over {LIMIT_MIB} MiB; largest: "
                                + ", ".join(f"{p.relative_to(ROOT)} ({sizes[p] / 2**20:.1f} MiB)" for p in largest))


def test_no_figure_drawn_from_kept_runs_is_kept_beside_them():
    """A report page's figures whose runs are kept (its figures.json) are drawn by `make docs`, not committed."""
    tracked = set(tracked_files())
    kept = [png for record in (ROOT / "docs").rglob(FIGURES_FILE) for png in record.parent.glob("*.png")
            if png in tracked]
    assert not kept, f"tracked although drawn from kept runs: {[str(p.relative_to(ROOT)) for p in kept]}"
