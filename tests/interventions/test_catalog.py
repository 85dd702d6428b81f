"""Interventions are found by their module, and the docs' knob table is generated from their docstrings."""

import ast
import importlib.util
import inspect
from pathlib import Path

import pgrpo.interventions as interventions
from pgrpo.interventions.catalog import SHARED, arms, classes, knob_table, knobs

PACKAGE = Path(interventions.__file__).parent
REPO = PACKAGE.parents[1]


def test_every_module_of_the_package_but_the_shared_ones_is_an_arm():
    modules = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__", *SHARED}
    assert {cls.__module__.rsplit(".", 1)[-1] for cls in arms().values()} == modules


def test_every_intervention_the_catalog_finds_is_imported_and_listed_by_name():
    # by name in the source, as a reader, a type checker or an IDE sees it: an import of it and a literal __all__
    # (a new file whose class is not named there fails here, not at a user's `from pgrpo.interventions import`)
    source = ast.parse((PACKAGE / "__init__.py").read_text())
    imported = {alias.asname or alias.name for node in source.body if isinstance(node, ast.ImportFrom)
                for alias in node.names}
    listed = next(ast.literal_eval(node.value) for node in source.body if isinstance(node, ast.Assign)
                  and [getattr(t, "id", None) for t in node.targets] == ["__all__"])
    for name, cls in classes().items():
        assert name in imported and name in listed, (
            f"{cls.__module__}.{name} is not named in pgrpo/interventions/__init__.py: import it from its file and add "
            f"it to __all__")
        assert getattr(interventions, name) is cls
    helpers = {"RewardEdit", "from_config", "intervention_class"}
    assert sorted(listed) == sorted({*classes(), *helpers}), "__all__ names only the interventions and their helpers"


def test_every_knob_of_every_arm_has_a_row_with_its_default_and_a_meaning():
    table = knob_table()
    for name, cls in arms().items():
        params = [n for n, p in inspect.signature(cls.__init__).parameters.items()
                  if n != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]  # (object's *args, **kwargs)
        assert [k for k, _, _ in knobs(cls)] == params
        for knob, _, meaning in knobs(cls):
            assert meaning, f"{name}.__init__ documents no {knob!r}: the docs' knob table would have a blank"
            assert f"| `{knob}` |" in table


def test_the_docs_hook_fills_the_marker_with_the_table():
    spec = importlib.util.spec_from_file_location("hook", REPO / "docs" / "hooks" / "generated.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    page = "intro\n\n<!-- generated: intervention knobs -->\n"
    assert hook.on_page_markdown(page) == "intro\n\n" + knob_table() + "\n"
    assert "<!-- generated: intervention knobs -->" in (REPO / "docs" / "configs.md").read_text()

