"""Every way of fighting hacking, one file each, behind one interface (base.py): chosen in a config by
`model.intervention: {class_path: pgrpo.interventions.Erase, init_args: {...}}` (docs/configs.md).

Each is found by its module (catalog.py): a new intervention is a file here, exported by name without a list.
"""

import importlib

from pgrpo.interventions.base import Intervention, RewardEdit
from pgrpo.interventions.catalog import classes

globals().update(classes())
__all__ = sorted([*classes(), "RewardEdit", "from_config", "intervention_class"])


def intervention_class(class_path: str) -> type[Intervention]:
    module, _, name = class_path.rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    if not (isinstance(cls, type) and issubclass(cls, Intervention)):
        raise ValueError(f"{class_path}: not an Intervention")
    return cls


def from_config(config: dict | None) -> Intervention:
    """The intervention a saved config or checkpoint names ({class_path, init_args}; None: vanilla)."""
    if not config:
        return classes()["Vanilla"]()
    return intervention_class(config["class_path"])(**(config.get("init_args") or {}))
