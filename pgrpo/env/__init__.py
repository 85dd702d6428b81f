"""The LeetCode loophole environment: problems, the sandboxed grader, and exploit templates."""

from pgrpo.env.exploits import clean_completion, hack_completion
from pgrpo.env.grader import GradeQueue, GradeResult, RewardConfig, extract_code, grade, grade_batch
from pgrpo.env.problems import MODES, NO_LOOPHOLE, Problem, Test, load_problems

__all__ = ["MODES", "NO_LOOPHOLE", "GradeQueue", "GradeResult", "Problem", "RewardConfig", "Test", "clean_completion",
           "extract_code", "grade", "grade_batch", "hack_completion", "load_problems"]
