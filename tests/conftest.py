"""Shared fixtures: one pgrpo cache per test session, shared by its pytest-xdist workers (embedded model, pools, V
bases are built once)."""

import os
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
SHARED = REPO.parent / "shared"
LEETCODE_JSONL = SHARED / "data" / "leetcode_medhard_dev.jsonl"

# The tests mirror the package tree, one folder per subpackage; a test reads another's helpers by its module name
# (test_cli's `fast`, test_extraction's `tiny_model`), which pytest makes unique across the folders.
sys.path[1:1] = [str(folder) for folder in sorted({p.parent for p in TESTS.rglob("test_*.py")}) if folder != TESTS]


def pytest_configure(config):
    """Under pytest-xdist (make test runs one worker per core) each worker keeps to one thread, and so do the
    processes its tests start: torch's default of one thread per core in every worker would oversubscribe
    the cores and run slower than one worker alone."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        os.environ["OMP_NUM_THREADS"] = "1"
        torch.set_num_threads(1)


@pytest.fixture(scope="session", autouse=True)
def short_pretraining():
    """The embedded default pretrains for 2 steps in tests (seconds, not minutes): what the tests check
    (the trainer's mechanics, caching, determinism) does not depend on how well the base codes. The full
    recipe is tested in tests/model/test_pretrain.py (marked slow)."""
    from pgrpo.model.embedded import PRETRAIN_STEPS_ENV

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(PRETRAIN_STEPS_ENV, "2")
        yield


@pytest.fixture(scope="session", autouse=True)
def pgrpo_cache(tmp_path_factory) -> Path:
    """Isolate the user's ~/.cache/pgrpo; a developer can reuse one with PGRPO_TEST_CACHE to go faster. The
    pytest-xdist workers of one session share theirs (under their common base temp), so what one builds the others
    reuse: builds land by atomic rename, and two workers building the same thing at once write the same bytes."""
    if os.environ.get("PGRPO_TEST_CACHE"):
        path = Path(os.environ["PGRPO_TEST_CACHE"])
    elif os.environ.get("PYTEST_XDIST_WORKER"):
        path = tmp_path_factory.getbasetemp().parent / "pgrpo_cache"
        path.mkdir(exist_ok=True)
    else:
        path = tmp_path_factory.mktemp("pgrpo_cache")
    old = os.environ.get("PGRPO_CACHE")
    os.environ["PGRPO_CACHE"] = str(path)
    yield path
    if old is None:
        os.environ.pop("PGRPO_CACHE", None)
    else:
        os.environ["PGRPO_CACHE"] = old


@pytest.fixture
def leetcode_jsonl() -> Path:
    if not LEETCODE_JSONL.is_file():
        pytest.skip(f"shared data file {LEETCODE_JSONL} is absent (it ships beside the repo in CI only)")
    return LEETCODE_JSONL


@pytest.fixture(scope="session")
def route_ckpt(tmp_path_factory) -> Path:
    """The last checkpoint of a short route run: the one arm whose δS_hack is non-zero after training."""
    from pgrpo.cli import main
    from test_cli import fast

    logs = tmp_path_factory.mktemp("route_logs")
    main(fast("route", logs, 2))
    return logs / "route" / "version_0" / "checkpoints" / "last.ckpt"
