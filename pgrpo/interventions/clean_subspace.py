"""clean_subspace: each step's gradient is projected *onto* the subspace clean completions' gradients span
(after TDGA, 2026, which projects onto the top-K subspace of a short clean warm-up's gradients and stays unhacked
for hundreds of steps). Where erase removes what is known to be hack-ward, this keeps only what is known to be
clean: it needs no hack examples at all.

Per module, the per-completion NLL gradients of the pairs' clean completions (n, r), under the base model, give
their top-K right singular vectors C (K, r) and singular values σ; the gradient g becomes Cᵀ diag(w) C g, with
w = σ / σ_max (weighted by singular value, as TDGA does) or 1.

Its random placebo is matched in strength: K random directions keep far less of a gradient than the clean ones
(on the embedded default they remove 0.96 of its norm against 0.88), so at train start it takes as many random
directions as make it remove the real subspace's share of the base policy's gradient (pgrpo/directions/calibration.py).
"""

from typing import ClassVar, Literal

import torch
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor

from pgrpo.model.adapter import knobs_zeroed
from pgrpo.directions.basis import completion_grads, pair_prompts
from pgrpo.directions.calibration import base_gradient, bisect
from pgrpo.directions.extraction import random_rows_like
from pgrpo.interventions.base import Intervention, RunView, run_seed
from pgrpo.interventions.yoke import yoke_of
from pgrpo.step.projection import removed_share

Weighting = Literal["singular_value", "uniform"]
Subspace = Literal["real", "random"]


class CleanSubspace(Intervention):
    """Keep only each gradient's component in the top-K subspace of the clean completions' gradients."""

    placebo_knob: ClassVar[str] = "subspace"

    def __init__(self, k: int = 8, weighting: Weighting = "singular_value", subspace: Subspace = "real",
                 subspace_seed: int | None = None, yoked_to: str | None = None):
        """
        Args:
            k: directions kept per module (at most the number of clean completions and the module's rank).
            weighting: singular_value (each direction's component scaled by σ_i / σ_1, as TDGA) or uniform.
            subspace: real (the clean gradients' top-K) or random (the placebo: random orthonormal directions per
                module, as many as remove the real subspace's share of the base policy's gradient at train start,
                the real weights stretched over them).
            subspace_seed: seed of the random placebo (None: the run's seed_everything).
            yoked_to: a placebo's method run at the same seed, whose share of the gradient's norm it removes step by
                step, what its own subspace removes scaled to it (pgrpo/interventions/yoke.py); None: matched at
                train start.
        """
        if k < 1:
            raise ValueError(f"k={k}: must be >= 1")
        if weighting not in ("singular_value", "uniform"):
            raise ValueError(f"weighting={weighting!r}: expected singular_value or uniform")
        if subspace not in ("real", "random"):
            raise ValueError(f"subspace={subspace!r}: expected real or random")
        self.k = k
        self.weighting = weighting
        self.subspace = subspace
        self.subspace_seed = subspace_seed
        self.yoked_to = yoked_to
        self.yoke = yoke_of(self, yoked_to)
        self.directions: dict[str, tuple[Tensor, Tensor]] = {}  # module → (C (K, r), w (K,))


    def prepare(self, module: RunView) -> None:
        if self.yoke is not None:
            self.yoke.scalars()
        pairs = module.extraction_pairs()
        with knobs_zeroed(module.adapter):  # the base's gradients: a resumed run builds the same subspace
            grads = completion_grads(module.policy, module.adapter, module.tokenizer, pair_prompts(module.tokenizer,
                                     pairs), [p.clean for p in pairs], module.extraction, module.generation.temperature)
        self.directions = clean_directions(grads, self.k, self.weighting)
        first = base_gradient(module)
        if self.subspace == "random":
            target, seed = removed(first, self.directions), run_seed(self.subspace_seed)
            largest = max(c.shape[1] for c, _ in self.directions.values())
            scale = bisect(lambda s: removed(first, random_directions(self.directions, seed, s)), target, 0.0, largest,
                           rising=False)  # more random directions keep more
            self.directions = random_directions(self.directions, seed, scale)
        # on the knobs' device once, not copied there by each step's gradient hook (a placebo is drawn on the host)
        self.directions = {n: (c.to(module.device), w.to(module.device)) for n, (c, w) in self.directions.items()}
        kept = sum(len(w) for _, w in self.directions.values())
        rank = sum(module.adapter[name].rank for name in self.directions)
        rank_zero_info(f"clean_subspace: {self.subspace} subspace of {kept} directions of {rank} over "
                       f"{len(self.directions)} modules, from {len(pairs)} clean completions")
        module.log_at_start({"basis/kept_dims_share": kept / rank,
                              "intervention/start_rate": removed(first, self.directions)})

    def gradient(self, module: RunView) -> None:
        if self.yoke is not None:
            self.yoke.gradient(module, lambda: self.keep_subspace(module))
        else:
            self.keep_subspace(module)

    def keep_subspace(self, module: RunView) -> None:
        for name, (directions, weights) in self.directions.items():
            grad = module.adapter[name].delta_s.grad
            assert grad is not None  # the step's backward reached every knob
            grad.copy_(kept_part(grad, directions.to(grad), weights.to(grad)))


def kept_part(grad: Tensor, directions: Tensor, weights: Tensor) -> Tensor:
    """Cᵀ diag(w) C g: the gradient (r,) within the subspace C (K, r), each direction's component weighted."""
    return directions.T @ (weights * (directions @ grad))


def removed(grad: dict[str, Tensor], directions: dict[str, tuple[Tensor, Tensor]]) -> float:
    """The share of the gradient's norm, over every module, that keeping only `directions` removes."""
    return removed_share(grad, {n: kept_part(g, *directions[n]) if n in directions else g for n, g in grad.items()})


def clean_directions(grads: dict[str, Tensor], k: int, weighting: Weighting) -> dict[str, tuple[Tensor, Tensor]]:
    """Per module: the top-k right singular vectors of its clean gradients (n, r), and their weights."""
    out = {}
    for name, g in sorted(grads.items()):
        _, sigma, vh = torch.linalg.svd(g.double(), full_matrices=False)
        kept = min(k, len(sigma))
        weights = sigma[:kept] / sigma[0].clamp(min=torch.finfo(torch.float64).tiny)
        if weighting == "uniform":
            weights = torch.ones_like(weights)
        out[name] = (vh[:kept].float().contiguous(), weights.float())
    return out


def random_directions(like: dict[str, tuple[Tensor, Tensor]], seed: int,
                      scale: float = 1.0) -> dict[str, tuple[Tensor, Tensor]]:
    """The placebo: round(scale · K) random orthonormal directions per module (scale 1: as many as `like`; a larger
    scale holds a smaller one's), with `like`'s weights stretched over them."""
    return random_rows_like(like, seed, scale)
