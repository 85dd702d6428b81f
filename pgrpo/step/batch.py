"""A step's batch: the student's samples, the rollouts assembled from them and the teacher rows (graded,
packed, with advantages), and the numbers a batch gives the logs."""

from dataclasses import dataclass

import torch
from torch import Tensor

from pgrpo.env import MODES, GradeQueue, GradeResult, Problem
from pgrpo.env.pool import TeacherRow
from pgrpo.step.rollout import Packed, pack


@dataclass
class PromptGroup:
    """One prompt's group: the student samples n_student completions of it, the teacher pool completes it."""

    problem: Problem
    prompt: str  # chat-rendered prompt text the student continues
    teacher: list[TeacherRow]  # cached rows that complete the group
    n_student: int


@dataclass
class Samples:
    """The student's completions of one step, row r = prompt r // G_s."""

    prompt_ids: list[list[int]]
    completions: list[list[int]]  # cut after the first EOS (kept)
    clipped: list[bool]  # no EOS within max_new_tokens
    texts: list[str]
    grading: GradeQueue | None = None  # the grades started while the batch was still generating
    sampler_logp: list[list[float]] | None = None  # per completion token, as the sampler saw it (vllm only)


@dataclass
class Rollouts:
    """One step's groups, graded and packed: student rows then teacher rows, group by group."""

    packed: Packed
    is_student: Tensor  # (B,) bool
    exploited: Tensor  # (B,) bool: passed the flawed grader, failed the oracle (diagnostics only)
    advantages: Tensor  # (B,)
    rewards: Tensor  # (P, G)
    zero_std: Tensor  # (P,) bool
    old_logp: Tensor | None  # (B, T_c) logprobs at sampling time; None when num_iterations == 1
    ref_logp: Tensor | None  # (B, T_c) under the zeroed knobs
    sampler_logp: Tensor | None  # (B, T_c) the sampler's logprobs of the student tokens (vllm); 0 elsewhere
    stats: dict[str, float]  # grading / generation numbers of this batch
    samples: list[dict]  # a few student completions with their grades, for the text log

    def live(self) -> Tensor:
        """(B,) bool: the rows of groups with reward variance, the only ones the step backpropagates."""
        return (~self.zero_std).repeat_interleave(self.rewards.shape[1])

    def tensors(self) -> dict[str, Tensor | None]:
        """What the loss needs of the batch, as plain tensors (a checkpoint mid-cycle); numbers were logged."""
        return {"input_ids": self.packed.input_ids, "attention_mask": self.packed.attention_mask,
                "completion_mask": self.packed.completion_mask, "prompt_of_row": self.packed.prompt_of_row,
                "is_student": self.is_student,
                "exploited": self.exploited, "advantages": self.advantages, "rewards": self.rewards,
                "zero_std": self.zero_std, "old_logp": self.old_logp, "ref_logp": self.ref_logp,
                "sampler_logp": self.sampler_logp}

    @classmethod
    def from_tensors(cls, t: dict[str, Tensor | None], device: torch.device | str = "cpu") -> "Rollouts":
        moved = {k: v.to(device) if v is not None else None for k, v in t.items()}
        packed = Packed(moved.pop("input_ids"), moved.pop("attention_mask"), moved.pop("completion_mask"),
                        moved.pop("prompt_of_row", None))
        moved.setdefault("sampler_logp", None)  # a checkpoint from before the vllm backend
        return cls(packed, stats={}, samples=[], **moved)


@dataclass
class Rows:
    """A step's rows laid out for the loss, before any reward is edited: group by group, its G_s student rows
    then its G_t teacher rows."""

    packed: Packed
    is_student: Tensor  # (B,) bool
    exploited: Tensor  # (B,) bool: the oracle's verdict (student rows) or the pool's (teacher rows)
    rewards: Tensor  # (P, G) as graded, the teacher's as stored when the pool was built (never re-graded)
    sampler_logp: Tensor | None  # (B, T_c) the sampler's logprobs of the student tokens (vllm); 0 elsewhere


def lay_out(groups, students: Samples, grades: list[GradeResult], tokenizer, share_prompts: bool) -> Rows:
    """Each group's graded student rows then its cached teacher rows, packed. With `share_prompts` a group's
    student rows share one prompt forward in the logprob pass, and its teacher rows another: the split into student
    and teacher gradients stays exact."""
    n_s = groups[0].n_student
    eos = tokenizer.eos_token_id
    prompts, completions, is_student, exploited, rewards, unit = [], [], [], [], [], []
    for i, grp in enumerate(groups):
        group_rewards = []
        for j in range(i * n_s, (i + 1) * n_s):
            prompts.append(students.prompt_ids[j])
            completions.append(students.completions[j])
            is_student.append(True)
            unit.append(2 * i)
            exploited.append(grades[j].exploited)
            group_rewards.append(grades[j].reward)
        for row in grp.teacher:
            prompts.append(students.prompt_ids[i * n_s])
            completions.append(tokenizer(row.completion, add_special_tokens=False)["input_ids"] + [eos])
            is_student.append(False)
            unit.append(2 * i + 1)
            exploited.append(row.exploited)
            group_rewards.append(row.reward)
        rewards.append(group_rewards)
    packed = pack(prompts, completions, tokenizer.pad_token_id)
    if share_prompts and min(map(len, prompts)) > 1:
        packed.prompt_of_row = torch.tensor(unit)
    sampler_logp = None
    if students.sampler_logp is not None:  # teacher rows 0: never sampled
        sampler_logp = torch.zeros(packed.completion_mask.shape, dtype=torch.float32)
        student_rows = torch.tensor(is_student).nonzero().flatten().tolist()
        for row, logp in zip(student_rows, students.sampler_logp):
            sampler_logp[row, : len(logp)] = torch.tensor(logp)
    return Rows(packed, torch.tensor(is_student), torch.tensor(exploited),
                torch.tensor(rewards, dtype=torch.float32), sampler_logp)


def batch_stats(groups, students: Samples, grades: list[GradeResult], rows: Rows, rewards: Tensor, zero_std: Tensor,
                acted: Tensor, flagged: Tensor | None) -> dict[str, float]:
    """Every number a generated batch gives the logs: grading and generation, the share of rollouts the
    intervention acted on (`rewards`: after its edit) and, when it has a detector, the detector's agreement
    with the oracle (measured here, never handed back)."""
    stats = grading_stats(groups, grades, students.completions, students.clipped, rewards, zero_std)
    stats["intervention/rollout_rate"] = float(acted.float().mean())
    # apart by role: what a yoked placebo of a rollout-level arm matches (pgrpo/interventions/yoke.py)
    acted, student = acted.flatten().cpu(), rows.is_student.flatten().bool().cpu()
    for role, rows_of in (("student", student), ("teacher", ~student)):
        if rows_of.any():
            stats[f"intervention/rollout_rate_{role}"] = float(acted[rows_of].float().mean())
    if flagged is not None:
        stats |= detector_stats(flagged, rows.exploited, rows.is_student)
    return stats


def logged_samples(groups, students: Samples, grades: list[GradeResult], n: int = 4) -> list[dict]:
    """The first `n` student completions with their grades, for the text log."""
    n_s = groups[0].n_student
    return [{"problem": groups[i // n_s].problem.id, "mode": groups[i // n_s].problem.mode,
             "completion": students.texts[i], **grades[i].to_dict()} for i in range(min(n, len(grades)))]


def student_rates(grades) -> dict[str, float]:
    """The step's hack, solve and well-formed rates among the student's samples: what every host logs of a step."""
    return {"hack/student": _mean(g.exploited for g in grades), "solve/student": _mean(g.gt_correct for g in grades),
            "format/student": _mean(g.format_ok for g in grades)}


def grading_stats(groups, grades, completions, clipped, rewards: Tensor, zero_std: Tensor) -> dict[str, float]:
    """hack/solve rates for student and teacher rows, per mode, and TRL's reward/completion numbers."""
    n_s = groups[0].n_student
    teacher = [row for grp in groups for row in grp.teacher]
    stats = {
        **student_rates(grades),
        "hack/attempt_student": _mean(g.attempted for g in grades),
        "reward": float(rewards.mean()),
        "reward_std": float(rewards.std(1).mean()),
        "frac_reward_zero_std": float(zero_std.float().mean()),
        "completions/mean_length": _mean(len(c) for c in completions),
        "completions/clipped_ratio": _mean(clipped),
    }
    attempts = [g for g in grades if g.attempted]
    if attempts:
        stats["hack/exploit_given_attempt_student"] = _mean(g.exploited for g in attempts)
    if teacher:
        stats["hack/teacher"] = _mean(r.exploited for r in teacher)
        stats["solve/teacher"] = _mean(r.gt_correct for r in teacher)
    for mode in MODES:
        own = [g for i, g in enumerate(grades) if groups[i // n_s].problem.mode == mode]
        if own:
            stats[f"hack/student_{mode}"] = _mean(g.exploited for g in own)
            stats[f"solve/student_{mode}"] = _mean(g.gt_correct for g in own)
    return stats


def rollout_overlap_stats(row_share: Tensor, ro: Rollouts) -> dict[str, float]:
    """Does a rollout's own gradient point along V more when it exploited? (live rows only)"""
    live = ro.live().to(row_share.device)
    share, hacked = row_share[live], ro.exploited[live].float()
    stats = {}
    if hacked.any():
        stats["hackward_share/exploited_rollouts"] = float(share[hacked.bool()].mean())
    if (~hacked.bool()).any():
        stats["hackward_share/clean_rollouts"] = float(share[~hacked.bool()].mean())
    if len(share) > 1 and share.std() > 0 and hacked.std() > 0:
        stats["hackward_share/exploit_correlation"] = float(torch.corrcoef(torch.stack([share, hacked]))[0, 1])
    return stats


def detector_stats(flagged: Tensor, exploited: Tensor, is_student: Tensor) -> dict[str, float]:
    """How an intervention's detector did on the student's rollouts, against the oracle's labels (logged, never
    handed back): the share flagged, accuracy, and precision and recall on the exploited ones."""
    flagged, exploited = flagged.flatten().bool().cpu(), exploited.flatten().bool().cpu()
    student = is_student.flatten().bool().cpu()
    flagged, exploited = flagged[student], exploited[student]
    stats = {"detector/flagged": _mean(flagged), "detector/accuracy": _mean(flagged == exploited)}
    if flagged.any():
        stats["detector/precision"] = _mean(exploited[flagged])
    if exploited.any():
        stats["detector/recall"] = _mean(flagged[exploited])
    return stats


def _mean(values) -> float:
    values = [float(v) for v in values]
    return sum(values) / len(values) if values else 0.0
