"""2 CPU processes (gloo) on a cold V cache, under DDP and under FSDP: both ranks train with rank 0's V, bit for bit,
and the cache ends with one V and no temporary file. Run as a script, this file is one fit (Lightning's launcher
re-executes it for rank 1): `python tests/directions/test_ddp_basis.py OUT STRATEGY` with $PGRPO_CACHE set to an empty V cache."""

import os
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.strategies import DDPStrategy

from pgrpo.directions.basis import ExtractionConfig
from pgrpo.hosts.lightning.data import GRPODataModule
from pgrpo.hosts.lightning.module import ProjectedGRPO
from pgrpo.hosts.lightning.strategy import ShardedBaseStrategy



def small() -> ExtractionConfig:
    """Two modes' pairs: what is tested is who extracts and who waits, not how good V is."""
    return ExtractionConfig(n_heldout=2, batch_size=64, modes=["sentinel", "run_tests"])


class ExtractOnly(ProjectedGRPO):
    """The fit's own V extraction (on_fit_start) and steps that change nothing (no gradient: AdamW skips the knobs)."""

    def training_step(self, batch, batch_idx):
        self.optimizers().step()  # counts the step, so max_steps ends the fit


def fit(out: Path, strategy_name: str) -> None:
    L.seed_everything(0)
    strategy = (DDPStrategy(process_group_backend="gloo") if strategy_name == "ddp"
                else ShardedBaseStrategy(process_group_backend="gloo"))
    module = ExtractOnly(extraction=small(), target_modules=["q_proj", "down_proj"])
    data = GRPODataModule(mix_ratio=0.0, group_size=2, prompts_per_step=2)
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy=strategy, max_steps=1, use_distributed_sampler=False,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(module, datamodule=data)
    torch.save({n: v.cpu() for n, v in module.basis.V.items()}, out / f"V_rank{trainer.global_rank}.pt")


@pytest.mark.parametrize("strategy", ["ddp", pytest.param("fsdp", marks=pytest.mark.slow)])  # fsdp: test_ddp, by default
def test_both_ranks_train_with_rank_zeros_v_from_a_cold_cache(strategy, tmp_path, pgrpo_cache):
    from pgrpo.model.load import load_model_and_tokenizer

    load_model_and_tokenizer("embedded")  # the base is built here, once, not raced for by the two ranks
    # A cache of this test's own for V (the base and pools linked from the session's): the session's bases/ is
    # shared by every pytest-xdist worker, so another test's V could land there while this one counts files.
    cache = tmp_path / "cache"
    cache.mkdir()
    for entry in pgrpo_cache.iterdir():
        if entry.name != "bases":
            (cache / entry.name).symlink_to(entry)
    subprocess.run([sys.executable, __file__, str(tmp_path), strategy], check=True, timeout=600,
                   env={**os.environ, "OMP_NUM_THREADS": "1", "PGRPO_CACHE": str(cache)})
    ranks = [torch.load(tmp_path / f"V_rank{r}.pt") for r in (0, 1)]
    assert ranks[0].keys() == ranks[1].keys() and ranks[0]
    assert all(torch.equal(ranks[0][n], ranks[1][n]) for n in ranks[0])
    bases = cache / "bases"
    new = set(bases.iterdir())
    assert len(new) == 1 and next(iter(new)).suffix == ".safetensors"  # extracted cold, written once
    assert not [p for p in bases.iterdir() if ".tmp" in p.name]


if __name__ == "__main__":
    fit(Path(sys.argv[1]), sys.argv[2])
