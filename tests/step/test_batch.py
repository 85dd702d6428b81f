"""A step's rows: each group's student rows then its teacher rows, with the rewards and verdicts they came with, and
the prompt units that keep the student/teacher split of the gradient exact."""

import torch

from pgrpo.step.batch import Samples, lay_out
from pgrpo.step.batch import PromptGroup
from pgrpo.env import GradeResult, load_problems
from pgrpo.env.pool import TeacherRow
from pgrpo.model.load import load_tokenizer


def _grade(reward: float, exploited: bool) -> GradeResult:
    return GradeResult(reward=reward, passed=reward > 1, gt_correct=not exploited, exploited=exploited, mechanism=None,
                       format_ok=True, loophole_code=(), stub_passes=False, bogus_own_tests=False, attempted=exploited,
                       mode="run_tests", timed_out=False, error=None)


def _teacher(problem, reward: float, exploited: bool) -> TeacherRow:
    return TeacherRow(problem.id, problem.fingerprint, problem.mode, "hack", [], "return 1", reward, True,
                      not exploited, exploited, True)


def _step(sampler_logp=None):
    problems = load_problems()[:2]
    groups = [PromptGroup(p, "prompt", [_teacher(p, 1.25, exploited=i == 0)], 2) for i, p in enumerate(problems)]
    students = Samples([[5, 6, 7]] * 2 + [[5, 8]] * 2, [[9, 10], [11], [12, 13, 14], [15]], [False] * 4,
                       ["x"] * 4, sampler_logp=sampler_logp)
    grades = [_grade(1.25, True), _grade(0.25, False), _grade(0.0, False), _grade(1.25, False)]
    return groups, students, grades


def test_each_group_lays_out_its_student_rows_then_its_teacher_rows_with_their_own_rewards_and_verdicts():
    tokenizer = load_tokenizer("embedded")
    rows = lay_out(*_step(), tokenizer, share_prompts=True)
    assert rows.is_student.tolist() == [True, True, False, True, True, False]
    assert rows.exploited.tolist() == [True, False, True, False, False, False]
    assert rows.rewards.tolist() == [[1.25, 0.25, 1.25], [0.0, 1.25, 1.25]]  # (P, G): the teacher's as stored
    # a group's students share one prompt unit and its teacher rows another: the split stays exact
    assert rows.packed.prompt_of_row.tolist() == [0, 0, 1, 2, 2, 3]
    teacher_ids = tokenizer("return 1", add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    assert rows.packed.completion_mask[2].sum() == len(teacher_ids)
    assert rows.sampler_logp is None


def test_rows_keep_their_own_prompts_unless_shared_and_the_samplers_logprobs_sit_on_student_tokens_only():
    tokenizer = load_tokenizer("embedded")
    rows = lay_out(*_step(sampler_logp=[[-0.5, -0.25], [-1.0], [-0.1, -0.2, -0.3], [-2.0]]), tokenizer,
                   share_prompts=False)
    assert rows.packed.prompt_of_row is None
    expected = torch.zeros(rows.packed.completion_mask.shape)
    for row, logp in zip((0, 1, 3, 4), ([-0.5, -0.25], [-1.0], [-0.1, -0.2, -0.3], [-2.0])):
        expected[row, : len(logp)] = torch.tensor(logp)
    torch.testing.assert_close(rows.sampler_logp, expected)
