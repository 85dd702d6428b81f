"""Negative-control arms: the run's V is swapped for one that should carry no hack signal (docs/design.md#negative-controls).

random: random orthonormal rows; shuffled: V from the same problems' completions
with the hack/clean labels dealt at random across each problem's completions;
nonhack: V from clean-vs-clean pairs. Each control has exactly the real V's k in
every module, so the only difference from the real arm is *which* directions are
removed. If the real V does not beat them, the effect is regularisation, not hack
removal. Each logs `proj/control_overlap`, its principal-angle overlap with the
real V, so a reader sees how much of the real subspace a control still holds.
"""

import os
from collections.abc import Callable
from dataclasses import replace
from typing import Literal, get_args

import lightning as L
from lightning.pytorch.utilities import rank_zero_info
from typing_extensions import override

from pgrpo.basis import ExtractionConfig
from pgrpo.extraction import HackBasis, basis_overlap, random_basis_like

Control = Literal["random", "shuffled", "nonhack"]
CONTROLS = get_args(Control)


class ControlBasis(L.Callback):
    """At train start, replace the real V by a negative control matched to it in k per module."""

    def __init__(self, control: Control, seed: int | None = None):
        """
        Args:
            control: random | shuffled | nonhack.
            seed: seed of the random rows (None: the run's seed_everything, so each seed of a sweep draws its own).
        """
        if control not in CONTROLS:
            raise ValueError(f"ControlBasis.control={control!r}: expected one of {CONTROLS}")
        self.control = control
        self.seed = seed

    @override
    def on_train_start(self, trainer, pl_module) -> None:
        # runs after the module's on_fit_start extraction; a resumed run restored its control V from the checkpoint
        if is_control(pl_module.basis):
            return
        seed = self.seed if self.seed is not None else int(os.environ.get("PL_GLOBAL_SEED", 0))
        problems = trainer.datamodule.extraction_problems
        basis = control_basis(self.control, pl_module.basis, pl_module.extraction,
                              lambda control, cfg: pl_module.extract_basis(problems, control, cfg), seed)
        # how much of the real V's span the control still holds (1 = the same subspace, ~√(k/r) = unrelated)
        overlap, _ = basis_overlap(pl_module.basis, basis)
        basis.meta["overlap_with_real"] = f"{overlap:.6g}"
        pl_module.basis = basis.to(pl_module.device)
        for logger in trainer.loggers:
            logger.log_metrics({"proj/control_overlap": overlap}, step=trainer.global_step)
        rank_zero_info(f"negative control: {self.control} V, k matched per module to the real V "
                       f"({basis.k_total} axes over {len(basis.V)} modules), principal-angle overlap with the "
                       f"real V {overlap:.3f}")


def is_control(basis: HackBasis) -> bool:
    return basis.meta.get("control", "none") != "none"


def control_basis(control: Control, like: HackBasis, cfg: ExtractionConfig,
                  extract: Callable[[Control, ExtractionConfig], HackBasis], seed: int = 0) -> HackBasis:
    """A `control` V with `like`'s modules and k per module.

    shuffled/nonhack come from `extract(control, cfg')`, the caller's extraction from that control's pairs, with
    cfg' = cfg without axis dropping: the control must keep at least as many rows as the real V in every module.
    """
    if control == "random":
        return random_basis_like(like, seed)
    return matched_k(extract(control, replace(cfg, tau_axis=None, noise_floor=None)), like, control)


def matched_k(control: HackBasis, like: HackBasis, name: str) -> HackBasis:
    """control's top rows, as many per module as `like` has (modules `like` lacks are dropped)."""
    V, sigma = {}, {}
    for module, rows in like.V.items():
        k = rows.shape[0]
        have = control.V.get(module)
        if have is None or have.shape[0] < k:
            raise ValueError(f"{name} control V has {0 if have is None else have.shape[0]} rows in {module}, the real "
                             f"V has {k}: too few control pairs for this k (lower model.extraction.k)")
        V[module], sigma[module] = have[:k].contiguous(), control.sigma[module][:k].contiguous()
    k_total = sum(s.shape[0] for s in sigma.values())
    return HackBasis(V, sigma, {**control.meta, "control": name, "k_total": str(k_total)})
