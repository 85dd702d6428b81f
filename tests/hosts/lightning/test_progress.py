"""The bar `pgrpo fit` shows: steps out of max_steps, time per step and left, hack and solve as running means."""

import io
import re
from types import SimpleNamespace

import lightning as L
import pytest
from lightning.pytorch.callbacks import TQDMProgressBar
from lightning.pytorch.demos.boring_classes import BoringModel

from pgrpo.hosts.lightning.callbacks import HackMetricsLogger
from pgrpo.commands.fit import PGRPOCLI
from pgrpo.hosts.lightning.data import GRPODataModule
from pgrpo.hosts.lightning.module import ProjectedGRPO
from pgrpo.hosts.lightning.progress import StepProgressBar


class Rates(BoringModel):
    """Returns what ProjectedGRPO's training_step does for HackMetricsLogger: hack 0, .1, .2, ..., solve .25."""

    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)["loss"]
        return {"loss": loss, "metrics": {"hack/student": batch_idx / 10, "solve/student": 0.25}}


def test_the_bar_counts_steps_to_max_steps_with_their_time_and_running_means_in_80_columns():
    bar = StepProgressBar()
    bar._console_kwargs = {"force_terminal": True, "width": 80, "file": io.StringIO(), "record": True}
    trainer = L.Trainer(max_steps=7, callbacks=[HackMetricsLogger(), bar], logger=False, enable_checkpointing=False,
                        enable_model_summary=False)
    trainer.fit(Rates())
    last = re.split(r"(?=step ━)", bar._console.export_text().strip())[-1]
    # hack over the last 5 steps: (.2 + .3 + .4 + .5 + .6) / 5
    assert re.fullmatch(r"step ━{15} 7/7 \d+\.\d s/step, 0:00:00 left hack: 0\.40 solve: 0\.25", last), last


def test_the_running_means_skip_a_step_that_reused_its_batch():
    shown = []
    module = SimpleNamespace(log_dict=lambda values, **kwargs: shown.append(values))
    trainer = SimpleNamespace(world_size=1, loggers=[], global_step=1)
    metrics_logger = HackMetricsLogger()
    for metrics in ({"hack/student": 0.5, "solve/student": 0.0}, {"loss": 1.0},  # num_iterations 2: no rollout
                    {"hack/student": 0.0, "solve/student": 1.0}):
        metrics_logger.on_train_batch_end(trainer, module, {"metrics": metrics}, None, 0)
    assert shown == [{"hack": 0.5, "solve": 0.0}, {"hack": 0.5, "solve": 0.0}, {"hack": 0.25, "solve": 0.5}]


def cli_callbacks(*args: str) -> list:
    cli = PGRPOCLI(ProjectedGRPO, GRPODataModule, args=["--trainer.logger=false", *args], run=False)
    return cli.trainer.callbacks


def test_fit_trains_under_the_step_bar_after_the_metrics_it_shows():
    callbacks = cli_callbacks()
    kinds = [type(c) for c in callbacks]
    assert kinds.count(StepProgressBar) == 1
    assert kinds.index(HackMetricsLogger) < kinds.index(StepProgressBar)


@pytest.mark.parametrize("args, bar", [
    (["--trainer.enable_progress_bar=false"], None),
    (["--trainer.callbacks=TQDMProgressBar"], TQDMProgressBar),
])
def test_no_step_bar_where_the_bar_is_off_or_another_was_given(args, bar):
    bars = [c for c in cli_callbacks(*args) if isinstance(c, (StepProgressBar, TQDMProgressBar))]
    assert [type(c) for c in bars] == ([bar] if bar else [])


def test_the_bar_has_drawn_its_last_frame_before_the_end_of_run_summary_prints():
    class SummaryStandIn(L.Callback):
        def on_fit_end(self, trainer, pl_module):  # where RunSummary prints
            self.bar_stopped = bar._progress_stopped

    bar, summary = StepProgressBar(), SummaryStandIn()
    bar._console_kwargs = {"force_terminal": True, "width": 80, "file": io.StringIO()}
    trainer = L.Trainer(max_steps=2, callbacks=[HackMetricsLogger(), bar, summary], logger=False,
                        enable_checkpointing=False, enable_model_summary=False)
    trainer.fit(Rates())
    assert summary.bar_stopped
