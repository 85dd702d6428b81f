"""The few plain lines a run ends on: what moved, against what to read it, where it is, what to run next.

Read back from the run's own TensorBoard events, so the summary says what `pgrpo report` and TensorBoard
will say, never a number of its own.
"""

import json
import time
from pathlib import Path

import lightning as L
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_only
from typing_extensions import override

from pgrpo.records.events import BASE_FILE, BASIS_FILE, CODE_FILE, POOL_FILE, Scalars, load_code, read_scalars
from pgrpo.interventions import Intervention
from pgrpo.model.load import base_record
from pgrpo.records.provenance import code_record, describe

WINDOW = 5  # steps averaged at the start and at the end, as `pgrpo report` does at the end


def board_dir(trainer) -> Path | None:
    """The run's TensorBoard directory (where its curves, base.json and end_eval.json go); None without one."""
    board = next((lg for lg in trainer.loggers if isinstance(lg, TensorBoardLogger)), None)
    return None if board is None else Path(board.log_dir)


class RunSummary(L.Callback):
    """At the end of a fit: hack and solve at the start and the end, the hack-ward share against its null, paths,
    next commands."""

    def __init__(self, window: int = WINDOW):
        """
        Args:
            window: steps averaged at the start and at the end of the run.
        """
        self.window = window
        self._start = time.perf_counter()
        self._basis_recorded = False  # set again at each fit's start: a callback may serve more than one fit
        self._code = code_record()  # as the process starts, before a build's minutes leave time to edit the tree
        self._parts: list[dict] = []  # the code each part of the run ran, as code.json holds it

    @override
    def on_train_start(self, trainer, pl_module) -> None:
        self._start = time.perf_counter()
        self._basis_recorded = False
        self._record_base(trainer, pl_module)
        self._record_code(trainer)

    @rank_zero_only
    def _record_base(self, trainer, pl_module) -> None:
        """base.json beside the curves (`pgrpo report` refuses to pool runs whose bases differ), and
        teacher_pool.json: the teacher pool's digest."""
        run_dir = board_dir(trainer)
        if run_dir is not None:
            run_dir.mkdir(parents=True, exist_ok=True)
            (run_dir / BASE_FILE).write_text(json.dumps(base_record(pl_module.model_name), indent=1))
            pool = getattr(trainer.datamodule, "pool", None)  # the cached teacher pool, where the run has one
            if pool is not None:
                (run_dir / POOL_FILE).write_text(json.dumps({"path": str(pool.path), "digest": pool.digest()},
                                                            indent=1))

    @rank_zero_only
    def _record_code(self, trainer) -> None:
        """code.json beside the curves: the code this fit runs, after the code of the run's earlier parts where it
        resumes one (a resumed run's later steps ran the code of its resume)."""
        run_dir = board_dir(trainer)
        if run_dir is None:
            return
        earlier = (load_code(run_dir) or []) if trainer.ckpt_path else []
        self._parts = earlier if earlier[-1:] == [self._code] else earlier + [self._code]
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / CODE_FILE).write_text(json.dumps(self._parts, indent=1))

    @override
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if not self._basis_recorded:
            self._basis_recorded = True
            self._record_basis(trainer, pl_module)

    @rank_zero_only
    def _record_basis(self, trainer, pl_module) -> None:
        """basis.json beside the curves, at the first step: V is final only after the module's on_train_start (the
        intervention may swap in a placebo), which Lightning runs after every callback's. A resumed run records V
        as its checkpoint held it; one that refreshes V (BasisRefresh) moves on from this one."""
        run_dir = board_dir(trainer)
        basis = pl_module.basis
        if run_dir is not None and basis is not None:
            record = {"digest": basis.digest(), "k_total": basis.k_total, "meta": basis.meta}
            (run_dir / BASIS_FILE).write_text(json.dumps(record, indent=1, sort_keys=True))

    @override
    @rank_zero_only
    def on_fit_end(self, trainer, pl_module) -> None:
        board = next((lg for lg in trainer.loggers if isinstance(lg, TensorBoardLogger)), None)
        if board is None:
            return
        board.experiment.flush()  # the events on disk are what the summary reads
        print(summary(read_scalars(board.log_dir), Path(board.log_dir), pl_module.intervention, trainer.global_step,
                      time.perf_counter() - self._start, self.window, pl_module.model_name.startswith("embedded"),
                      self._parts), flush=True)


def summary(scalars: Scalars, run_dir: Path, intervention: Intervention, steps: int, seconds: float,
            window: int = WINDOW, embedded: bool = True, code: list[dict] | None = None) -> str:
    def mean(tag: str, at_end: bool) -> str:
        values = [v for _, v in scalars.get(tag, [])]
        values = values[-window:] if at_end else values[:window]
        return f"{sum(values) / len(values):.3f}" if values else "–"

    skyline = " (an oracle skyline: it reads the oracle's labels)" if intervention.reads_oracle else ""
    lines = [f"pgrpo: {steps} steps of the {intervention.label()!r} arm{skyline} in {seconds:.0f} s "
             f"({seconds / max(steps, 1):.1f} s/step)",
             f"  {'':16}{f'first {window}':>10}{f'last {window}':>10}"]
    for rate in ("hack", "solve"):
        for rows in ("student", "teacher"):
            tag = f"{rate}/{rows}"
            if tag in scalars:
                lines.append(f"  {tag:16}{mean(tag, False):>10}{mean(tag, True):>10}")
    # the model's health beside the rates: an edit that damages it shows as entropy and ‖δS‖ climbing,
    # a biased projection as δS drifting along V
    for tag in ("entropy", "adapter/delta_s_norm", "adapter/delta_s_along_v"):
        if tag in scalars:
            lines.append(f"  {tag.removeprefix('adapter/'):16}{mean(tag, False):>10}{mean(tag, True):>10}")
    # a run without teacher rows still logs their (zero) share: only rows that ran are summarised
    shares = [f"{rows} {mean(f'hackward_share/{rows}', True)} (null {mean(f'hackward_share/{rows}_null', True)})"
              for rows in ("student", "teacher") if f"hackward_share/{rows}" in scalars and f"hack/{rows}" in scalars]
    if shares:
        lines.append(f"  hack-ward share of the gradient, last {window}: " + ", ".join(shares))
    # the arm to compare with is this run's own config (its model, its settings) with the other intervention, and a
    # placebo's is its method: the same run reading the real detector
    if intervention.placebo:
        other, change = "real", f"--model.intervention.init_args.{intervention.placebo_knob} real"
    else:
        other = "erase" if intervention.measures_only else "vanilla"
        change = f"--model.intervention pgrpo.interventions.{other.title()}"
    lines += [
        "  hack = passed the flawed grader but failed the strict oracle; solve = the oracle accepts it",
        f"  events: {run_dir}   checkpoints: {run_dir / 'checkpoints'}",
    ]
    if code:  # a resumed run's earlier parts first
        dirty = any(not part.get("clean", True) for part in code)
        lines.append("  code: " + ", then ".join(describe(part) for part in code)
                     + (f" (the changes: {run_dir / CODE_FILE})" if dirty else ""))
    lines += [
        "next:",
        f"  tensorboard --logdir {run_dir.parent.parent}",
        f"  pgrpo fit --config {run_dir / 'config.yaml'} {change} --trainer.logger.init_args.name {run_dir.parent.name}_{other}      # the arm to compare with, on this model",
    ]
    if embedded:  # the shipped arm configs are the embedded model's
        lines.append("  pgrpo sweep --name lab --arms '[vanilla, erase]' --seeds '[0, 1, 2]' && pgrpo report logs/lab")
    return "\n".join(lines)
