"""configs/: one truth per setting. Each arm builds on a base (`config: embedded.yaml`) and states only what differs.

jsonargparse reads a `config:` key inside a YAML file as "load that file first"; the keys after it are set
at their dotted path, replacing what is there: `model.intervention.init_args.gate: one_sided` changes one knob, while a
nested `model: {...}` would replace the base's whole model group. The tests below hold the configs to that
reading: every config resolves to its files merged so, no arm replaces a base group it meant to extend,
and no arm repeats a value its base already states.
"""

import copy
import importlib.util
import shutil
from pathlib import Path

import pytest
import yaml

from pgrpo.cli import main

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
PLANS = CONFIGS / "sweeps"  # `pgrpo sweep --config` plans, not `pgrpo fit` configs
# every `pgrpo fit` config, by its path under configs/ (the arms at the top, the other axes in folders)
ALL = sorted(str(p.relative_to(CONFIGS)) for p in CONFIGS.rglob("*.yaml") if not p.is_relative_to(PLANS))
# overlays that set one intervention's knobs (init_args with no class_path): they resolve on that arm, not alone
# (tests/commands/test_sweep.py resolves them on the arms the plans put them after)
KNOB_OVERLAYS = ("projection/", "probe_penalty/")
# the roots every runnable config builds on: the embedded family's shared base, the Qwen3-4B one-GPU run and
# SmolLM2 on CPU (an overlay: the model and its sizes)
ROOTS = {"embedded.yaml", "models/qwen3_4b_gpu.yaml", "models/smollm2_cpu.yaml"}


def own(path: Path) -> dict:
    return yaml.safe_load(path.read_text()) or {}


def base_of(path: Path) -> Path | None:
    base = own(path).get("config")
    return (path.parent / base).resolve() if base else None


def get(tree: dict, dotted: str):
    for key in dotted.split("."):
        if not isinstance(tree, dict) or key not in tree:
            return None
        tree = tree[key]
    return tree


def put(tree: dict, dotted: str, value) -> None:
    *groups, leaf = dotted.split(".")
    for key in groups:
        if not isinstance(tree.get(key), dict):
            tree[key] = {}
        tree = tree[key]
    tree[leaf] = value


def merged(path: Path) -> dict:
    """A config's settings as jsonargparse reads them: its base's, then each of its keys set at its dotted path."""
    base = base_of(path)
    tree = merged(base) if base else {}
    for key, value in own(path).items():
        if key != "config":
            put(tree, key, copy.deepcopy(value))
    return tree


def contains(resolved, stated) -> bool:
    """Every value `stated` names is in `resolved` (which also holds every default)."""
    if isinstance(stated, dict):
        return isinstance(resolved, dict) and all(k in resolved and contains(resolved[k], v) for k, v in stated.items())
    if isinstance(stated, list):
        return isinstance(resolved, list) and len(resolved) == len(stated) and all(map(contains, resolved, stated))
    return resolved == stated


@pytest.mark.parametrize("config", [c for c in ALL if not c.startswith(KNOB_OVERLAYS)])
def test_every_config_resolves_to_its_files_merged(config, capsys):
    # the GPU and multi-process configs cannot run here; their keys and values must still be valid
    with pytest.raises(SystemExit) as exit_:
        main(["fit", "--config", str(CONFIGS / config), "--print_config"])
    assert exit_.value.code in (None, 0)
    resolved = yaml.safe_load(capsys.readouterr().out)
    assert "class_path" in resolved["model"]["intervention"]
    assert contains(resolved, merged(CONFIGS / config)), f"{config} does not resolve to its files merged"


@pytest.mark.parametrize("config", [c for c in ALL if base_of(CONFIGS / c)])
def test_an_arm_states_only_what_differs_from_its_base(config):
    path = CONFIGS / config
    base = merged(base_of(path))
    for key, value in own(path).items():
        if key == "config":
            continue
        before = get(base, key)
        assert value != before, f"{config}: {key} repeats {before!r}, which {base_of(path).name} already states"
        if isinstance(value, dict) and isinstance(before, dict):
            # one mapping replaces the base's whole group: only right for an object of another class
            assert "class_path" in value and value["class_path"] != before.get("class_path"), (
                f"{config}: `{key}:` as one mapping replaces all of the base's {key}; set its keys one by one "
                f"as dotted keys ({key}.<name>: ...) to change only those")
            continue
        for leaf, leaf_value in flatten(key, value):
            assert get(base, leaf) != leaf_value, (
                f"{config}: {leaf} repeats {leaf_value!r}, which {base_of(path).name} already states")


def flatten(prefix: str, value):
    if isinstance(value, dict):
        for key, sub in value.items():
            yield from flatten(f"{prefix}.{key}", sub)
    else:
        yield prefix, value


@pytest.mark.parametrize("config", ALL)
def test_every_run_config_builds_on_a_root(config):
    # a config with its own logger is a run, not an overlay (lomo_*, no_teacher): unless it is a root,
    # it starts with `config:` and its chain ends at a root, so a copy of a base cannot creep back in
    path = CONFIGS / config
    if base_of(path) is None:
        assert config in ROOTS or get(own(path), "trainer.logger") is None, (
            f"{config} sets its own logger but builds on no base: start it with `config: embedded.yaml` (in a folder "
            f"of configs/, `config: ../embedded.yaml`)")
        return
    while base_of(path):
        path = base_of(path)
    root = str(path.relative_to(CONFIGS))
    assert root in ROOTS, f"{config} builds on {root}, which is no root ({sorted(ROOTS)})"


def test_the_tests_reading_of_a_nested_config_key_matches_jsonargparse(tmp_path, capsys):
    # what merged() and the group rule above assume: dotted keys change one knob, a mapping replaces the group
    (tmp_path / "base.yaml").write_text("model: {optim: {lr: 0.5, warmup_steps: 3}}\n")
    (tmp_path / "dotted.yaml").write_text("config: base.yaml\nmodel.optim.lr: 0.25\n")
    (tmp_path / "nested.yaml").write_text("config: base.yaml\nmodel: {optim: {lr: 0.25}}\n")
    optim = {}
    for name in ("dotted", "nested"):
        with pytest.raises(SystemExit):
            main(["fit", "--config", str(tmp_path / f"{name}.yaml"), "--print_config"])
        optim[name] = yaml.safe_load(capsys.readouterr().out)["model"]["optim"]
        assert contains(optim[name], merged(tmp_path / f"{name}.yaml")["model"]["optim"])
    assert (optim["dotted"]["lr"], optim["dotted"]["warmup_steps"]) == (0.25, 3)
    assert (optim["nested"]["lr"], optim["nested"]["warmup_steps"]) == (0.25, 0)  # the base's 3 is gone


def load_indexes():
    """docs/hooks/indexes.py, which writes the docs' indexes of the tree (not a module of the package)."""
    spec = importlib.util.spec_from_file_location("indexes", CONFIGS.parent / "docs" / "hooks" / "indexes.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_docs_index_of_configs_is_the_trees():
    indexes = load_indexes()
    assert indexes.in_page("configs") == indexes.config_index(), (
        f"docs/configs.md's index of configs is not the tree's (a config added, moved or removed, or the first "
        f"sentence of its header reworded): run `{indexes.COMMAND}` and commit the page")


def test_the_index_check_sees_a_config_added_moved_or_removed(tmp_path):
    indexes = load_indexes()
    shutil.copytree(CONFIGS, tmp_path / "configs")
    (tmp_path / "docs").mkdir()
    shutil.copyfile(CONFIGS.parent / "docs" / "configs.md", tmp_path / "docs" / "configs.md")

    def fresh() -> bool:
        return indexes.in_page("configs", tmp_path) == indexes.config_index(tmp_path)

    assert fresh()
    (tmp_path / "configs" / "placebos" / "new_v.yaml").write_text("# A new placebo. Its header goes on.\n")
    assert not fresh()
    assert indexes.write(tmp_path, ("configs",)) == ["docs/configs.md"] and fresh()  # what the command does
    assert "- `configs/placebos/new_v.yaml`: A new placebo\n" in (tmp_path / "docs" / "configs.md").read_text()
    (tmp_path / "configs" / "placebos" / "new_v.yaml").rename(tmp_path / "configs" / "lomo" / "new_v.yaml")
    assert not fresh()
    indexes.write(tmp_path, ("configs",))
    (tmp_path / "configs" / "lomo" / "new_v.yaml").unlink()
    assert not fresh()
    indexes.write(tmp_path, ("configs",))
    assert (tmp_path / "docs" / "configs.md").read_text() == (CONFIGS.parent / "docs" / "configs.md").read_text()


def test_no_two_configs_share_a_file_name():
    # a sweep finds a bare name anywhere under configs/ and names a cell by its configs' file names
    # (pgrpo.commands.sweep.config_of): two files of one name would make a bare arm ambiguous and two cells one
    names: dict[str, list[str]] = {}
    for path in sorted(CONFIGS.rglob("*.yaml")):
        names.setdefault(path.name, []).append(str(path.relative_to(CONFIGS)))
    assert not {name: paths for name, paths in names.items() if len(paths) > 1}
