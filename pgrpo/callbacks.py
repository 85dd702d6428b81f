"""Callbacks that turn each step's numbers into TensorBoard curves and text."""

import lightning as L
from lightning.pytorch.loggers import TensorBoardLogger

# shown in the progress bar; everything else goes to the loggers only
PROGRESS_KEYS = ("hack/student", "solve/student", "reward", "proj/cin")


class HackMetricsLogger(L.Callback):
    """Logs every number the step returned (hack/solve rates, reward, kl, proj/*, adapter/*, time/*)."""

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        metrics = outputs["metrics"]
        pl_module.log_dict({k: v for k, v in metrics.items() if k in PROGRESS_KEYS}, prog_bar=True, on_step=True,
                           on_epoch=False, batch_size=1)
        pl_module.log_dict({k: v for k, v in metrics.items() if k not in PROGRESS_KEYS}, on_step=True,
                           on_epoch=False, batch_size=1)


class CompletionSamples(L.Callback):
    """Every `every_n_steps`, a few student completions with their grades as TensorBoard text."""

    def __init__(self, every_n_steps: int = 10):
        self.every_n_steps = every_n_steps

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if self.every_n_steps <= 0 or (step - 1) % self.every_n_steps:
            return
        text = "\n\n".join(format_sample(s) for s in outputs["samples"])
        for logger in trainer.loggers:
            if isinstance(logger, TensorBoardLogger):
                logger.experiment.add_text("samples", text, step)


def format_sample(sample: dict) -> str:
    flags = ", ".join(f"{k}={sample[k]}" for k in ("reward", "passed", "gt_correct", "exploited", "mechanism"))
    # four-space indent renders the completion verbatim in TensorBoard's markdown
    body = "\n".join("    " + line for line in sample["completion"].splitlines()) or "    (empty)"
    return f"**problem {sample['problem']}** (mode `{sample['mode']}`): {flags}\n\n{body}"
