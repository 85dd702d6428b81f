"""2 CPU processes (gloo) train the knobs exactly as one process does on the same global batch, under Lightning
DDP and under FSDP (pgrpo.hosts.lightning.strategy.ShardedBaseStrategy: the frozen base, U and Vh sharded, the
knobs replicated).

The student samples are scripted (a hack, a clean solution and a non-answer per prompt, graded by rule), so
both runs see the same rows and only the distribution differs. Run as a script, this file is one training
run (Lightning's launcher re-executes it for rank 1): `python tests/hosts/lightning/test_ddp.py OUT DEVICES STRATEGY`.
"""

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.strategies import DDPStrategy
from torch.distributed.tensor import DTensor

from pgrpo.directions.activations import pair_states
from pgrpo.hosts.lightning.callbacks import HackMetricsLogger
from pgrpo.hosts.lightning.data import GRPODataModule
from pgrpo.step.batch import PromptGroup
from pgrpo.env import GradeResult
from pgrpo.step.batch import Samples
from pgrpo.step.generation import GenerationConfig, Grading, HFSampler
from pgrpo.interventions import Erase
from pgrpo.hosts.lightning.strategy import ShardedBaseStrategy
from scripted import KINDS, ScriptedStudents

STEPS = 3
PROMPTS_PER_STEP = 2  # global: one prompt per rank under DDP


class ScriptedGRPO(ScriptedStudents):
    """Deterministic students and grades; records the gradient each rank's projection sees."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.seen: list[dict] = []
        self.engine.project = self.recorded_projection(self.engine.project)

    def grade(self, groups: list[PromptGroup], students: Samples) -> list[GradeResult]:
        grades = []
        for grp in groups:
            # some groups carry no signal (every row gets the teacher row's reward), so a rank can be left with no
            # live rows while another has some: it must still take part in the all-reduce and, sharded, in FSDP's
            # all-gathers
            silent = hashlib.sha256(f"{grp.problem.id}:{self.global_step}".encode()).digest()[0] % 4 == 0
            # (the base groups a placebo is calibrated on have no teacher row: silent, every row gets 1.25)
            silent_reward = grp.teacher[0].reward if grp.teacher else 1.25
            for kind in KINDS:
                answered = kind != "no answer"
                reward = silent_reward if silent else 1.25 if answered else 0.0
                grades.append(GradeResult(
                    reward=reward, passed=answered, gt_correct=kind == "clean",
                    exploited=kind == "hack", mechanism=None, format_ok=answered, loophole_code=(),
                    stub_passes=False, bogus_own_tests=False, attempted=kind == "hack", mode=grp.problem.mode,
                    timed_out=False, error=None))
        return grades

    def recorded_projection(self, project):
        def recorded(step_grads, ro, optimizer=None):
            grads = {n: m.delta_s.grad.clone() for n, m in self.adapter.items() if m.delta_s.grad is not None}
            stats = project(step_grads, ro, optimizer)
            self.seen.append({"grads": grads, "student_share": stats.get("hackward_share/student"),
                              "live_groups": int((~ro.zero_std).sum())})
            return stats
        return recorded


def make_strategy(name: str, devices: int):
    if name == "ddp":
        return DDPStrategy(process_group_backend="gloo", forward_sync_buffers=False)
    return ShardedBaseStrategy(process_group_backend="gloo")


def train(out: Path, devices: int, strategy_name: str = "ddp") -> None:
    """One run; every rank saves what its projection saw, rank 0 also the final knobs."""
    L.seed_everything(0)
    module = ScriptedGRPO(intervention=Erase(), generation=GenerationConfig(max_new_tokens=64))
    data = GRPODataModule(group_size=len(KINDS) + 1, mix_ratio=0.25, prompts_per_step=PROMPTS_PER_STEP)
    strategy = make_strategy(strategy_name, devices) if devices > 1 else "auto"
    trainer = L.Trainer(accelerator="cpu", devices=devices, strategy=strategy, max_steps=STEPS,
                        use_distributed_sampler=False, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[HackMetricsLogger()])  # its metrics are gathered over the ranks every step
    trainer.fit(module, datamodule=data)
    torch.save(module.seen, out / f"seen_rank{trainer.global_rank}.pt")
    # what an activation detector (probe_penalty, adv_shortcut) reads: the same states sharded or not
    hack, _ = pair_states(module.policy, module.adapter, module.tokenizer, module.extraction_pairs()[:4])
    torch.save(hack, out / f"pair_states_rank{trainer.global_rank}.pt")
    if strategy_name == "fsdp" and devices > 1:
        check_sharded_generation(module, data, trainer.global_rank, devices, out)
    if trainer.global_rank == 0:
        torch.save({n: m.delta_s.detach().clone() for n, m in module.adapter.items()}, out / "knobs.pt")


def check_sharded_generation(module: ScriptedGRPO, data: GRPODataModule, rank: int, world: int, out: Path) -> None:
    """The base, U and Vh are sharded and the knobs are not; real sampling runs through the sharded model, and
    ranks that stop early (a shorter budget here) keep stepping until the last has finished instead of hanging."""
    for m in module.adapter.values():
        for full in (m.base.weight, m.U, m.Vh):
            assert isinstance(full, DTensor) and full.to_local().shape[0] == -(-full.shape[0] // world)
        assert not isinstance(m.delta_s, DTensor) and not isinstance(m.delta_s_hack, DTensor)
    budget = 4 + 12 * rank
    sampler = HFSampler(module.policy, module.adapter, module.tokenizer, GenerationConfig(max_new_tokens=budget),
                        Grading())  # the real sampler, not the scripted one
    groups = data.batch(0)
    students = sampler.sample(groups)
    students.grading.close()  # only the sampling is under test
    assert len(students.completions) == len(groups) * groups[0].n_student
    assert all(1 <= len(c) <= budget for c in students.completions)
    torch.save([len(c) for c in students.completions], out / f"generated_rank{rank}.pt")
    torch.distributed.barrier()  # rank 0 is the process the test sees: it must not exit before rank 1 is done


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_two_processes_equal_one_process_on_the_same_global_batch(strategy, tmp_path):
    single, ddp = tmp_path / "single", tmp_path / strategy
    single.mkdir()
    ddp.mkdir()
    # one thread everywhere: CPU matmuls sum in a thread-count-dependent order (~1e-4 relative apart here)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        train(single, devices=1)  # also builds what both runs share (model, pool) before two processes race
    finally:
        torch.set_num_threads(threads)
    subprocess.run([sys.executable, __file__, str(ddp), "2", strategy], check=True, timeout=600,
                   env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(sys.path)})

    one = torch.load(single / "seen_rank0.pt")
    ranks = [torch.load(ddp / f"seen_rank{r}.pt") for r in (0, 1)]
    assert len(one) == len(ranks[0]) == len(ranks[1]) == STEPS
    # the scripted silent groups left one rank without live rows while the other had some, at least once
    assert any({ranks[0][step]["live_groups"], ranks[1][step]["live_groups"]} == {0, 1} for step in range(STEPS))
    for step in range(STEPS):
        # both ranks project the same, all-reduced gradient: the one-process gradient of the global batch
        for name, grad in one[step]["grads"].items():
            assert torch.equal(ranks[0][step]["grads"][name], ranks[1][step]["grads"][name])
            assert (ranks[0][step]["grads"][name] - grad).norm() <= 1e-5 * grad.norm()
        # and the student/teacher split diagnostics are of the global batch too
        assert ranks[0][step]["student_share"] == ranks[1][step]["student_share"]
        assert abs(ranks[0][step]["student_share"] - one[step]["student_share"]) < 1e-4
    if strategy == "fsdp":
        assert all((ddp / f"generated_rank{r}.pt").exists() for r in (0, 1))
    for r in (0, 1):
        torch.testing.assert_close(torch.load(ddp / f"pair_states_rank{r}.pt"),
                                   torch.load(single / "pair_states_rank0.pt"), rtol=1e-4, atol=1e-5)
    knobs_one, knobs_ddp = torch.load(single / "knobs.pt"), torch.load(ddp / "knobs.pt")
    assert any(k.abs().sum() > 0 for k in knobs_one.values())
    # Adam divides each element by its own gradient scale, so an element whose gradient is ~0 in both runs
    # can move by up to lr in either: the bound is 1% of one step (lr = 1e-2), not fp32 rounding
    for name in knobs_one:
        torch.testing.assert_close(knobs_ddp[name], knobs_one[name], rtol=1e-4, atol=1e-4)


if __name__ == "__main__":
    train(Path(sys.argv[1]), devices=int(sys.argv[2]), strategy_name=sys.argv[3])
