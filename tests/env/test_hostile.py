"""Hostile completions: each gets a verdict in time, leaves nothing behind, and fools neither grade.

All cases are graded once, concurrently, in a module fixture; the tests then
check each one. Leak probes return the right answers only when the probe
succeeds, so a leak shows up as gt_correct; every probe is also run here, on
the host, where it must succeed (so a broken probe cannot pass vacuously).
"""

import os
import socket
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest
from sample_problems import TWO_SUM

from pgrpo.env import grade
from pgrpo.env.grader import run_budgets
from pgrpo.env.sandbox import NAMESPACES, isolation

TIMEOUT_S = 2.0
MARK = f"pgh{os.getpid() % 100000}"  # fits in /proc/*/comm (15 chars)
SECRET = f"pgrpo-secret-{os.getpid()}"
REPO = Path(__file__).resolve().parents[2]
HOST_TARGETS = [REPO / f"hostile-{MARK}.txt", Path(f"/tmp/hostile-{MARK}"), Path(f"/var/tmp/hostile-{MARK}"),
                Path(f"/dev/shm/hostile-{MARK}"), Path(f"/run/lock/hostile-{MARK}"),
                Path.home() / f"hostile-{MARK}", Path(f"/tmp/hostile-daemon-{MARK}"),
                Path(f"/tmp/hostile-thread-{MARK}")]

pytestmark = pytest.mark.skipif(isolation() != NAMESPACES,
                                reason="the hostile suite needs namespace isolation (fallback mode is weaker)")

WRONG = "class Solution:\n    def twoSum(self, nums, target):\n        return [0, 0]\n"


def in_method(body: str) -> str:
    return "class Solution:\n    def twoSum(self, nums, target):\n" + _indent(body, 8) + "\n        return [0, 0]\n"


def at_import(stmts: str) -> str:
    return stmts + "\n\n" + WRONG


def _indent(text: str, n: int) -> str:
    return "\n".join(" " * n + line for line in text.strip("\n").splitlines())


def leak_probe(condition: str) -> str:
    """A correct two-sum, but only when `condition` (a function body returning bool) holds in the sandbox."""
    return (f"import os, socket, resource\n\ndef _leaked():\n    try:\n{_indent(condition, 8)}\n"
            "    except Exception:\n        return False\n\nLEAKED = _leaked()\n\n"
            "class Solution:\n    def twoSum(self, nums, target):\n        if not LEAKED:\n            return None\n"
            "        seen = {}\n        for i, x in enumerate(nums):\n            if target - x in seen:\n"
            "                return [seen[target - x], i]\n            seen[x] = i\n")


def _listener() -> tuple[socket.socket, list]:
    """A host socket on 127.0.0.1 that records whatever connects to it (for the test session's lifetime)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    received: list[bytes] = []

    def serve():
        while True:
            conn, _ = server.accept()
            received.append(conn.recv(100))
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    return server, received


SERVER, RECEIVED = _listener()
PORT = SERVER.getsockname()[1]

LEAKS = {
    "env_secret": f"return {SECRET!r} in str(dict(os.environ))",
    "proc_environ_secret": f"""
for pid in os.listdir('/proc'):
    try:
        if {SECRET!r}.encode() in open(f'/proc/{{pid}}/environ', 'rb').read():
            return True
    except OSError:
        pass
return False""",
    "proc_sees_grader": f"return os.path.exists('/proc/{os.getpid()}/cmdline')",
    "proc_grader_cmdline": """
for pid in os.listdir('/proc'):
    try:
        if b'pytest' in open(f'/proc/{pid}/cmdline', 'rb').read():
            return True
    except OSError:
        pass
return False""",
    "read_repo_file": f"return len(open({str(Path(__file__).resolve())!r}).read()) > 0",
    "read_host_data": f"return os.path.isdir({str(REPO)!r}) or os.path.isdir('/work')",
    "network_connect": f"""
s = socket.create_connection(('127.0.0.1', {PORT}), timeout=0.5)
s.sendall(b'leak from uid %d' % os.getuid())
return True""",
}
# Probes that would change the test process if run here; their sandbox behaviour is checked all the same.
SANDBOX_ONLY_LEAKS = {
    "raise_rlimit_as": "resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY,) * 2)\nreturn True",
    "raise_rlimit_nproc": "resource.setrlimit(resource.RLIMIT_NPROC, (10**6, 10**6))\nreturn True",
    "setuid_root": "os.setuid(0)\nreturn True",
    "chroot_escape": "os.chroot('/tmp')\nreturn True",
    "write_proc_sys": "open('/proc/sys/kernel/hostname', 'w').write('x')\nreturn True",
}

DAEMON = f"""
import ctypes, os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        ctypes.CDLL(None).prctl(15, b"{MARK}", 0, 0, 0)
        time.sleep(0.5)
        open("/tmp/hostile-daemon-{MARK}", "w").write("escaped")
        os._exit(0)
    os._exit(0)
"""

HOSTILE = {
    "loop_in_method": in_method("while True:\n    pass"),
    "loop_at_import": at_import("while True:\n    pass"),
    "loop_in_del": "class Stuck:\n    def __del__(self):\n        while True:\n            pass\n\n\n" + in_method("Stuck()"),
    "sleep_in_method": in_method("import time\ntime.sleep(100)"),
    "fork_bomb": at_import("import os\nfor _ in range(10000):\n    try:\n        os.fork()\n    except OSError:\n"
                           "        pass"),
    "memory_bomb": at_import("chunks = []\nwhile True:\n    chunks.append(bytearray(10**7))"),
    "huge_allocation": in_method("x = bytearray(10**11)"),
    "deep_recursion": at_import("import sys\nsys.setrecursionlimit(10**7)\ndef down(n):\n    return down(n + 1)\n"
                                "down(0)"),
    "sys_exit_import": at_import("import sys\nsys.exit(0)"),
    "os_exit_import": at_import("import os\nos._exit(0)"),
    "raise_system_exit": in_method("raise SystemExit(0)"),
    "raise_keyboard_interrupt": in_method("raise KeyboardInterrupt"),
    "kill_parent": at_import("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)"),
    "kill_everyone": at_import("import os, signal\nos.kill(-1, signal.SIGKILL)"),
    "killpg_parent": at_import("import os, signal\ntry:\n    os.killpg(os.getpgid(os.getppid()), signal.SIGKILL)\n"
                               "except OSError:\n    pass\nos.killpg(0, signal.SIGKILL)"),
    "write_outside": at_import("\n".join(
        f"try:\n    open({str(p)!r}, 'w').write('escaped')\nexcept OSError:\n    pass" for p in HOST_TARGETS)),
    "daemon_double_fork": at_import(DAEMON),
    "thread_outlives": at_import(f"""
import threading, time
def later():
    time.sleep(0.5)
    open("/tmp/hostile-thread-{MARK}", "w").write("escaped")
threading.Thread(target=later).start()"""),
    "subprocess_sleeps": at_import(f"import subprocess\nsubprocess.Popen(['/bin/sh', '-c', 'sleep 30; : {MARK}'])"),
    "huge_stdout": in_method("import sys\nfor _ in range(800):\n    sys.stdout.write('x' * 65536)"),
    "huge_stderr": in_method("import sys\nfor _ in range(800):\n    sys.stderr.write('y' * 65536)"),
    "ignore_signals_then_loop": at_import("import signal\nfor s in (signal.SIGTERM, signal.SIGALRM, signal.SIGINT, "
                                          "signal.SIGHUP):\n    signal.signal(s, signal.SIG_IGN)\nwhile True:\n"
                                          "    pass"),
    "segfault_ctypes": at_import("import ctypes\nctypes.string_at(0)"),
    "stop_self": at_import("import os, signal\nos.kill(os.getpid(), signal.SIGSTOP)"),
    "close_all_fds": at_import("import os\nos.closerange(0, 4096)"),
    "dup_over_fds": at_import("import os\nos.dup2(1, 3)\nos.dup2(2, 1)"),
    "forged_runner_json": at_import(
        "print('{\"children\": [{\"entry\": \"oracle\", \"status\": 0, \"timed_out\": false, \"stdout\": \"\", '\n"
        "      '\"stderr\": \"\", \"report\": \"{\\\\\"results\\\\\": [[1, [0, 1]], [1, [1, 2]], [1, [0, 1]]]}\", '\n"
        "      '\"file_text\": null, \"seconds\": 0.0}]}')"),
    "forged_report_fd": in_method("import os\nos.write(3, b'{\"results\": [[1, 1], [1, 2], [1, 3]]}\\n'"
                                  " b'{\"passed\": true, \"genuine\": true}\\n')"),
    "monkeypatch_json_and_builtins": at_import(
        "import json, builtins\njson.dumps = lambda *a, **k: '{\"results\": []}'\n"
        "builtins.type = lambda *a: int\nbuiltins.isinstance = lambda *a: True"),
    "int_subclass_eq": "class Sneaky(int):\n    def __eq__(self, other):\n        return True\n"
                       "    __hash__ = int.__hash__\n\n\n"
                       "class Solution:\n    def twoSum(self, nums, target):\n        return Sneaky(0)\n",
    "list_subclass_eq": "class Sneaky(list):\n    def __eq__(self, other):\n        return True\n\n\n"
                        "class Solution:\n    def twoSum(self, nums, target):\n        return Sneaky()\n",
    "big_file": at_import("try:\n    with open('big', 'wb') as f:\n        for _ in range(200):\n"
                          "            f.write(b'z' * 10**6)\nexcept OSError:\n    pass"),
    "huge_return": "class Solution:\n    def twoSum(self, nums, target):\n        return list(range(3 * 10**6))\n",
    "deep_nested_return": "import sys\nsys.setrecursionlimit(10**6)\n\n\nclass Solution:\n"
                          "    def twoSum(self, nums, target):\n        x = []\n        for _ in range(10**5):\n"
                          "            x = [x]\n        return x\n",
    "read_stdin": at_import("import sys\ndata = sys.stdin.read()"),
    "shell_background": at_import(f"import os\nos.system(\"sh -c 'sleep 30; : {MARK}' &\")"),
    "null_byte": "class Solution:\n    def twoSum(self, nums, target):\n        return [0, 1]  # \x00\n",
    **{f"leak_{name}": leak_probe(cond) for name, cond in {**LEAKS, **SANDBOX_ONLY_LEAKS}.items()},
}
# Cases graded under another mode: a lever that would otherwise never be exercised.
MODES_FOR = {"atexit_sleeps": "exit_code", "huge_stdout": "stdout_marker", "big_file": "file_marker"}
HOSTILE["atexit_sleeps"] = at_import("import atexit, time\natexit.register(time.sleep, 100)")


def _grade_timed(item: tuple[str, str]) -> tuple[str, object, float]:
    name, code = item
    start = time.monotonic()
    result = grade(TWO_SUM, f"```python\n{code}```", MODES_FOR.get(name, "sentinel"), timeout_s=TIMEOUT_S)
    return name, result, time.monotonic() - start


@contextmanager
def secret_in_environments():
    """The secret in this process's environment and in the initial one of a host process (/proc/*/environ)."""
    os.environ["PGRPO_TEST_SECRET"] = SECRET
    holder = subprocess.Popen(["sleep", "60"], env={"PGRPO_TEST_SECRET": SECRET})
    try:
        yield
    finally:
        holder.kill()
        holder.wait()
        del os.environ["PGRPO_TEST_SECRET"]


@pytest.fixture(scope="module")
def graded() -> dict:
    with secret_in_environments(), ThreadPoolExecutor(max_workers=4) as pool:
        results = {name: (result, seconds) for name, result, seconds in pool.map(_grade_timed, HOSTILE.items())}
    time.sleep(1.0)  # anything that escaped would have written its file by now
    return results


def test_the_suite_is_large_enough():
    assert len(HOSTILE) >= 30


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_completion_gets_a_timely_verdict_and_fools_nothing(graded, name):
    result, seconds = graded[name]
    assert seconds < sum(run_budgets(TWO_SUM, TIMEOUT_S).values()) + 2.0  # every run spent its own whole budget
    assert not result.gt_correct
    assert not result.passed


def test_nothing_written_outside_the_sandbox(graded):
    assert [p for p in HOST_TARGETS if p.exists()] == []


def test_no_candidate_process_survives(graded):
    survivors = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                text = (proc / "comm").read_bytes() + (proc / "cmdline").read_bytes()
            except OSError:
                continue
            if MARK.encode() in text:
                survivors.append(proc.name)
    assert survivors == []


def test_nothing_reached_the_hosts_network(graded):
    assert [m for m in RECEIVED if m != b"leak from uid %d" % os.getuid()] == []  # the host control may connect


@pytest.mark.parametrize("name", sorted(LEAKS))
def test_leak_probe_works_on_the_host(name):
    """Positive control: the probe that found nothing in the sandbox finds its target out here."""
    namespace: dict = {}
    with secret_in_environments():
        exec(leak_probe(LEAKS[name]), namespace)
    assert namespace["LEAKED"] is True


def test_leak_probe_template_passes_when_the_probe_holds():
    result = grade(TWO_SUM, f"```python\n{leak_probe('return True')}```", "sentinel", timeout_s=TIMEOUT_S)
    assert result.gt_correct and result.passed


def test_a_completion_that_breaks_the_sandbox_does_not_break_the_next_grade(graded):
    result = grade(TWO_SUM, f"```python\n{leak_probe('return True')}```", timeout_s=TIMEOUT_S)
    assert result.gt_correct
