"""One step's knob gradient taken apart by where it came from: each row's part and each shared prompt's."""

from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor


@dataclass
class StepGrads:
    """One step's knob gradient, taken apart by where it came from (the rows sum to delta_s.grad).

    With shared prompts (`share_prompts`) a prompt's forward serves all its group's rows of one role, so
    the gradient that reaches the knobs through the prompt is that unit's, not any one row's: a row's own
    part is then what reaches the knobs through its completion's tokens, and each shared prompt's part
    stands beside the rows. The student / teacher split stays exact (no prompt is shared across roles).
    """

    rows: dict[str, Tensor]  # (B, r) per module: each row's own part; skipped rows are zero
    prompts: dict[str, Tensor]  # (U, r) per module: each shared prompt's part (U = 0 without sharing)
    prompt_is_student: Tensor  # (U,) bool
    live: Tensor  # (B,) bool: the rows backpropagated (those of groups with reward variance)

    @classmethod
    def from_forwards(cls, per_forward_row: dict[str, Tensor], batches: list[Tensor], n_rows: int,
                      prompt_parts_student: list[Tensor]) -> "StepGrads":
        """Captured rows in forward order — per micro-batch (`batches`: its rows' batch positions), its shared
        prompts (if any) then its rows — sorted back into rows at their batch positions and prompts."""
        index = torch.cat(batches) if batches else torch.zeros(0, dtype=torch.long)
        rows, prompts = {}, {}
        for name, captured in per_forward_row.items():
            row_parts, prompt_parts, at = [], [], 0
            for i, batch in enumerate(batches):
                n_units = len(prompt_parts_student[i]) if prompt_parts_student else 0
                prompt_parts.append(captured[at : at + n_units])
                row_parts.append(captured[at + n_units : at + n_units + len(batch)])
                at += n_units + len(batch)
            if at != len(captured):
                raise RuntimeError(f"{name}: {len(captured)} captured rows, {at} expected from the micro-batches")
            full = captured.new_zeros(n_rows, captured.shape[1])
            if row_parts:
                full[index.to(captured.device)] = torch.cat(row_parts)
            rows[name] = full
            prompts[name] = torch.cat(prompt_parts) if prompt_parts else captured.new_zeros(0, captured.shape[1])
        device = next(iter(rows.values())).device if rows else index.device
        flags = torch.cat(prompt_parts_student) if prompt_parts_student else torch.zeros(0, dtype=torch.bool)
        live = torch.zeros(n_rows, dtype=torch.bool, device=device)
        live[index.to(device)] = True
        return cls(rows, prompts, flags.to(device), live)

    def split(self, is_student: Tensor) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        """(g_student, g_teacher) per module: (r,) sums of the student and of the teacher parts."""
        student = is_student.to(torch.bool)
        g_student = {n: r[student.to(r.device)].sum(0) + self.prompts[n][self.prompt_is_student].sum(0)
                     for n, r in self.rows.items()}
        g_teacher = {n: r[~student.to(r.device)].sum(0) + self.prompts[n][~self.prompt_is_student].sum(0)
                     for n, r in self.rows.items()}
        return g_student, g_teacher


class Backward(NamedTuple):
    """What the step's one backward leaves besides the knobs' .grad: the summed loss, the loss's statistics (row
    means) and each row's own part of the gradient."""

    loss: float
    stats: dict[str, float]
    grads: StepGrads
