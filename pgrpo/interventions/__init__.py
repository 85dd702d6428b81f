"""Every way of fighting hacking, one file each, behind one interface (base.py): chosen in a config by
`model.intervention: {class_path: pgrpo.interventions.Erase, init_args: {...}}` (docs/configs.md).

Each is exported here by name, imported from its file and listed in `__all__`: a new intervention is a file in this
package and its two lines below (tests/interventions/test_catalog.py fails for an Intervention subclass that a file
of the package defines and this module does not name; catalog.py finds them by their modules).
"""

import importlib

from pgrpo.interventions.base import Intervention, RewardEdit  # before the arms, which build on it
from pgrpo.interventions.adv_gate import AdvGate
from pgrpo.interventions.adv_shortcut import AdvShortcut
from pgrpo.interventions.adv_shortcut_v import AdvShortcutV
from pgrpo.interventions.clean_subspace import CleanSubspace
from pgrpo.interventions.erase import Erase
from pgrpo.interventions.gt_penalty import GtPenalty
from pgrpo.interventions.gt_screen import GtScreen
from pgrpo.interventions.probe_penalty import ProbePenalty
from pgrpo.interventions.reads_activations import ReadsActivations
from pgrpo.interventions.reads_v import ReadsV
from pgrpo.interventions.route import Route
from pgrpo.interventions.vanilla import Vanilla

__all__ = [
    "AdvGate", "AdvShortcut", "AdvShortcutV", "CleanSubspace", "Erase", "GtPenalty", "GtScreen", "Intervention",
    "ProbePenalty", "ReadsActivations", "ReadsV", "RewardEdit", "Route", "Vanilla", "from_config",
    "intervention_class",
]


def intervention_class(class_path: str) -> type[Intervention]:
    module, _, name = class_path.rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    if not (isinstance(cls, type) and issubclass(cls, Intervention)):
        raise ValueError(f"{class_path}: not an Intervention")
    return cls


def from_config(config: dict | None) -> Intervention:
    """The intervention a saved config or checkpoint names ({class_path, init_args}; None: vanilla)."""
    if not config:
        return Vanilla()
    return intervention_class(config["class_path"])(**(config.get("init_args") or {}))
