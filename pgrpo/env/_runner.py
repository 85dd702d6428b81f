"""The sandbox's inside: runs one job's children, each forked into a fresh, limited, unprivileged process.

Started by sandbox.py once per grading process and program, as the *launcher*
`python _runner.py MODE PROGRAM FD` (stdlib only, never imports pgrpo). It loads
PROGRAM and the modules solutions import once, then waits on the unix socket FD:
each request carries a job's stdin, stdout and stderr (SCM_RIGHTS) and gets
back the pid of a forked *job process*, so a job starts warm instead of paying
an interpreter start-up and those imports (most of a grade's cost). The
launcher never sees a job's data. MODE "namespaces": the job process unshares
fresh pid, net and mount namespaces and forks the runner of the job, PID 1 of
them, which builds a minimal read-only root on a private tmpfs and chroots into
it. MODE "fallback": no namespaces, so the isolation is rlimits, the uid drop
and killing by process group and uid only.

Protocol of a job. stdin carries two length-prefixed JSON frames, read with raw
os.read so that nothing of the second is in memory before it is wanted:
  frame 1: {"limits": {..., "uid", "deadline"}, "later": whether frame 2 follows, "children": [spec, ...],
            "root": what the private root shows (namespaces mode; see rootfs.py)}
  frame 2: {"children": [spec, ...]}
A spec is {"entry": name of a PROGRAM function, "timeout_s": its own wall budget,
"args": {...}, "read_file": name or null}; the child calls PROGRAM.<entry>(args,
PROGRAM.Context(report_fd, workdir)). Frame-1 children run (and everything they started
is killed) before frame 2 is read, which keeps its contents out of their
memory. stdout gets ONE JSON object: {"children": [outcome, ...]} or
{"error": "..."}. No candidate process ever holds that fd, nor the launcher's socket.

Needs Linux >= 5.3 (pidfd_open, to wait for a child and its pipes at once).
"""

import ctypes
import json
import os
import resource
import select
import shutil
import signal
import socket
import stat
import struct
import sys
import tempfile
import time
import types

# What LeetCode solutions and setup_code import, loaded once here so forked
# children start warm (and stay importable in fallback mode after the uid drop).
PRELOAD = ("bisect", "collections", "datetime", "functools", "heapq", "itertools", "math",
           "operator", "random", "re", "string", "typing")
CHILD_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0"}
REPORT_FD = 3
DRAIN_GRACE_S = 0.5  # after the kill, how long to wait for the pipes to reach EOF
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC = 1, 2, 4, 8, 32, 4096, 16384
MS_PRIVATE = 1 << 18
CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x20000000, 0x40000000
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS, PR_SET_CHILD_SUBREAPER = 1, 38, 36
DEVICES = ("null", "zero", "urandom", "random", "full")

_libc = ctypes.CDLL(None, use_errno=True)


def main() -> None:
    mode, program_path, control = sys.argv[1], sys.argv[2], socket.socket(fileno=int(sys.argv[3]))
    try:
        program, failure = _load(program_path), None
        for name in PRELOAD:
            __import__(name)
    except BaseException as e:  # every job says so, rather than the launcher dying unheard
        program, failure = None, f"{type(e).__name__}: {e}"
    # Job processes are never waited for here: the kernel reaps them. The grading side learns
    # that a job ended from its stdout closing.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    while True:
        msg, fds, _, _ = socket.recv_fds(control, 1, 3)
        if not msg:
            return  # the grading process closed its end (or died): no more jobs
        pid = os.fork()
        if pid == 0:
            control.close()
            _job_process(mode, program, failure, fds)
        for fd in fds:
            os.close(fd)
        control.sendall(struct.pack(">i", pid))


def _job_process(mode: str, program: types.ModuleType | None, failure: str | None, fds: list[int]) -> None:
    """One job, from a fork of the launcher: its pipes on 0, 1 and 2, its own session, its namespaces."""
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the job waits for its children
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        os.setsid()  # the grading side kills the job by this process group
        if mode == "namespaces":
            _enter_namespaces()
        if failure:
            raise RuntimeError(f"could not load the program: {failure}")
        _run_job(mode, program)
        os._exit(0)
    except BaseException as e:
        _write_all(1, json.dumps({"error": f"{type(e).__name__}: {e}"}).encode())
        os._exit(1)


def _enter_namespaces() -> None:
    """Fresh mount, net and pid namespaces; returns in their PID 1 (this process stays outside as its handle)."""
    if _libc.unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare: {os.strerror(err)}")
    # Mounts made below must not propagate back to the host's namespace.
    _mount("none", "/", None, MS_REC | MS_PRIVATE)
    pid = os.fork()
    if pid:
        for fd in (0, 1, 2):
            os.close(fd)
        os.waitpid(pid, 0)
        os._exit(0)
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # the job is killed by killing its handle


def _run_job(mode: str, program: types.ModuleType) -> None:
    first = _read_frame()
    limits = first["limits"]
    if mode == "namespaces":
        if os.getpid() != 1:
            raise RuntimeError("namespaces mode needs to be PID 1 of its own pid namespace")
        _enter_private_root(limits["tmpfs_mb"], first["root"])
    else:
        _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)  # orphans come to us to be reaped
    job = Job(program, limits, namespaced=mode == "namespaces")
    outcomes = [job.run(spec) for spec in first["children"]]
    if first["later"]:
        outcomes += [job.run(spec) for spec in _read_frame()["children"]]
    _write_all(1, json.dumps({"children": outcomes}).encode())


def _load(path: str) -> types.ModuleType:
    module = types.ModuleType("_pgrpo_program")
    module.__file__ = path
    with open(path) as f:
        exec(compile(f.read(), path, "exec"), module.__dict__)
    return module


def _read_exact(n: int) -> bytes:
    chunks = []
    while n:
        chunk = os.read(0, min(n, 1 << 20))
        if not chunk:
            raise EOFError("job frame cut short")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _read_frame() -> dict:
    (size,) = struct.unpack(">Q", _read_exact(8))
    return json.loads(_read_exact(size))


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data):]


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    if _libc.mount(source.encode(), target.encode(), fstype.encode() if fstype else None, flags,
                   data.encode() if data else None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} on {target}: {os.strerror(err)}")


def _bind_readonly(source: str, target: str) -> None:
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "w").close()
    _mount(source, target, None, MS_BIND | MS_REC)
    _mount("none", target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_REC)


def _enter_private_root(tmpfs_mb: int, plan: dict) -> None:
    """chroot into a tmpfs that shows only what `plan` names (see rootfs.py), a few devices and a fresh /proc.

    The host's files (the repo, the data with the test answers, /root, every
    installed package) are not there at all; the only writable place a
    candidate has is its work dir.
    """
    _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"size={tmpfs_mb}m,mode=0755")
    root = "/tmp/root"
    os.makedirs(root + "/tmp", mode=0o755)
    for path in plan["binds"]:
        _bind_readonly(path, root + path)
    for path in plan["hide"]:  # site-packages beneath the stdlib: an empty, read-only directory
        _mount("tmpfs", root + path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=0755")
    for path, target in plan["links"]:
        if not os.path.lexists(root + path):  # one inside a bound directory is there already
            os.makedirs(root + os.path.dirname(path), exist_ok=True)
            os.symlink(target, root + path)
    for dev in DEVICES:
        _bind_readonly("/dev/" + dev, root + "/dev/" + dev)
    os.makedirs(root + "/proc")
    _mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    os.chroot(root)
    os.chdir("/")


class Capture:
    """Keeps the first and last `cap // 2` bytes of a stream and counts what it dropped."""

    def __init__(self, cap: int):
        self.half = cap // 2
        self.head, self.tail, self.dropped = bytearray(), bytearray(), 0

    def add(self, data: bytes) -> None:
        room = self.half - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        self.tail += data
        if len(self.tail) > self.half:
            self.dropped += len(self.tail) - self.half
            del self.tail[:-self.half]

    def text(self) -> str:
        gap = f"\n[... {self.dropped} bytes dropped ...]\n".encode() if self.dropped else b""
        return bytes(self.head + gap + self.tail).decode("utf-8", "replace")


class Job:
    """The children of one job, run one after another under one uid, each with its own wall budget."""

    def __init__(self, program: types.ModuleType, limits: dict, namespaced: bool):
        self.program, self.limits, self.namespaced = program, limits, namespaced
        self.uid = limits["uid"]
        self.deadline = limits["deadline"]  # of the whole job: a child's budget never runs past it
        self.count = 0

    def run(self, spec: dict) -> dict:
        """One child, given its own wall budget (what is left of the job's, if less); returns its outcome."""
        outcome = {"entry": spec["entry"], "status": None, "timed_out": False, "stdout": "",
                   "stderr": "", "report": None, "file_text": None, "seconds": 0.0}
        left = self.deadline - time.monotonic()
        budget = min(spec["timeout_s"], left)
        if left <= 0.01:
            outcome["timed_out"] = True
            return outcome
        workdir = self._workdir()
        start = time.monotonic()
        try:
            outcome.update(self._fork_and_watch(spec, workdir, budget))
            if spec.get("read_file"):
                outcome["file_text"] = _read_regular_file(os.path.join(workdir, spec["read_file"]))
        finally:
            if not self.namespaced:  # a namespaced job's tmpfs vanishes with it
                shutil.rmtree(workdir, ignore_errors=True)
        outcome["seconds"] = round(time.monotonic() - start, 4)
        return outcome

    def _workdir(self) -> str:
        self.count += 1
        if self.namespaced:
            path = f"/tmp/w{self.count}"
            os.mkdir(path, 0o700)
        else:
            path = tempfile.mkdtemp(prefix="pgrpo-")
        if os.geteuid() == 0:
            os.chown(path, self.uid, self.uid)
        return path

    def _fork_and_watch(self, spec: dict, workdir: str, budget: float) -> dict:
        pipes = {name: os.pipe() for name in ("stdout", "stderr", "report")}
        pid = os.fork()
        if pid == 0:
            self._become_child(spec, workdir, budget, pipes)
        for r, w in pipes.values():
            os.close(w)
        captures = {pipes["stdout"][0]: Capture(self.limits["output_cap"]),
                    pipes["stderr"][0]: Capture(self.limits["output_cap"]),
                    pipes["report"][0]: Capture(self.limits["report_cap"])}
        timed_out = not _watch(pid, captures, time.monotonic() + budget)
        self._kill_everything(pid)
        _drain(captures, time.monotonic() + DRAIN_GRACE_S)
        status = self._reap(pid)
        report = captures[pipes["report"][0]]
        return {"status": status, "timed_out": timed_out,
                "stdout": captures[pipes["stdout"][0]].text(),
                "stderr": captures[pipes["stderr"][0]].text(),
                "report": None if report.dropped else report.text()}

    def _become_child(self, spec: dict, workdir: str, budget: float, pipes: dict) -> None:
        status = 70
        try:
            os.setsid()
            devnull = os.open("/dev/null", os.O_RDONLY)
            os.dup2(devnull, 0)
            os.dup2(pipes["stdout"][1], 1)
            os.dup2(pipes["stderr"][1], 2)
            os.dup2(pipes["report"][1], REPORT_FD)
            os.closerange(REPORT_FD + 1, 1 << 16)
            os.chdir(workdir)
            self._limit(budget)
            os.environ.clear()
            os.environ.update(CHILD_ENV, HOME=workdir, TMPDIR=workdir)
            status = 0
            self.program.__dict__[spec["entry"]](spec["args"], self.program.Context(REPORT_FD, workdir))
        except BaseException:
            status = 70
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except BaseException:
                    pass
            os._exit(status)

    def _limit(self, budget: float) -> None:
        """Hard rlimits (soft = hard, so they cannot be raised again), then drop to the job's own uid."""
        lim = self.limits
        mib = 1 << 20
        for res, value in ((resource.RLIMIT_AS, lim["memory_mb"] * mib),
                           (resource.RLIMIT_CPU, int(budget) + 1),
                           (resource.RLIMIT_FSIZE, lim["fsize_mb"] * mib),
                           (resource.RLIMIT_NOFILE, lim["nofile"]),
                           (resource.RLIMIT_NPROC, lim["nproc"]),
                           (resource.RLIMIT_CORE, 0)):
            resource.setrlimit(res, (value, value))
        _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        if os.geteuid() == 0:
            os.setgroups([])
            os.setgid(self.uid)
            os.setuid(self.uid)

    def _kill_everything(self, pid: int) -> None:
        """Kills the child and whatever it started, detached or not."""
        if self.namespaced:
            os.kill(-1, signal.SIGKILL)  # PID 1 of the namespace: everyone but us
            return
        for kill in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
            try:
                kill()
            except ProcessLookupError:
                pass
        if os.geteuid() == 0:
            self._kill_uid()

    def _kill_uid(self) -> None:
        """Fallback mode: a helper that becomes the job's uid and kills every process of that uid."""
        helper = os.fork()
        if helper == 0:
            try:
                os.setgroups([])
                os.setgid(self.uid)
                os.setuid(self.uid)
                os.kill(-1, signal.SIGKILL)
            finally:
                os._exit(0)
        os.waitpid(helper, 0)

    def _reap(self, pid: int) -> int:
        """The child's exit status (negative: killed by that signal), after collecting every zombie."""
        _, raw = os.waitpid(pid, 0)
        while True:
            try:
                other, _ = os.waitpid(-1, 0 if self.namespaced else os.WNOHANG)
            except ChildProcessError:
                break
            if other == 0:
                break
        return -os.WTERMSIG(raw) if os.WIFSIGNALED(raw) else os.WEXITSTATUS(raw)


def _watch(pid: int, captures: dict, deadline: float) -> bool:
    """Reads the child's pipes until it exits (True) or the deadline passes (False)."""
    pidfd = os.pidfd_open(pid)
    poller = select.poll()
    for fd in captures:
        poller.register(fd, select.POLLIN)
    poller.register(pidfd, select.POLLIN)
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            for fd, _ in poller.poll(left * 1000):
                if fd == pidfd:
                    return True
                if not _read_into(fd, captures):
                    poller.unregister(fd)
    finally:
        os.close(pidfd)


def _read_into(fd: int, captures: dict) -> bool:
    """Moves what is waiting on fd into its capture; False at EOF."""
    try:
        data = os.read(fd, 1 << 16)
    except BlockingIOError:
        return True
    if data:
        captures[fd].add(data)
    return bool(data)


def _drain(captures: dict, deadline: float) -> None:
    """Everything that writes to the pipes is dead: read what is left, then close them."""
    poller = select.poll()
    open_fds = set(captures)
    for fd in open_fds:
        poller.register(fd, select.POLLIN)
    while open_fds and time.monotonic() < deadline:
        for fd, _ in poller.poll(max(deadline - time.monotonic(), 0) * 1000):
            if not _read_into(fd, captures):
                poller.unregister(fd)
                open_fds.discard(fd)
    for fd in captures:
        os.close(fd)


def _read_regular_file(path: str, limit: int = 4096) -> str | None:
    """The start of a file the child left behind, refusing symlinks, FIFOs and devices."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, limit).decode("utf-8", "replace")
    finally:
        os.close(fd)


if __name__ == "__main__":
    main()
