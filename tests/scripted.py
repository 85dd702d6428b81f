"""Scripted students, for tests in which two runs must see the same rows: per prompt a hack of its loophole, a clean
solution and a non-answer, in that order (KINDS), and a seeded random V instead of an extracted one. Each test's
subclass grades them by its own rule."""

from collections.abc import Callable
from dataclasses import dataclass

import torch

from pgrpo.step.batch import Samples
from pgrpo.step.batch import PromptGroup
from pgrpo.env import GradeResult
from pgrpo.env.exploits import clean_completion, hack_completion
from pgrpo.directions.extraction import HackBasis, random_basis_like
from pgrpo.step.generation import Sampler
from pgrpo.hosts.lightning.module import ProjectedGRPO

KINDS = ("hack", "clean", "no answer")  # the scripted student rows of every prompt, in this order


class ScriptedStudents(ProjectedGRPO):
    """ProjectedGRPO whose students are the scripted rows (graded by the subclass's `grade`) and whose V is random
    (seed 0): no extraction."""

    def on_fit_start(self) -> None:
        shapes = HackBasis({n: torch.zeros(2, m.rank) for n, m in self.adapter.items()},
                           {n: torch.ones(2) for n in self.adapter})
        self.basis = random_basis_like(shapes, seed=0)  # V only has to be the same in both runs
        super().on_fit_start()

    def configure_model(self) -> None:
        super().configure_model()
        self.sampler = ScriptedSampler(self.policy, self.adapter, self.tokenizer, self.generation, self.sampler.grading,
                                       graded_by=self.grade)


@dataclass
class ScriptedSampler(Sampler):
    """The scripted rows of every group, graded by `graded_by` (the test's rule)."""

    graded_by: Callable[[list[PromptGroup], Samples], list[GradeResult]] | None = None

    def sample(self, groups: list[PromptGroup]) -> Samples:
        texts = [text for grp in groups for text in (hack_completion(grp.problem, grp.problem.mode),
                                                      clean_completion(grp.problem), "I am not sure.")]
        eos = self.tokenizer.eos_token_id
        prompt_ids = [self.tokenizer(grp.prompt, add_special_tokens=False)["input_ids"] for grp in groups]
        return Samples([ids for ids in prompt_ids for _ in KINDS],
                       [self.tokenizer(t, add_special_tokens=False)["input_ids"] + [eos] for t in texts],
                       [False] * len(texts), texts)

    def grade(self, groups: list[PromptGroup], samples: Samples) -> list[GradeResult]:
        return self.graded_by(groups, samples)
