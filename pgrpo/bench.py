"""`pgrpo bench`: where a training step's time goes, vanilla against erase, side by side in one process.

Both arms run the real `Trainer.fit` on the same model, data and seed; their
fits alternate (vanilla, erase, vanilla, erase, ...) so that load from other
processes falls on both alike, and each phase's figure is a median over every
timed step. The first step of each fit is left out (it starts the grader's
worker pool). Figures to read, not a pass/fail test.
"""

import json as jsonlib
import logging
import statistics
import time
from pathlib import Path

import lightning as L

from pgrpo.data import GRPODataModule
from pgrpo.module import GenerationConfig, ProjectedGRPO
from pgrpo.projection import ProjectionConfig

PHASES = ("generate", "grade", "assemble", "backward", "project", "optimizer")


class StepTimes(L.Callback):
    """Collects the step's own `time/<phase>` figures plus its wall time, skipping the first step."""

    def __init__(self):
        self.steps: list[dict[str, float]] = []
        self._start = 0.0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._start = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if batch_idx == 0:
            return
        metrics = outputs["metrics"]
        times = {p: metrics.get(f"time/{p}", 0.0) for p in PHASES}
        times["step"] = time.perf_counter() - self._start
        times["new_tokens"] = metrics["completions/mean_length"]
        self.steps.append(times)


def time_arm(arm: str, model: str, steps: int, seed: int, max_new_tokens: int, root: Path) -> list[dict[str, float]]:
    """One `fit` of `steps` steps under `arm` (none = vanilla); the per-step phase times after the first."""
    L.seed_everything(seed, verbose=False)
    module = ProjectedGRPO(model=model, projection=ProjectionConfig(arm=arm),
                           generation=GenerationConfig(max_new_tokens=max_new_tokens))
    data = GRPODataModule(model=model, seed=seed)
    timer = StepTimes()
    trainer = L.Trainer(max_steps=steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, callbacks=[timer], default_root_dir=root,
                        num_sanity_val_steps=0, limit_val_batches=0)
    trainer.fit(module, data)
    return timer.steps


def bench(
    model: str = "embedded",
    steps: int = 6,
    rounds: int = 2,
    seed: int = 0,
    max_new_tokens: int = 128,
    json: bool = False,
) -> None:
    """Print the step-time breakdown (generate, grade, assemble, backward, project, optimizer) of vanilla
    and erase, and erase ÷ vanilla, measured side by side in this process.

    "assemble" is adding the teacher rows, packing and the reference logprobs; "backward" is the
    logprobs with grad, the loss and the one split backward. Generation and grading depend on what
    each policy writes, so the table also gives the mean completion length, and "train" (backward +
    project + optimizer: the part the method changes) as its own ratio.

    Args:
        model: "embedded", a checkpoint directory, or a cached hub id.
        steps: steps per fit (the first is not timed).
        rounds: fits per arm, alternating vanilla and erase.
        seed: seed of every fit (both arms see the same prompts).
        max_new_tokens: generation length cap.
        json: also print the figures as one JSON object on the last line.
    """
    if steps < 2:
        raise ValueError(f"steps={steps}: need at least 2 (the first step of each fit is not timed)")
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)  # no trainer banners between the rows
    arms = {"vanilla": "none", "erase": "erase"}
    timed: dict[str, list[dict[str, float]]] = {name: [] for name in arms}
    root = Path("logs") / "bench"
    for _ in range(rounds):
        for name, arm in arms.items():
            timed[name] += time_arm(arm, model, steps, seed, max_new_tokens, root)
    medians = {name: _medians(rows) for name, rows in timed.items()}
    ratios = {k: medians["erase"][k] / medians["vanilla"][k] if medians["vanilla"][k] else float("nan")
              for k in medians["vanilla"]}
    print(format_table(medians, ratios, n_steps=len(timed["vanilla"])))
    if json:
        print(jsonlib.dumps({"seconds": medians, "erase_over_vanilla": ratios,
                             "erase_over_vanilla_step": ratios["step"], "steps_timed": len(timed["vanilla"])}))


def _medians(rows: list[dict[str, float]]) -> dict[str, float]:
    out = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    out["train"] = statistics.median(r["backward"] + r["project"] + r["optimizer"] for r in rows)
    return out


def format_table(medians: dict[str, dict[str, float]], ratios: dict[str, float], n_steps: int) -> str:
    keys = [*PHASES, "train", "step", "new_tokens"]
    lines = [f"median over {n_steps} steps per arm (seconds; new_tokens = mean completion length)",
             f"{'phase':<12}{'vanilla':>10}{'erase':>10}{'erase/van':>11}"]
    for k in keys:
        lines.append(f"{k:<12}{medians['vanilla'][k]:>10.3f}{medians['erase'][k]:>10.3f}{ratios[k]:>11.2f}")
    return "\n".join(lines)
