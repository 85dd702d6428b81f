"""Interventions are found by their module, and the docs' knob table is generated from their docstrings."""

import importlib.util
import inspect
from pathlib import Path

import pgrpo.interventions as interventions
from pgrpo.interventions.catalog import SHARED, arms, knob_table, knobs

PACKAGE = Path(interventions.__file__).parent
REPO = PACKAGE.parents[1]


def test_every_module_of_the_package_is_an_arm_exported_by_name_without_a_list():
    modules = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__", *SHARED}
    found = arms()
    assert {cls.__module__.rsplit(".", 1)[-1] for cls in found.values()} == modules
    for name, cls in found.items():
        assert getattr(interventions, name) is cls and name in interventions.__all__


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

