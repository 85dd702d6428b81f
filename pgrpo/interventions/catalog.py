"""Every intervention, found by its module: what a new file of this package defines, whether or not it is exported.

`arms()` imports each module of the package and collects the Intervention subclasses it defines; the
modules that hold what interventions share (the interface, reading V, reading activations, a placebo's yoke)
define bases, not arms. `pgrpo.interventions` names each by hand, and its test holds that list to what this finds.
`knob_table()` is the docs' table of every arm's knobs, generated from the classes' signatures and
docstrings when the docs are built (docs/hooks/generated.py), so the docs never restate a docstring by hand.
"""

import importlib
import inspect
import pkgutil
from pathlib import Path

from docstring_parser import parse

from pgrpo.interventions.base import Intervention

SHARED = ("base", "reads_v", "reads_activations", "yoke", "catalog")  # what interventions share, not arms


def classes() -> dict[str, type[Intervention]]:
    """Every Intervention subclass the package's modules define, by class name (the arms and their bases)."""
    found: dict[str, type[Intervention]] = {"Intervention": Intervention}
    for info in pkgutil.iter_modules([str(Path(__file__).parent)]):
        module = importlib.import_module(f"{__package__}.{info.name}")
        for name, obj in vars(module).items():
            if isinstance(obj, type) and issubclass(obj, Intervention) and obj.__module__ == module.__name__:
                found[name] = obj
    return found


def arms() -> dict[str, type[Intervention]]:
    """The interventions a config can choose (`model.intervention: {class_path: pgrpo.interventions.<Name>}`)."""
    return {name: cls for name, cls in sorted(classes().items())
            if cls.__module__.rsplit(".", 1)[-1] not in SHARED}


def knobs(cls: type[Intervention]) -> list[tuple[str, str, str]]:
    """(name, default, meaning) of each `init_args` knob, from the signature and the docstring of the
    `__init__` that declares it (the class's own, else the nearest base's)."""
    docs: dict[str, str] = {}
    for owner in reversed(cls.__mro__):
        init = vars(owner).get("__init__")
        if init is not None and init.__doc__:
            docs |= {p.arg_name: " ".join((p.description or "").split()) for p in parse(init.__doc__).params}
    out = []
    for name, param in inspect.signature(cls.__init__).parameters.items():
        if name == "self" or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        default = "–" if param.default in (None, inspect.Parameter.empty) else f"`{param.default}`"
        out.append((name, default, docs.get(name, "")))
    return out


def knob_table() -> str:
    """One row per knob, the arms that share it (same name, default and meaning) merged into one row."""
    rows: dict[tuple[str, str, str], list[str]] = {}
    for name, cls in arms().items():
        for row in knobs(cls):
            rows.setdefault(row, []).append(name)
    lines = ["| `model.intervention.init_args.…` | arms | default | meaning |", "|---|---|---|---|"]
    for (knob, default, meaning), owners in rows.items():
        escaped = meaning.replace("|", r"\|")  # a pipe in a docstring would end the cell
        lines.append(f"| `{knob}` | {', '.join(owners)} | {default} | {escaped} |")
    return "\n".join(lines)
