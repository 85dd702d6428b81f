"""The end-of-run evaluation: a run's primary numbers, from its final policy as deployed, with their intervals.

A training step's hack and solve rates are a few hundred samples of a policy that was still moving; a run's
last five steps are 120 student samples (standard error ≈ 0.045 at a rate of 0.5). So a run ends by sampling
its final policy (δS_hack zeroed, as it ships) on every training problem and on the held-out ones, under the
prompt each was trained with (its own loophole), at the training temperature, `samples_per_problem` each, from
a fixed seed. The counts and their Wilson intervals go to `end_eval.json` in the run's directory, and the rates
to the curves as end/... at the last step, where `pgrpo report` reads them.
"""

import json
import math
import time
from collections.abc import Callable
from pathlib import Path

from lightning.pytorch import Callback
from lightning.pytorch.utilities import rank_zero_info, rank_zero_only
from typing_extensions import override

from pgrpo.records.cache import announce, progress_ticker
from pgrpo.hosts.lightning.callbacks import log_scalars
from pgrpo.env import Problem
from pgrpo.evaluation.evaluate import SampleAndGrade, evaluate, with_loopholes
from pgrpo.evaluation.intervals import wilson
from pgrpo.step.rollout import seeded
from pgrpo.records.summary import board_dir

FILE = "end_eval.json"
# (what was sampled, scalar prefix): the training problems, and the problems the run never trained on
SPLITS = (("train", "end/"), ("heldout", "end/heldout_"))


class EndOfRunEval(Callback):
    """At the end of training: hack and solve of the final policy as deployed, on every training problem and every
    held-out one, with Wilson intervals (end_eval.json; end/hack, end/solve, end/samples, end/unattributed_hacks
    (strict hacks with no lever pulled: a grader fault), the same with end/heldout_ and per loophole mode,
    end/hack_<mode>, at the last step)."""

    def __init__(self, samples_per_problem: int = 0, seed: int = 0, prompts_per_call: int = 16):
        """
        Args:
            samples_per_problem: completions of each problem (0: no evaluation; the embedded configs take 8).
            seed: sampling seed (the same at every run: two arms are sampled alike, not their noise).
            prompts_per_call: problems per generate call (memory: each brings samples_per_problem rows).
        """
        if samples_per_problem < 0 or prompts_per_call < 1:
            raise ValueError(f"end_eval: samples_per_problem={samples_per_problem} must be >= 0 and "
                             f"prompts_per_call={prompts_per_call} >= 1")
        self.samples_per_problem = samples_per_problem
        self.seed = seed
        self.prompts_per_call = prompts_per_call

    @override
    def on_fit_start(self, trainer, pl_module) -> None:
        self._evaluated = False

    @override
    def on_train_end(self, trainer, pl_module) -> None:
        if self._due(trainer):
            self._evaluate(trainer, pl_module)

    @override
    def on_fit_end(self, trainer, pl_module) -> None:
        # A run killed between its final checkpoint and this evaluation resumes with no step left: Lightning then
        # skips the training loop and its on_train_end, and has torn the run down by now (single-device and DDP
        # teardown move the module to the CPU), so it is evaluated here, on the run's device. A resume of a run
        # that was evaluated is not evaluated again.
        if self._evaluated or not self._due(trainer) or self._on_file(trainer):
            return
        device = pl_module.device
        pl_module.to(trainer.strategy.root_device)
        self._evaluate(trainer, pl_module)
        pl_module.to(device)

    def _due(self, trainer) -> bool:
        # off, no step trained, or the run stopped early (it is evaluated when a resume finishes it)
        return (bool(self.samples_per_problem) and trainer.global_step > 0
                and trainer.global_step >= (trainer.max_steps or 0))

    def _on_file(self, trainer) -> bool:
        run_dir = board_dir(trainer)
        return run_dir is not None and evaluated_at(run_dir, trainer.global_step)

    def _evaluate(self, trainer, pl_module) -> None:
        start = time.perf_counter()
        dm = trainer.datamodule
        result = end_of_run_eval(pl_module, {"train": dm.train_problems, "heldout": dm.eval_problems}, dm.problems,
                                 self.samples_per_problem, self.seed, self.prompts_per_call)
        result |= {"step": trainer.global_step, "seconds": time.perf_counter() - start}
        log_scalars(trainer, scalars(result))
        self._write(trainer, result)
        self._evaluated = True

    @rank_zero_only
    def _write(self, trainer, result: dict) -> None:
        run_dir = board_dir(trainer)
        if run_dir is not None:
            path = run_dir / FILE
            path.write_text(json.dumps(result, indent=1))
            rank_zero_info(f"end-of-run evaluation: {summary_line(result)} ({path})")


def evaluated_at(run_dir: Path, step: int | None) -> bool:
    """Whether the run directory holds an end-of-run evaluation of step `step` (None: of any step)."""
    path = run_dir / FILE
    return path.is_file() and (step is None or json.loads(path.read_text()).get("step") == step)


def end_of_run_eval(pl_module, splits: dict[str, list[Problem]], everything: list[Problem], n: int, seed: int,
                    prompts_per_call: int) -> dict:
    """Per split, the samples, strict hacks and correct answers of the deployed policy, with Wilson intervals."""
    result = {"samples_per_problem": n, "seed": seed, "temperature": pl_module.generation.temperature}
    # on a real model on CPU this is minutes of generation (SmolLM2: ~10): said, and ticked per generate call
    announce(f"end-of-run evaluation: {n} samples of each of "
             + " and ".join(f"{len(problems)} {split}" for split, problems in splits.items() if problems)
             + " problems, from the final policy as deployed")
    with seeded(seed, pl_module.device), pl_module.intervention.deployed(pl_module.adapter):
        for split, problems in splits.items():
            if not problems:
                result[split] = None
                continue
            tick = progress_ticker(f"end-of-run evaluation, {split}: generate call",
                                   math.ceil(len(problems) / prompts_per_call))
            counts = evaluate(with_loopholes(problems, everything), n, _in_calls(pl_module.sampler.rollouts,
                              prompts_per_call, tick), variants=["fixed_name"], seed=seed)["fixed_name"]
            entry = {"problems": counts["prompts"], "samples": counts["samples"]}
            for name, key in (("hack", "strict_hack"), ("solve", "correct")):
                entry[name] = counts[f"{key}_rate"]
                entry[f"{name}_count"] = counts[key]
                entry[f"{name}_wilson"] = wilson(counts[key], counts["samples"])
            entry["unattributed_hack_count"] = counts["unattributed_hack"]
            entry["per_mode"] = {m: {"samples": c["samples"], "hack": c["strict_hack_rate"], "solve": c["correct_rate"]}
                                 for m, c in counts["per_mode"].items()}
            result[split] = entry
    return result


def scalars(result: dict) -> dict[str, float]:
    """The rates and sample counts of each split, and of each loophole mode on the training problems
    (end/hack_<mode>, ...): a held-out lever's own end numbers, which `pgrpo report` pools over the modes a
    leave-modes-out run held out."""
    out = {}
    for split, prefix in SPLITS:
        if result.get(split):
            out |= {f"{prefix}hack": result[split]["hack"], f"{prefix}solve": result[split]["solve"],
                    f"{prefix}samples": float(result[split]["samples"]),
                    f"{prefix}unattributed_hacks": float(result[split]["unattributed_hack_count"])}
    for mode, entry in (result.get("train") or {}).get("per_mode", {}).items():
        out |= {f"end/hack_{mode}": entry["hack"], f"end/solve_{mode}": entry["solve"],
                f"end/samples_{mode}": float(entry["samples"])}
    return out


def summary_line(result: dict) -> str:
    parts = []
    for split, _ in SPLITS:
        e = result.get(split)
        if e:
            parts.append(f"{split} hack {e['hack']:.3f} [{e['hack_wilson'][0]:.3f}, {e['hack_wilson'][1]:.3f}], "
                         f"solve {e['solve']:.3f} [{e['solve_wilson'][0]:.3f}, {e['solve_wilson'][1]:.3f}] "
                         f"of {e['samples']}")
    return "; ".join(parts)


def _in_calls(rollouts: SampleAndGrade, prompts_per_call: int, tick: Callable[[], None]) -> SampleAndGrade:
    """The same rollouts, `prompts_per_call` problems per generate call, `tick` after each."""
    def chunked(problems: list[Problem], n: int) -> list:
        rows = []
        for i in range(0, len(problems), prompts_per_call):
            rows += rollouts(problems[i:i + prompts_per_call], n)
            tick()
        return rows
    return chunked
