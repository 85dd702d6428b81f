"""The no-cheat test, for every intervention in pgrpo/interventions/: one that does not declare reads_oracle trains
exactly the same knobs when the oracle's labels are scrambled, and one that does (an oracle skyline) does not.

The labels are the strict oracle's verdicts (gt_correct, exploited) on the student rows and the pool's stored
ones on the teacher rows; the rewards, which the flawed grader alone pays, stay as they are. The students are
scripted (a hack, a clean solution and a non-answer per prompt), so both runs see the same rows.
"""

import hashlib
import importlib
import inspect
import pkgutil
from dataclasses import replace

import lightning as L
import pytest
import torch

import pgrpo.directions.calibration
import pgrpo.interventions
from pgrpo.step.batch import Samples
from pgrpo.hosts.lightning.data import GRPODataModule
from pgrpo.step.batch import PromptGroup
from pgrpo.env import GradeResult
from pgrpo.interventions import Intervention
from pgrpo.step.generation import GenerationConfig
from scripted import KINDS, ScriptedStudents



def interventions() -> list[type[Intervention]]:
    """Every concrete Intervention class defined under pgrpo/interventions/ (a new file is picked up by itself)."""
    found = {}
    for info in pkgutil.iter_modules(pgrpo.interventions.__path__):
        module = importlib.import_module(f"pgrpo.interventions.{info.name}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, Intervention) and cls.__module__ == module.__name__ and not inspect.isabstract(cls):
                found[cls.__qualname__] = cls
    return [found[name] for name in sorted(found)]


def scrambled(key: str, label: bool, scramble: bool) -> bool:
    """The label, or a coin flip drawn from the row's key: labels that no longer follow the completions."""
    return hashlib.sha256(key.encode()).digest()[0] % 2 == 1 if scramble else label


class ScriptedGRPO(ScriptedStudents):
    """Scripted students graded by rule; the oracle's labels scrambled when `scramble`."""

    def __init__(self, scramble: bool, **kwargs):
        super().__init__(**kwargs)
        self.scramble = scramble
        self.engine.assemble = self.scrambled_teacher(self.engine.assemble)

    def grade(self, groups: list[PromptGroup], students: Samples) -> list[GradeResult]:
        grades = []
        for grp in groups:
            for kind in KINDS:
                answered = kind != "no answer"
                key = f"{grp.problem.id}:{self.global_step}:{kind}"
                exploited = scrambled(key, kind == "hack", self.scramble)
                grades.append(GradeResult(
                    reward=1.25 if answered else 0.0, passed=answered, gt_correct=answered and not exploited,
                    exploited=exploited, mechanism=None, format_ok=answered, loophole_code=(), stub_passes=False,
                    bogus_own_tests=False, attempted=exploited, mode=grp.problem.mode, timed_out=False, error=None))
        return grades

    def scrambled_teacher(self, assemble):
        """The step's assembly with the teacher rows' oracle labels scrambled too."""
        def scrambled_assemble(groups, students, grades):
            groups = [replace(grp, teacher=[replace(row, exploited=(e := scrambled(f"{grp.problem.id}:{i}",
                                                                                   row.exploited, self.scramble)),
                                                    gt_correct=row.passed and not e)
                                            for i, row in enumerate(grp.teacher)]) for grp in groups]
            return assemble(groups, students, grades)
        return scrambled_assemble


def trained_knobs(intervention: Intervention, scramble: bool) -> dict[str, torch.Tensor]:
    L.seed_everything(0, verbose=False)
    # share_prompts off and beta 0: the settings under which every intervention (adv_gate included) runs
    module = ScriptedGRPO(scramble, intervention=intervention, share_prompts=False,
                          generation=GenerationConfig(max_new_tokens=64))
    data = GRPODataModule(group_size=len(KINDS) + 1, mix_ratio=0.25, prompts_per_step=2)
    trainer = L.Trainer(accelerator="cpu", max_steps=2, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(module, datamodule=data)
    return {f"{n}.{k}": getattr(m, k).detach().clone() for n, m in module.adapter.items()
            for k in ("delta_s", "delta_s_hack")}


@pytest.fixture(autouse=True)
def few_calibration_rollouts(monkeypatch):
    # what an arm measures on the base policy before its first step (a start rate, a placebo's strength) reads no
    # label; 12 rollouts instead of 128 leave the comparison as it is and take a quarter of the time
    monkeypatch.setattr(pgrpo.directions.calibration, "ROLLOUTS", 12)


@pytest.mark.parametrize("cls", interventions(), ids=lambda cls: cls.__qualname__)
def test_only_an_intervention_that_declares_it_reads_the_oracles_labels_is_moved_by_them(cls):
    intervention = cls()
    honest, scrambled_run = trained_knobs(intervention, False), trained_knobs(intervention, True)
    same = all(torch.equal(honest[k], scrambled_run[k]) for k in honest)
    assert any(v.abs().sum() > 0 for v in honest.values())  # it trained at all
    if cls.reads_oracle:
        assert not same, f"{cls.__qualname__} declares reads_oracle but its training ignores the labels"
    else:
        assert same, f"{cls.__qualname__} does not declare reads_oracle, yet the oracle's labels changed its knobs"
