"""Running untrusted Python: one sandboxed runner process per job, one forked child per run.

A job is a list of child runs of a *program* (a stdlib-only module whose
functions the children call, e.g. `_harness.py`). `run_job` starts
`_runner.py` inside fresh pid, net and mount namespaces (or, where the OS
refuses them, without: see `isolation()`), hands it the job, and returns what
each child did. The runner enforces per-child limits and wall budgets; this
side adds one more deadline over the whole job and never blocks past it.
"""

import json
import logging
import os
import secrets
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pgrpo.env import rootfs

RUNNER = Path(__file__).with_name("_runner.py")
NAMESPACES, FALLBACK = "namespaces", "fallback"
UNSHARE = ("unshare", "--net", "--pid", "--fork", "--mount", "--kill-child")
# -E/-I would also drop PYTHONHASHSEED, which keeps set order (and so grading) deterministic;
# -P -s -S give the rest of -I: no script dir, no user site, no site packages.
PYTHON = (sys.executable, "-P", "-s", "-S", "-B")
RUNNER_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0"}
STARTUP_S = 2.0  # the job's budget beyond its children's: the runner's start-up and the gaps between children
KILL_GRACE_S = 1.5  # past the job's budget, the runner itself is killed
UID_RANGE = (1 << 20, 1 << 30)  # a fresh uid per job, so RLIMIT_NPROC and kill-by-uid never meet another job

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Limits:
    memory_mb: int = 1024  # RLIMIT_AS per child
    nproc: int = 32  # processes + threads of the job's uid
    fsize_mb: int = 16  # largest file a child may write
    nofile: int = 64
    output_cap: int = 64 * 1024  # stdout/stderr kept per child (head and tail halves)
    report_cap: int = 16 << 20  # a longer report is discarded
    tmpfs_mb: int = 64  # the job's whole writable filesystem (namespaces mode)


@dataclass(frozen=True)
class Child:
    entry: str  # function of the program to call in the child
    timeout_s: float  # its own wall budget, counted from its start: a slow child never eats another's
    args: dict = field(default_factory=dict)
    read_file: str | None = None  # a file in the child's work dir to return (its first 4 KiB)


@dataclass(frozen=True)
class ChildOutcome:
    entry: str
    status: int | None  # exit status; negative: killed by that signal; None: never started
    timed_out: bool
    stdout: str  # head and tail, at most Limits.output_cap
    stderr: str
    report: str | None  # what the child wrote on its report fd (None: over the cap)
    file_text: str | None
    seconds: float


@dataclass(frozen=True)
class JobOutcome:
    children: tuple[ChildOutcome, ...]
    timed_out: bool = False  # the runner overran the job budget and was killed
    error: str | None = None  # the runner failed (not the candidate)


def run_job(program: Path, first: Sequence[Child], then: Sequence[Child] = (), *,
            limits: Limits = Limits()) -> JobOutcome:
    """Runs `first`, then (only after everything they started is dead) reads and runs `then`.

    Data that the `first` children must never see goes in `then`. Each child
    has its own wall budget (Child.timeout_s); the call returns within about
    STARTUP_S + the sum of the budgets + KILL_GRACE_S whatever the children do.
    """
    budget = STARTUP_S + sum(c.timeout_s for c in (*first, *then))
    return _run(isolation(), program, first, then, budget, limits)


def _run(mode: str, program: Path, first: Sequence[Child], then: Sequence[Child], timeout_s: float,
         limits: Limits) -> JobOutcome:
    uid = secrets.randbelow(UID_RANGE[1] - UID_RANGE[0]) + UID_RANGE[0]
    # An absolute CLOCK_MONOTONIC deadline for the whole job (shared with the runner): no child runs past it.
    head = {"limits": {**asdict(limits), "uid": uid, "deadline": time.monotonic() + timeout_s},
            "later": bool(then), "children": [vars(c) for c in first],
            "root": rootfs.plan(PYTHON) if mode == NAMESPACES else None}
    data = _frame(head) + (_frame({"children": [vars(c) for c in then]}) if then else b"")
    cmd = (*UNSHARE, *PYTHON) if mode == NAMESPACES else PYTHON
    proc = subprocess.Popen([*cmd, str(RUNNER), mode, str(program)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=RUNNER_ENV,
                            start_new_session=True, close_fds=True)
    try:
        out, err = proc.communicate(data, timeout=timeout_s + KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid)  # namespaces: the runner is PID 1, so its whole namespace goes with it
        if mode == FALLBACK:
            _kill_uid(uid)
        proc.communicate()
        return JobOutcome(children=(), timed_out=True)
    return _parse(out, err)


def _frame(obj: dict) -> bytes:
    body = json.dumps(obj).encode()
    return struct.pack(">Q", len(body)) + body


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_uid(uid: int) -> None:
    """Fallback mode only: the runner died, so kill what its children may have left, by uid."""
    if os.geteuid() != 0:
        return
    subprocess.run([*PYTHON, "-c", "import os, signal; os.kill(-1, signal.SIGKILL)"],
                   user=uid, group=uid, extra_groups=[], env=RUNNER_ENV, timeout=10, check=False)


def _parse(out: bytes, err: bytes) -> JobOutcome:
    try:
        result = json.loads(out)
    except ValueError:
        tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
        return JobOutcome(children=(), error=f"runner failed: {tail[0][:200]}")
    if "error" in result:
        return JobOutcome(children=(), error=f"runner failed: {result['error'][:200]}")
    return JobOutcome(children=tuple(ChildOutcome(**c) for c in result["children"]))


_isolation: str | None = None
_isolation_lock = threading.Lock()


def isolation() -> str:
    """"namespaces" (pid+net+mount namespaces, private read-only root) or "fallback" (rlimits and uid only).

    Probed once per process by running an empty job in namespaces.
    """
    global _isolation
    with _isolation_lock:
        if _isolation is None:
            # an empty job: unshare, the mounts and the chroot must all work (the program is never called)
            probe = _run(NAMESPACES, RUNNER, (), (), 10.0, Limits()) if _has_unshare() else None
            _isolation = NAMESPACES if probe and not probe.error and not probe.timed_out else FALLBACK
            if _isolation == FALLBACK:
                log.warning("pgrpo sandbox: namespaces unavailable (%s); grading with WEAKER isolation "
                            "(rlimits, uid drop, process-group kill; the filesystem and network stay visible)",
                            probe.error if probe else "no unshare")
        return _isolation


def _has_unshare() -> bool:
    return any(os.access(os.path.join(d, "unshare"), os.X_OK) for d in RUNNER_ENV["PATH"].split(":"))
