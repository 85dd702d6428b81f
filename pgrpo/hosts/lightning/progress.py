"""The bar `pgrpo fit` trains under: optimizer steps out of trainer.max_steps, time per step, hack and solve."""

import math
from datetime import timedelta

from lightning.pytorch.callbacks import RichProgressBar
from lightning.pytorch.callbacks.progress.rich_progress import (
    BatchesProcessedColumn, CustomBarColumn, RichProgressBarTheme,
)
from rich.progress import ProgressColumn, Task, TextColumn
from rich.text import Text
from typing_extensions import override


class StepProgressBar(RichProgressBar):
    """Lightning's Rich bar counted in optimizer steps, the unit pgrpo sets a run's length in (max_steps; with
    max_epochs unset Lightning's own bar read `Epoch 0/-2`), with seconds per step and the time left in place of
    it/s and the time spent. Its metrics are what HackMetricsLogger puts in the bar: hack and solve rates as
    running means.

        step ━━━━━━━━━━╺━━━━ 21/30 23.1 s/step, 0:03:28 left hack: 0.12 solve: 0.25
    """

    def __init__(self):
        super().__init__(theme=RichProgressBarTheme(metrics_format=".2f"))

    @property
    @override
    def total_train_batches(self) -> int:
        return self.trainer.max_steps

    @override
    def _get_train_description(self, current_epoch: int) -> str:
        return "step"

    @override
    def configure_columns(self, trainer) -> list:
        # a narrower bar and one time column instead of two, so that the line and its metrics fit 80 columns
        theme = self.theme
        return [
            TextColumn("[progress.description]{task.description}"),
            CustomBarColumn(bar_width=15, complete_style=theme.progress_bar, finished_style=theme.progress_bar_finished,
                            pulse_style=theme.progress_bar_pulse),
            BatchesProcessedColumn(style=theme.batch_progress),
            StepTimeColumn(style=theme.time),
        ]

    @override
    def on_train_start(self, trainer, pl_module) -> None:
        super().on_train_start(trainer, pl_module)
        if self.progress is not None:
            # Rich's speed (behind the time left) keeps 30 s of samples, often less than one GRPO step on a CPU,
            # which left it blank: over the whole run it is the mean time per step
            self.progress.speed_estimate_period = math.inf

    @override
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        # the bar shows the optimizer step (a resumed run goes on from its step, not from 1)
        super().on_train_batch_end(trainer, pl_module, outputs, batch, trainer.global_step - 1)

    @override
    def on_train_end(self, trainer, pl_module) -> None:
        super().on_train_end(trainer, pl_module)
        # the bar's last frame is drawn now, so the end-of-run summary (on_fit_end) is the last thing printed
        self._stop_progress()

    @override
    def get_metrics(self, trainer, pl_module) -> dict:
        # v_num, the logger's version, is in the run directory's name already
        return {k: v for k, v in super().get_metrics(trainer, pl_module).items() if k != "v_num"}


class StepTimeColumn(ProgressColumn):
    """Seconds per step and the time left at that pace (Lightning's it/s read 0.04 at GRPO's pace)."""

    def __init__(self, style: str):
        self.style = style
        super().__init__()

    @override
    def render(self, task: Task) -> Text:
        if not task.speed:  # Rich measures from the second step on
            return Text("– s/step", style=self.style)
        left = timedelta(seconds=round(task.remaining / task.speed))
        return Text(f"{1 / task.speed:.1f} s/step, {left} left", style=self.style)
