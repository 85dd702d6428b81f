"""Which code a run ran: the commit of pgrpo's checkout and whether its tree was clean, or the installed version."""

import subprocess

import pytest

from pgrpo.records.provenance import REPOSITORY, code_record, describe, installed_version


def git(repo, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


@pytest.fixture
def checkout(tmp_path):
    """A git checkout holding pgrpo/ at its root, one commit in."""
    git(tmp_path, "init", "-q")
    (tmp_path / "pgrpo").mkdir()
    (tmp_path / "pgrpo" / "loss.py").write_text("x = 1\n")
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "README.md").write_text("kept cells\n")
    git(tmp_path, "add", ".")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    return tmp_path


def test_a_checkout_names_its_commit_and_every_uncommitted_change(checkout):
    head = git(checkout, "rev-parse", "HEAD").strip()
    assert code_record(checkout) == {"commit": head, "clean": True, "changed": []}
    (checkout / "pgrpo" / "loss.py").write_text("x = 2\n")
    (checkout / "pgrpo" / "new.py").write_text("")
    record = code_record(checkout)
    assert record == {"commit": head, "clean": False, "changed": [" M pgrpo/loss.py", "?? pgrpo/new.py"]}
    assert describe(record) == f"commit {head[:12]} (dirty: 2 uncommitted changes)"


def test_cells_a_sweep_keeps_in_results_do_not_make_the_code_dirty(checkout):
    (checkout / "results" / "README.md").write_text("more kept cells\n")
    (checkout / "results" / "cell.json").write_text("{}")
    assert code_record(checkout)["clean"]


def test_pgrpo_outside_the_root_of_a_checkout_names_its_installed_version(checkout):
    # e.g. installed into a virtual environment inside another project's checkout: not that checkout's code
    inner = checkout / "venv" / "site-packages"
    inner.mkdir(parents=True)
    assert code_record(inner) == {"version": installed_version()}
    assert describe({"version": "0.1.0"}) == "pgrpo 0.1.0 (not a git checkout)"


def test_a_worktree_with_its_virtual_environment_linked_in_is_clean(checkout, tmp_path_factory):
    # a sweep run from a worktree of its own commit, the main checkout's .venv linked in (a symlink, not a directory):
    # the repository's .gitignore must ignore the link as it ignores the directory, or every kept cell reads dirty
    (checkout / ".gitignore").write_text((REPOSITORY / ".gitignore").read_text())
    git(checkout, "add", ".gitignore")
    git(checkout, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "ignore")
    elsewhere = tmp_path_factory.mktemp("venv")
    (checkout / ".venv").symlink_to(elsewhere, target_is_directory=True)
    (checkout / ".venv-vllm").symlink_to(elsewhere, target_is_directory=True)
    assert code_record(checkout)["changed"] == []
