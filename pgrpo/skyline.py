"""The field's ground-truth interventions: oracle skylines that bound what a method could reach, never methods.

rl-rewardhacking measured two: screening (exploited rollouts get zero advantage
and leave their group's statistics) and a penalty (their reward is lowered).
Both read `exploited`, the oracle's verdict, so this module is the one place
where the oracle may reach a reward or an advantage, and only when
`model.skyline.kind` asks for it (configs/gt_screen.yaml, configs/gt_penalty.yaml).
Teacher rows carry the oracle's labels from when the pool was graded and are
screened or penalised like the student's.
"""

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

Kind = Literal["none", "screen", "penalty"]


@dataclass(frozen=True)
class SkylineConfig:
    """A ground-truth intervention (each field's docstring is its `--help`); reported as an oracle skyline."""

    kind: Kind = "none"
    """none: the flawed grader alone pays; screen: exploited rollouts get zero advantage and are left out of
    their group's mean and std; penalty: `penalty` is subtracted from an exploited rollout's reward."""
    penalty: float = 1.0
    """What an exploited rollout loses under kind penalty (the pass reward by default, so a hack pays no more
    than a well-formed failure)."""

    def __post_init__(self) -> None:
        if self.kind not in ("none", "screen", "penalty"):
            raise ValueError(f"model.skyline.kind={self.kind!r}: expected none, screen or penalty")
        if self.penalty < 0:
            raise ValueError(f"model.skyline.penalty={self.penalty}: must be >= 0 (it is subtracted)")


def apply_skyline(rewards: Tensor, exploited: Tensor, cfg: SkylineConfig) -> tuple[Tensor, Tensor | None]:
    """(rewards (P, G), which rows enter the group statistics (P, G) bool, or None for all).

    `exploited` (P, G) is the oracle's verdict; under kind none it is not read at all.
    """
    if cfg.kind == "none":
        return rewards, None
    exploited = exploited.to(torch.bool)
    if cfg.kind == "penalty":
        return rewards - cfg.penalty * exploited.to(rewards.dtype), None
    return rewards, ~exploited
