import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from benchmarks.private_site import install_missing


def _wheel(folder: Path, name: str, version: str, tag: str = "py3-none-any") -> Path:
    """A minimal wheel: one module and its dist-info, as pip would unpack it."""
    path = folder / f"{name}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{name}.py", f"VERSION = {version!r}\n")
        info = f"{name}-{version}.dist-info"
        archive.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        archive.writestr(f"{info}/WHEEL", f"Wheel-Version: 1.0\nTag: {tag}\n")
    return path


def test_only_the_missing_wheels_are_unpacked_and_they_import_from_the_private_folder(tmp_path):
    wheels, site = tmp_path / "wheels", tmp_path / "site"
    wheels.mkdir()
    _wheel(wheels, "pgrpo_probe_dist", "1.2.3")
    _wheel(wheels, "pytest", "0.0.1")  # installed here already: the machine's own stays
    result = install_missing(wheels, site)
    assert result["installed"] == ["pgrpo-probe-dist 1.2.3"]
    assert [line.split()[0] for line in result["present"]] == ["pytest"]
    assert not (site / "pytest.py").exists()
    out = subprocess.run([sys.executable, "-c", "import pgrpo_probe_dist; print(pgrpo_probe_dist.VERSION)"],
                         env={"PYTHONPATH": str(site)}, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "1.2.3"
    assert install_missing(wheels, site)["installed"] == []  # a rerun finds its own install


def test_a_needed_wheel_built_for_another_python_is_refused_by_name(tmp_path):
    _wheel(tmp_path, "pgrpo_probe_native", "1.0", "cp27-cp27m-manylinux1_x86_64")
    with pytest.raises(RuntimeError, match=r"pgrpo_probe_native-1\.0-cp27.*cannot load"):
        install_missing(tmp_path, tmp_path / "site")
