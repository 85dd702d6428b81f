"""The activation detectors in a run: built at train start from the run's pairs, rebuilt identically on a resume,
and scored against the oracle on the live rollouts (logged, never fed back)."""

import copy

import lightning as L
import pytest
import torch

from pgrpo.cli import main
from pgrpo.hosts.lightning.data import GRPODataModule
from pgrpo.records.events import read_scalars
from pgrpo.interventions import ProbePenalty, reads_activations
from pgrpo.step.generation import GenerationConfig
from pgrpo.hosts.lightning.module import ProjectedGRPO
from test_cli import fast


def trained(intervention) -> ProjectedGRPO:
    L.seed_everything(0, verbose=False)
    module = ProjectedGRPO(intervention=intervention, generation=GenerationConfig(max_new_tokens=24))
    trainer = L.Trainer(accelerator="cpu", max_steps=2, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(module, datamodule=GRPODataModule(group_size=4, mix_ratio=0.25, prompts_per_step=2, modes="partition"))
    return module


@pytest.mark.parametrize("arm", ["probe_penalty", "adv_shortcut"])
def test_the_detector_is_logged_at_start_and_scored_against_the_oracle_every_step(arm, tmp_path):
    main(fast(arm, tmp_path, 2))
    scalars = read_scalars(tmp_path / arm / "version_0")
    assert scalars["detector/layer"][0][1] >= 1  # a decoder layer, not the embeddings
    assert 0.5 <= scalars["detector/heldout_accuracy"][0][1] <= 1
    assert [step for step, _ in scalars["detector/accuracy"]] == [0, 1]
    assert [step for step, _ in scalars["detector/flagged"]] == [0, 1]


def test_a_resumed_run_rebuilds_the_same_probe_from_the_base_whatever_the_knobs_learned(monkeypatch):
    said: list[str] = []  # read off the call: whether Lightning's logger reaches caplog depends on earlier tests
    monkeypatch.setattr(reads_activations, "rank_zero_info", said.append)
    module = trained(ProbePenalty(detector="random"))
    # the placebo says what it reads, lest its log line read as the real detector's
    assert any("the placebo reads a random direction there, orthogonal to the hack − clean mean difference" in line
               for line in said)
    assert any(m.delta_s.abs().sum() > 0 for m in module.adapter.values())
    before = copy.deepcopy(module.intervention.fitted)
    module.intervention.prepare(module)
    after = module.intervention.fitted
    assert torch.equal(before.weight, after.weight) and before.bias == after.bias and before.layer == after.layer

