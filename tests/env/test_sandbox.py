import json
import os
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from pgrpo.env import sandbox
from pgrpo.env.sandbox import FALLBACK, KILL_GRACE_S, NAMESPACES, STARTUP_S, Child, Limits, isolation, run_job

PROBE = Path(__file__).with_name("sandbox_probe.py")
LIMITS = Limits()


def run(*codes: str, then: tuple[str, ...] = (), timeout_s: float = 5.0, **child: object) -> sandbox.JobOutcome:
    """One child per piece of code, each with a wall budget of `timeout_s`."""
    return run_job(PROBE, [Child("run", timeout_s, {"code": c}, **child) for c in codes],
                   [Child("run", timeout_s, {"code": c}) for c in then])


def result(outcome: sandbox.JobOutcome, i: int = 0) -> object:
    return json.loads(outcome.children[i].report)


@pytest.fixture(params=[NAMESPACES, FALLBACK])
def isolation_mode(request, monkeypatch) -> str:
    """Runs a test under both isolation modes (namespaces only where this machine supports them)."""
    if request.param == NAMESPACES and isolation() != NAMESPACES:
        pytest.skip("namespaces are unavailable here")
    monkeypatch.setattr(sandbox, "_isolation", request.param)
    return request.param


def test_isolation_is_namespaces_where_unshare_works():
    probe = subprocess.run(["unshare", "--net", "--pid", "--fork", "--mount", "true"], capture_output=True)
    works = probe.returncode == 0
    assert isolation() == (NAMESPACES if works else FALLBACK)


def test_child_runs_unprivileged_in_its_own_work_dir_with_a_minimal_environment(isolation_mode):
    out = run("result = [os.getuid(), os.getgid(), os.getgroups(), os.getcwd(), ctx.workdir, sorted(os.environ)]")
    uid, gid, groups, cwd, workdir, env = result(out)
    assert uid == gid and uid >= sandbox.UID_RANGE[0] and groups == []
    assert cwd == workdir
    assert env == ["HOME", "LANG", "PATH", "PYTHONHASHSEED", "TMPDIR"]


def test_each_job_gets_its_own_uid():
    uids = {result(run("result = os.getuid()")) for _ in range(3)}
    assert len(uids) == 3


def test_limits_are_hard_and_cannot_be_raised_back(isolation_mode):
    code = """
result = {}
for name in ("RLIMIT_AS", "RLIMIT_NPROC", "RLIMIT_CORE"):
    res = getattr(resource, name)
    soft, hard = resource.getrlimit(res)
    try:
        resource.setrlimit(res, (hard * 2 + 1, hard * 2 + 1))
        result[name] = "raised"
    except (ValueError, OSError):
        result[name] = [soft, hard]
"""
    limits = result(run(code))
    assert limits["RLIMIT_AS"] == [LIMITS.memory_mb << 20] * 2
    assert limits["RLIMIT_NPROC"] == [LIMITS.nproc] * 2
    assert limits["RLIMIT_CORE"] == [0, 0]


def test_memory_limit_refuses_a_big_allocation():
    code = "try:\n    x = bytearray(2 << 30)\n    result = 'allocated'\nexcept MemoryError:\n    result = 'refused'"
    assert result(run(code)) == "refused"


def test_process_limit_caps_forking():
    code = """
import time
count = 0
try:
    while count < 200:
        if os.fork() == 0:
            time.sleep(5)
            os._exit(0)
        count += 1
except OSError:
    pass
result = count
"""
    assert result(run(code)) < LIMITS.nproc


def test_output_is_capped_keeping_head_and_tail():
    out = run("import sys\nsys.stdout.write('HEAD' + 'x' * 10**6 + 'TAIL')\nsys.stdout.flush()")
    stdout = out.children[0].stdout
    assert stdout.startswith("HEAD") and stdout.endswith("TAIL")
    assert len(stdout) < LIMITS.output_cap + 100 and "bytes dropped" in stdout


def test_child_past_its_deadline_is_killed_and_the_job_returns_in_time(isolation_mode):
    start = time.monotonic()
    out = run("while True:\n    pass", timeout_s=1.0)
    assert time.monotonic() - start < 1.0 + KILL_GRACE_S
    assert out.children[0].timed_out and out.children[0].status == -9


def test_each_child_has_its_own_budget_and_a_slow_one_takes_nothing_from_the_next():
    out = run("while True:\n    pass", "import time\ntime.sleep(0.8)\nresult = 'ran'", timeout_s=1.0)
    slow, next_one = out.children
    assert slow.timed_out and 0.9 < slow.seconds < 1.3
    assert not next_one.timed_out and result(out, 1) == "ran"  # 0.8 s of its own 1 s, after the first took 1 s


def test_processes_a_child_leaves_behind_are_killed_when_it_exits(isolation_mode):
    daemon = """
import time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(0.3)
        os.write(ctx.report_fd, b' escaped')
    os._exit(0)
result = 'parent done'
"""
    out = run(daemon, "import time\ntime.sleep(0.6)\nresult = 'second'")
    assert result(out) == "parent done" and result(out, 1) == "second"


def test_nothing_but_the_runner_and_the_child_is_in_the_pid_namespace():
    if isolation() != NAMESPACES:
        pytest.skip("pid namespace only")
    out = run("if os.fork() == 0:\n    os.setsid()\n    import time\n    time.sleep(30)\nresult = 1",
              "result = [sorted(int(p) for p in os.listdir('/proc') if p.isdigit()), os.getpid()]")
    pids, me = result(out, 1)
    assert pids == [1, me]  # the runner and this child: the first child's sleeper is gone


def test_second_frame_is_not_in_the_memory_of_first_children():
    scan = """
needle = 'frame2-' + 'secret'
here = globals()
containers = gc.get_objects()
result = any(type(r) is dict and r is not here and needle in r.values()
             for o in containers for r in [o, *gc.get_referents(o)])
"""
    out = run_job(PROBE, [Child("run", 5.0, {"code": scan})],
                  [Child("run", 5.0, {"code": scan, "note": "frame2-secret"})])
    assert result(out, 0) is False  # the first child could not find it...
    assert result(out, 1) is True  # ...though the same scan finds it where it was sent


def test_stdin_is_empty_in_children():
    assert result(run("import sys\nresult = sys.stdin.read()")) == ""


def test_read_file_returns_a_regular_file_and_refuses_links(isolation_mode):
    written = run("open('result.txt', 'w').write('PASS')\nresult = 1", read_file="result.txt")
    linked = run("os.symlink('/etc/hostname', 'result.txt')\nresult = 1", read_file="result.txt")
    assert written.children[0].file_text == "PASS"
    assert linked.children[0].file_text is None


def test_fallback_work_dirs_are_removed(monkeypatch):
    monkeypatch.setattr(sandbox, "_isolation", FALLBACK)
    workdir = result(run("result = ctx.workdir"))
    assert not os.path.exists(workdir)


def test_runner_that_overruns_its_budget_is_killed(tmp_path):
    stuck = tmp_path / "stuck.py"
    stuck.write_text("import time\ntime.sleep(60)\n")
    start = time.monotonic()
    out = run_job(stuck, [Child("run", 0.5)])
    assert out.timed_out and out.children == ()
    assert time.monotonic() - start < 0.5 + STARTUP_S + KILL_GRACE_S + 1.0


def test_runner_failure_is_reported_not_raised(tmp_path):
    out = run_job(tmp_path / "missing.py", [Child("run", 2.0)])
    assert out.error and "runner failed" in out.error and out.children == ()


def _launcher_pid() -> int:
    return sandbox._launchers[(isolation(), str(PROBE))].process.pid


def test_jobs_share_one_warm_launcher_and_a_dead_one_is_replaced():
    run("result = 1")
    first = _launcher_pid()
    assert result(run("result = 2")) == 2 and _launcher_pid() == first
    os.kill(first, 9)
    sandbox._launchers[(isolation(), str(PROBE))].process.wait()
    assert result(run("result = 3")) == 3 and _launcher_pid() != first


def test_a_forked_process_starts_its_own_launcher():
    run("result = 1")
    parent_launcher = _launcher_pid()
    read, write = os.pipe()
    if os.fork() == 0:
        try:
            os.write(write, json.dumps([result(run("result = 4")), _launcher_pid()]).encode())
        finally:
            os._exit(0)
    os.close(write)
    answer, child_launcher = json.loads(os.read(read, 1024))
    os.close(read)
    os.wait()
    assert answer == 4 and child_launcher != parent_launcher


def test_the_launcher_does_not_outlive_its_process():
    script = (f"import sys; sys.path.insert(0, {str(Path(__file__).parents[2])!r})\n"
              "from pathlib import Path\nfrom pgrpo.env import sandbox\n"
              f"sandbox.run_job(Path({str(PROBE)!r}), [sandbox.Child('run', 5.0, {{'code': 'result = 1'}})])\n"
              "print(next(iter(sandbox._launchers.values())).process.pid)")
    launcher = int(subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout)
    deadline = time.monotonic() + 5.0
    while os.path.exists(f"/proc/{launcher}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{launcher}")


def test_a_child_holds_no_socket_so_it_cannot_ask_the_launcher_for_anything(isolation_mode):
    code = """
result = []
for fd in os.listdir('/proc/self/fd'):
    try:
        result.append(os.readlink('/proc/self/fd/' + fd))
    except OSError:  # the listing's own fd, closed by now
        pass
"""
    targets = result(run(code))
    assert len(targets) >= 4 and not [t for t in targets if t.startswith("socket:")]


def test_a_namespaced_job_leaves_the_hosts_mounts_as_they_were():
    if isolation() != NAMESPACES:
        pytest.skip("namespaces mode only")
    before = Path("/proc/self/mountinfo").read_text()
    assert result(run("result = 1")) == 1
    assert Path("/proc/self/mountinfo").read_text() == before


def test_without_namespaces_isolation_falls_back_with_one_warning(monkeypatch, caplog):
    monkeypatch.setattr(sandbox, "_isolation", None)
    monkeypatch.setattr(sandbox, "_probe_namespaces", lambda: "no namespaces here")
    with caplog.at_level("WARNING", logger="pgrpo.env.sandbox"):
        assert isolation() == FALLBACK and isolation() == FALLBACK
    assert len(caplog.records) == 1 and "WEAKER" in caplog.records[0].getMessage()
    assert result(run("result = os.getuid()")) >= sandbox.UID_RANGE[0]


ANSWER_KEY = f"pgrpo_answer_key_{os.getpid()}.py"


@pytest.fixture
def planted_answer_keys() -> list[str]:
    """An answer file wherever an install of pgrpo would put its problems: the interpreter's own site dirs and
    the system-wide ones a Docker image uses (removed afterwards, with any directory made for it)."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    dirs = {os.path.join(os.path.dirname(os.__file__), "site-packages"), sysconfig.get_paths()["purelib"],
            f"/usr/local/lib/{version}/site-packages", "/usr/lib/python3/dist-packages"}
    planted, made = [], []
    try:
        for d in sorted(dirs):
            missing = [p for p in (os.path.dirname(d), d) if not os.path.exists(p)]
            try:
                os.makedirs(d, exist_ok=True)
                made += missing
                Path(d, ANSWER_KEY).write_text("CANONICAL = 'the answer'\n")
                planted.append(os.path.join(d, ANSWER_KEY))
            except PermissionError:
                continue
        if not planted:
            pytest.skip("no site-packages directory is writable here to plant an answer file in")
        yield planted
    finally:
        for path in planted:
            os.remove(path)
        for d in reversed(made):
            os.rmdir(d)


def _search_for(planted: list[str], walk_root: bool) -> str:
    """A candidate that hunts for the answer file: where it was planted, where installs usually go, and (in the
    sandbox, where it is cheap) every directory there is."""
    patterns = [*planted, f"/usr/local/lib/python3*/*-packages/{ANSWER_KEY}",
                f"/usr/lib/python3*/*-packages/{ANSWER_KEY}", f"{os.path.dirname(os.__file__)}/*/{ANSWER_KEY}"]
    return f"""
import glob
found = set()
for pattern in {patterns!r}:
    for path in glob.glob(pattern):
        found.add(path + ': ' + open(path).read().strip())
if {walk_root!r}:
    for top, dirs, files in os.walk('/'):
        dirs[:] = [d for d in dirs if (top, d) != ('/', 'proc')]
        if {ANSWER_KEY!r} in files:
            found.add(os.path.join(top, {ANSWER_KEY!r}))
result = sorted(found)
"""


def test_installed_packages_and_their_data_are_invisible_in_the_sandbox(planted_answer_keys):
    if isolation() != NAMESPACES:
        pytest.skip("fallback mode has no filesystem isolation, by design")
    on_host: dict = {"os": os}
    exec(_search_for(planted_answer_keys, walk_root=False), on_host)
    assert len(on_host["result"]) == len(planted_answer_keys)  # the control: the search works out here
    assert result(run(_search_for(planted_answer_keys, walk_root=True), timeout_s=20.0)) == []


def test_stdlib_modules_import_in_the_sandbox_as_on_the_host():
    """The private root shows the stdlib and the shared libraries its extension modules link: each extension
    module (and a pure-Python module the runner does not preload) imports there exactly as it does here."""
    if isolation() != NAMESPACES:
        pytest.skip("the private root exists in namespaces mode only")
    code = """
import importlib, os, sys
dynload = [d for d in sys.path if d.endswith('lib-dynload')]
names = sorted({n.split('.')[0] for d in dynload for n in os.listdir(d) if n.endswith('.so')}) + ['fractions']
failed = []
for name in names:
    try:
        importlib.import_module(name)
    except Exception as e:
        failed.append(name)
result = [len(names), failed]
"""
    host = subprocess.run([*sandbox.PYTHON, "-c", code + "print(__import__('json').dumps(result))"],
                          capture_output=True, text=True, check=True, env=sandbox.RUNNER_ENV)
    assert result(run(code, timeout_s=20.0)) == json.loads(host.stdout)
