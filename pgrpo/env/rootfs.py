"""What a namespaced sandbox child sees of the host's files: the standard library and the libraries it loads.

The children are forked from the runner, which already has the interpreter and
libpython mapped, so neither file needs to be visible (nothing in a child ever
execs Python again). What a child may still open is the stdlib: the source of a
module the runner did not preload, and the extension modules in lib-dynload
with the shared libraries they link. So the private root shows exactly those,
read-only, and nothing installed beside them: no site-packages or
dist-packages (a system-wide install of pgrpo keeps its built-in problems,
canonical solutions included, in one), no data directories, no binaries.
"""

import functools
import json
import logging
import os
import subprocess
from collections.abc import Sequence

SITE_DIRS = ("site-packages", "dist-packages")  # where installed packages live, even beneath the stdlib
LOADER_CACHE = "/etc/ld.so.cache"  # how the dynamic loader finds a library by name

log = logging.getLogger(__name__)


@functools.cache
def plan(python: tuple[str, ...]) -> dict:
    """The private root of a child of the runner started as `python`, as mounts for the runner to make.

    {"binds": real paths to bind read-only, "links": [path, target] symlinks
    that make the host's names for them resolve the same way, "hide": real
    directories under the binds to cover with an empty read-only tmpfs}.
    Computed once per process (it runs ldd over the stdlib's extension modules).
    """
    stdlib = _stdlib_paths(python)
    libraries = _shared_libraries(stdlib)
    links: dict[str, str] = {}
    shown = {_resolve(path, links) for path in (*stdlib, *libraries, LOADER_CACHE) if os.path.exists(path)}
    binds = sorted(p for p in shown if not any(_beneath(p, other) for other in shown if other != p))
    hide = sorted({os.path.realpath(os.path.join(d, name)) for d in binds if os.path.isdir(d) for name in SITE_DIRS
                   if os.path.isdir(os.path.join(d, name))})
    return {"binds": binds, "links": sorted(links.items()), "hide": [h for h in hide if _shown(h, binds)]}


def _stdlib_paths(python: tuple[str, ...]) -> list[str]:
    """The runner's sys.path: with -S it holds the stdlib (its zip, its dir, lib-dynload) and nothing else."""
    probe = subprocess.run([*python, "-c", "import json, sys; print(json.dumps(sys.path))"], env={},
                           capture_output=True, text=True, timeout=60, check=True)
    return [p for p in json.loads(probe.stdout) if os.path.isabs(p)]


def _shared_libraries(stdlib: Sequence[str]) -> list[str]:
    """Every shared library the stdlib's extension modules load, as the dynamic loader names it (ldd)."""
    modules = [os.path.join(d, name) for d in stdlib if os.path.isdir(d) for name in sorted(os.listdir(d))
               if name.endswith(".so")]
    if not modules:
        return []
    try:
        listing = subprocess.run(["ldd", *modules], capture_output=True, text=True, timeout=120).stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        log.warning("pgrpo sandbox: ldd failed (%s); stdlib modules that link a shared library (ssl, ctypes, "
                    "sqlite3, ...) will not import in the sandbox", e)
        return []
    libraries = set()
    for line in listing.splitlines():
        # "\tlibz.so.1 => /lib/x86_64-linux-gnu/libz.so.1 (0x...)" or "\t/lib64/ld-linux-x86-64.so.2 (0x...)"
        name = line.split("=>", 1)[-1].split()
        if name and name[0].startswith("/") and not name[0].endswith(":"):
            libraries.add(name[0])
    return sorted(libraries)


def _resolve(path: str, links: dict[str, str]) -> str:
    """path's real path; adds to `links` every symlink met on the way (each hop of a chain too)."""
    resolved = "/"
    for part in path.strip("/").split("/"):
        here = os.path.join(resolved, part)
        if os.path.islink(here):
            target = os.readlink(here)
            links[here] = target
            _resolve(os.path.join(resolved, target), links)
        resolved = os.path.realpath(here)
    return resolved


def _beneath(path: str, directory: str) -> bool:
    return path.startswith(directory.rstrip("/") + "/")


def _shown(path: str, binds: Sequence[str]) -> bool:
    return any(_beneath(path, b) for b in binds)
