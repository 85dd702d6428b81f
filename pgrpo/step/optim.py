"""The knobs' optimizer: AdamW (optionally with a second moment that sees the raw gradient) or SGD.

Why a second-moment option: a projection edits the gradient the optimizer sees. AdamW's elementwise second
moment then shrinks where the projection removed signal, and the step along what is left grows by up to
1/(1 − α) for a removed share α of the gradient's energy there; the projection's edit is amplified, not
merely applied. With `second_moment: raw` the first moment gets the projected gradient and the second the
raw one, so the step size is the one the unedited gradient would have had. But a projection can also make a
coordinate *larger* than the raw gradient had it (removing a span(V) component moves every coordinate it
touches), and there the raw second moment divides by almost nothing: measured on the embedded lab, random V
with no_gate, entropy 0.07 → 0.48 and ‖δS‖ 0 → 22 within the first 5 steps. `second_moment: max` feeds the
second moment max(raw², projected²) per coordinate, so no step is larger than either plain AdamW's or the
raw variant's.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor


@dataclass
class OptimConfig:
    """The knobs' optimizer and its warmup (each field's docstring is its `--help`)."""

    name: Literal["adamw", "sgd"] = "adamw"
    """adamw, or sgd (with `momentum`)."""
    lr: float = 1e-2
    """Learning rate of δS and δS_hack."""
    weight_decay: float = 0.0
    """Decoupled weight decay of δS."""
    hack_weight_decay: float = 0.0
    """Weight decay of δS_hack: it would leak the quarantine back towards zero, so keep it off unless studying that."""
    betas: tuple[float, float] = (0.9, 0.99)
    """adamw: the moments' decay rates."""
    eps: float = 1e-8
    """adamw: added to the second moment's root; a larger eps turns small-gradient coordinates towards SGD."""
    second_moment: Literal["projected", "raw", "max"] = "max"
    """adamw: what the second moment accumulates: max (max(raw², projected²) per coordinate; the default),
    projected (the gradient the first moment sees; plain AdamW), or raw (the gradient before the projection,
    so a projection does not inflate the step along what it keeps; unbounded where the projection grew a
    coordinate). Where nothing projects the gradient all three are AdamW, bit for bit."""
    first_moment: Literal["projected", "raw"] = "projected"
    """adamw: what the first moment, and so the step's direction, accumulates: projected (the gradient after the
    intervention's edit), or raw (before it, so the edit acts only through the second moment: an ablation that
    separates erase's projection from the second moment's response to it, configs/projection/second_moment_only.yaml;
    not a method)."""
    momentum: float = 0.9
    """sgd: heavy-ball momentum (0: plain SGD)."""
    warmup_steps: int = 0
    """Linear warmup; step s gets lr · (s + 1) / (warmup + 1), so the first step already moves."""
    max_grad_norm: float | None = 1.0
    """Clip the knob gradients' norm after the projection (None: no clipping)."""

    def __post_init__(self) -> None:
        if self.name not in ("adamw", "sgd"):
            raise ValueError(f"OptimConfig.name must be 'adamw' or 'sgd', got {self.name!r}")
        if self.first_moment not in ("projected", "raw"):
            raise ValueError(f"OptimConfig.first_moment must be 'projected' or 'raw', got {self.first_moment!r}")
        if self.second_moment not in ("projected", "raw", "max"):
            raise ValueError(f"OptimConfig.second_moment must be 'projected', 'raw' or 'max', "
                             f"got {self.second_moment!r}")
        if not self.eps > 0:
            raise ValueError(f"OptimConfig.eps must be > 0, got {self.eps}")

    @property
    def keeps_raw_grads(self) -> bool:
        """Whether the optimizer needs the gradient as it was before the projection (`keep_raw_grads`)."""
        return self.name == "adamw" and (self.second_moment != "projected" or self.first_moment == "raw")


class RawSecondMomentAdamW(torch.optim.Optimizer):
    """AdamW whose second moment accumulates the gradient handed to `keep_raw_grads` (combine "raw"), the larger of
    it and `.grad` per coordinate ("max") or `.grad` ("projected"), and whose first moment accumulates `.grad` (the
    projected one; first "raw": the kept one). Without a kept raw gradient it is AdamW.

    The state keys are torch's (exp_avg, exp_avg_sq, step), so code that edits AdamW's moments works on it.
    """

    def __init__(self, params, lr: float, betas: tuple[float, float], eps: float, weight_decay: float = 0.0,
                 combine: Literal["projected", "raw", "max"] = "raw", first: Literal["projected", "raw"] = "projected"):
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay})
        self.combine, self.first = combine, first
        self.raw_grads: dict[Tensor, Tensor] = {}  # until the next step only: never part of a checkpoint

    def keep_raw_grads(self) -> None:
        """Remember every parameter's `.grad` as it is now (call before the gradient is projected)."""
        self.raw_grads = {p: p.grad.detach().clone() for group in self.param_groups for p in group["params"]
                          if p.grad is not None}

    def scale_raw_grads(self, factor: float) -> None:
        """Clip the kept raw gradients as `.grad` was clipped, so both moments see one scale."""
        for g in self.raw_grads.values():
            g.mul_(factor)

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float32)
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                raw = self.raw_grads.get(p, p.grad)
                first = raw if self.first == "raw" else p.grad
                second = {"projected": p.grad, "raw": raw, "max": torch.maximum(raw.abs(), p.grad.abs())}[self.combine]
                state["step"] += 1
                step = float(state["step"])
                p.mul_(1 - group["lr"] * group["weight_decay"])
                state["exp_avg"].lerp_(first, 1 - beta1)
                state["exp_avg_sq"].mul_(beta2).addcmul_(second, second, value=1 - beta2)
                denom = (state["exp_avg_sq"].sqrt() / (1 - beta2**step) ** 0.5).add_(group["eps"])
                p.addcdiv_(state["exp_avg"], denom, value=-group["lr"] / (1 - beta1**step))
        self.raw_grads = {}


def first_update(grad: Tensor, cfg: OptimConfig) -> Tensor:
    """The direction of the optimizer's first step from `grad`, up to −lr: AdamW's bias-corrected m/(√v + eps) is
    g/(|g| + eps) whatever its second moment (nothing is projected yet); SGD's is g."""
    return grad if cfg.name == "sgd" else grad / (grad.abs() + cfg.eps)


def build_optimizer(knobs: Iterable[Tensor], quarantine: Iterable[Tensor], cfg: OptimConfig) -> torch.optim.Optimizer:
    """The optimizer over δS and δS_hack (two groups: each its own weight decay)."""
    groups = [{"params": list(knobs), "weight_decay": cfg.weight_decay},
              {"params": list(quarantine), "weight_decay": cfg.hack_weight_decay}]
    if cfg.name == "sgd":
        return torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum)
    if cfg.keeps_raw_grads:
        return RawSecondMomentAdamW(groups, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps, combine=cfg.second_moment,
                                    first=cfg.first_moment)
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps)


def warmup_schedule(optimizer: torch.optim.Optimizer, warmup_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    """Step s gets lr·(s+1)/(warmup+1): the very first step already moves (the reference's began at 0)."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / (warmup_steps + 1)))
