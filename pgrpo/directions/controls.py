"""Negative-control V: one that should carry no hack signal, to swap for the real one
(docs/design.md#negative-controls).

random: random orthonormal rows; shuffled: V from the same problems' completions
with the hack/clean labels dealt at random across each problem's completions;
nonhack: V from clean-vs-clean pairs. Each control has exactly the real V's k in
every module, so the only difference from the real arm is *which* directions are
removed. If the real V does not beat them, the effect is regularisation, not hack
removal. An intervention that reads V picks one with its `v` argument
(pgrpo/interventions/reads_v.py), which logs `basis/control_overlap`, the control's
principal-angle overlap with the real V.
"""

from collections.abc import Callable
from dataclasses import replace
from typing import Literal, get_args

from pgrpo.directions.basis import ExtractionConfig
from pgrpo.directions.extraction import HackBasis, random_basis_like

Control = Literal["random", "shuffled", "nonhack"]
CONTROLS = get_args(Control)


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
