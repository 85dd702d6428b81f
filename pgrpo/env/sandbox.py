"""Running untrusted Python: one sandboxed runner process per job, one forked child per run.

A job is a list of child runs of a *program* (a stdlib-only module whose
functions the children call, e.g. `_harness.py`). `run_job` has a warm
launcher (`_runner.py`, one per process and program, started on first use)
fork the job's runner inside fresh pid, net and mount namespaces (or, where the
OS refuses them, without: see `isolation()`), hands it the job over its own
pipes, and returns what each child did. The runner enforces per-child limits
and wall budgets; this side adds one more deadline over the whole job and never
blocks past it.
"""

import json
import logging
import os
import secrets
import selectors
import signal
import socket
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
    deadline = time.monotonic() + timeout_s
    head = {"limits": {**asdict(limits), "uid": uid, "deadline": deadline},
            "later": bool(then), "children": [vars(c) for c in first],
            "root": rootfs.plan(PYTHON) if mode == NAMESPACES else None}
    data = _frame(head) + (_frame({"children": [vars(c) for c in then]}) if then else b"")
    (stdin_r, stdin_w), (out_r, out_w), (err_r, err_w) = os.pipe(), os.pipe(), os.pipe()
    try:
        pid = _launcher(mode, program).launch((stdin_r, out_w, err_w), deadline + KILL_GRACE_S - time.monotonic())
    except OSError as e:  # the launcher was killed, and the next job starts another
        for fd in (stdin_w, out_r, err_r):
            os.close(fd)
        if isinstance(e, TimeoutError):  # stuck, e.g. loading the program
            return JobOutcome(children=(), timed_out=True)
        return JobOutcome(children=(), error=f"runner failed: could not start the job ({e})")
    finally:
        for fd in (stdin_r, out_w, err_w):
            os.close(fd)
    out, err, finished = _exchange(stdin_w, out_r, err_r, data, deadline + KILL_GRACE_S)
    if not finished:
        _kill_group(pid)  # namespaces: the runner is PID 1 of the job's namespaces, so everything goes with it
        if mode == FALLBACK:
            _kill_uid(uid)
        return JobOutcome(children=(), timed_out=True)
    return _parse(out, err)


class _Launcher:
    """A warm `_runner.py` that forks one job process per request (see its docstring for why)."""

    def __init__(self, mode: str, program: Path):
        self._control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        with theirs:
            self.process = subprocess.Popen(
                [*PYTHON, str(RUNNER), mode, str(program), str(theirs.fileno())], pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=RUNNER_ENV,
                start_new_session=True)
        self._lock = threading.Lock()
        self.owner = os.getpid()

    def launch(self, fds: tuple[int, int, int], timeout_s: float) -> int:
        """Hands the launcher a job's stdin, stdout and stderr; the job process's pid (its process group too)."""
        with self._lock:
            self._control.settimeout(timeout_s)  # the first job's budget also covers the launcher's start-up
            try:
                socket.send_fds(self._control, [b"j"], list(fds))
                reply = b""
                while len(reply) < 4:
                    chunk = self._control.recv(4 - len(reply))
                    if not chunk:
                        raise ConnectionError(f"the sandbox launcher exited (status {self.process.poll()})")
                    reply += chunk
            except OSError:  # timeouts included: a launcher that missed one reply is out of step for good
                self.close()
                raise
        return struct.unpack(">i", reply)[0]

    def alive(self) -> bool:
        return self.owner == os.getpid() and self.process.poll() is None and self._control.fileno() >= 0

    def close(self) -> None:
        """Closes this process's end; the launcher itself is killed only by the process that started it."""
        self._control.close()
        if self.owner == os.getpid():
            _kill_group(self.process.pid)
            self.process.wait()


_launchers: dict[tuple[str, str], _Launcher] = {}
_launchers_lock = threading.Lock()


def _launcher(mode: str, program: Path) -> _Launcher:
    """This process's launcher for (mode, program): started on first use, and again if it died or was forked away."""
    key = (mode, str(program))
    with _launchers_lock:
        launcher = _launchers.get(key)
        if launcher is None or not launcher.alive():
            if launcher is not None:
                launcher.close()
            launcher = _launchers[key] = _Launcher(mode, program)
        return launcher


def _exchange(stdin: int, out: int, err: int, data: bytes, deadline: float) -> tuple[bytes, bytes, bool]:
    """Writes `data` to the job's stdin while reading its stdout and stderr to EOF: (out, err, finished in time).

    Closes the three fds, each exactly once (other threads reuse fd numbers at once).
    """
    received = {out: bytearray(), err: bytearray()}
    view = memoryview(data)
    os.set_blocking(stdin, False)
    with selectors.DefaultSelector() as selector:
        selector.register(stdin, selectors.EVENT_WRITE)
        selector.register(out, selectors.EVENT_READ)
        selector.register(err, selectors.EVENT_READ)
        try:
            while selector.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    return bytes(received[out]), bytes(received[err]), False
                for key, _ in selector.select(left):
                    if key.fd == stdin:
                        try:
                            view = view[os.write(stdin, view[:1 << 16]):]
                        except BrokenPipeError:  # the job stopped reading (it failed, or needed no frame 2)
                            view = view[:0]
                        if not view:  # EOF for the job: nothing more to read
                            selector.unregister(stdin)
                        continue
                    chunk = os.read(key.fd, 1 << 16)
                    if chunk:
                        received[key.fd] += chunk
                    else:
                        selector.unregister(key.fd)
            return bytes(received[out]), bytes(received[err]), True
        finally:
            for fd in (stdin, out, err):
                os.close(fd)


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
            why = _probe_namespaces()
            _isolation = FALLBACK if why else NAMESPACES
            if why:
                log.warning("pgrpo sandbox: namespaces unavailable (%s); grading with WEAKER isolation "
                            "(rlimits, uid drop, process-group kill; the filesystem and network stay visible)", why)
        return _isolation


def _probe_namespaces() -> str | None:
    """Why a namespaced job cannot run here, or None: runs an empty one (unshare, the mounts, the chroot)."""
    probe = _run(NAMESPACES, RUNNER, (), (), 10.0, Limits())  # the program is never called
    with _launchers_lock:
        launcher = _launchers.pop((NAMESPACES, str(RUNNER)), None)
    if launcher is not None:
        launcher.close()
    return probe.error or ("timed out" if probe.timed_out else None)
