"""`make setup` installs within constraints.txt, the versions CI tested: it must pin what pyproject asks for."""

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]
UNPINNED = {"torch", "vllm"}  # torch comes from TORCH_SPEC (CPU or CUDA); vLLM lives in its own venv


def pins() -> dict[str, str]:
    lines = (REPO / "constraints.txt").read_text().splitlines()
    return {canonicalize_name(name): version for name, _, version in
            (line.partition("==") for line in lines if line and not line.startswith("#"))}


def test_every_dependency_pyproject_declares_is_pinned_within_its_bounds():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = [*project["dependencies"], *(r for extra in ("dev", "docs", "smollm2", "trl")
                                           for r in project["optional-dependencies"][extra])]
    pinned = pins()
    for requirement in map(Requirement, declared):
        name = canonicalize_name(requirement.name)
        if name in UNPINNED:
            continue
        assert name in pinned, f"{name} is not pinned in constraints.txt"
        assert requirement.specifier.contains(pinned[name], prereleases=True), (name, pinned[name])
    assert not UNPINNED & pinned.keys()
