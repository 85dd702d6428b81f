"""A Lightning hook that is misspelt is never called, silently: every hook pgrpo defines is marked @override,
and every @override names a method its base classes really have."""

import importlib
import inspect
import pkgutil

import lightning as L
import pytest
from lightning.pytorch.strategies import Strategy

import pgrpo

LIGHTNING_BASES = (L.LightningModule, L.LightningDataModule, L.Callback, Strategy)


def pgrpo_lightning_classes() -> list[type]:
    classes = set()
    for info in pkgutil.walk_packages(pgrpo.__path__, "pgrpo."):
        if info.name.rsplit(".", 1)[-1].startswith("_"):
            continue  # the sandbox's runner and harness run outside pgrpo's process
        module = importlib.import_module(info.name)
        classes |= {c for _, c in inspect.getmembers(module, inspect.isclass)
                    if c.__module__ == info.name and issubclass(c, LIGHTNING_BASES)}
    return sorted(classes, key=lambda c: c.__qualname__)


CLASSES = pgrpo_lightning_classes()


def test_there_are_lightning_classes_to_check():
    assert {c.__name__ for c in CLASSES} >= {"ProjectedGRPO", "GRPODataModule", "HackMetricsLogger", "DeploymentEval"}


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__qualname__)
def test_every_override_names_a_method_of_a_base_class(cls):
    for name, member in vars(cls).items():
        if getattr(member, "__override__", False):
            assert any(hasattr(base, name) for base in cls.__mro__[1:]), f"{cls.__qualname__}.{name} overrides nothing"


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__qualname__)
def test_every_hook_and_every_overridden_method_is_marked_override(cls):
    for name, member in vars(cls).items():
        if not inspect.isfunction(member) or name.startswith("__"):
            continue
        overrides = any(hasattr(base, name) for base in cls.__mro__[1:])
        if name.startswith("on_") or overrides:
            assert getattr(member, "__override__", False), f"{cls.__qualname__}.{name} is not marked @override"
