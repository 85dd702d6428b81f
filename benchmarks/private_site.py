"""Wheels unpacked into a private folder, with no pip and no network: what a bare GPU machine lacks for pgrpo.

A wheel is a zip of what goes into site-packages (PEP 427), so unpacking it is an install. Only the wheels whose
distribution this Python does not have already are unpacked, so the machine's own torch, transformers and
Lightning are the ones that run; nothing outside the folder is touched, and deleting it undoes the install.
Standard library and `packaging` only (transformers depends on it): this runs before anything else is there.
"""

import importlib.metadata
import sys
import zipfile
from pathlib import Path

from packaging.tags import sys_tags
from packaging.utils import canonicalize_name, parse_wheel_filename


def install_missing(wheels: Path, target: Path) -> dict[str, list[str]]:
    """Unpack into `target` each wheel under `wheels` whose distribution is not installed; what was installed
    and what was already there, as "name version" lines. A wheel this Python cannot load is an error, naming it."""
    target.mkdir(parents=True, exist_ok=True)
    supported = set(sys_tags())
    installed, present = [], []
    for wheel in sorted(Path(wheels).glob("*.whl")):
        name, version, _, tags = parse_wheel_filename(wheel.name)
        have = _installed_version(name, target)
        if have is not None:
            present.append(f"{name} {have}")
            continue
        if not tags & supported:
            raise RuntimeError(
                f"{wheel}: built for {', '.join(sorted(map(str, tags)))}, which Python "
                f"{sys.version_info.major}.{sys.version_info.minor} here cannot load; download wheels for this "
                f"Python (make gpu-wheels GPU_PYTHON_VERSION={sys.version_info.major}.{sys.version_info.minor})")
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(target)
        installed.append(f"{name} {version}")
    return {"installed": installed, "present": present}


def _installed_version(name: str, target: Path) -> str | None:
    """The version of `name` this Python sees, counting what an earlier call unpacked into `target`."""
    for dist in importlib.metadata.distributions(path=[str(target), *sys.path]):
        if canonicalize_name(dist.metadata["Name"] or "") == canonicalize_name(name):
            return dist.version
    return None
