"""The TRL host beside pgrpo's own trainer on the embedded default (docs/scale.md): one intervention's hack rate over
steps in both, and what a step costs in each. Figures to read, not a test.

    pgrpo sweep --name trl_host --arms '[probe_penalty+no_teacher]' --seeds '[0, 1, 2]' \\
        --overrides '[--trainer.max_steps=60, --end_eval.samples_per_problem=0]' --threads 1 --workers 1
    OMP_NUM_THREADS=1 python -m benchmarks.trl_host run --arm ProbePenalty --seeds '[0, 1, 2]' --steps 60
    python -m benchmarks.trl_host compare       # the table in docs/scale.md
    python -m benchmarks.trl_host timing        # a step's cost in each, on an otherwise idle machine

The TRL side runs what configs/embedded.yaml with no_teacher.yaml states for pgrpo: groups of 8 student samples,
4 prompts a step, 128 new tokens at temperature 1, AdamW at a constant lr of 3e-2, Dr.GRPO with beta 0, the
gradient clipped to 1 after the intervention. TRL has no teacher rows, so the pgrpo side runs without them too.
The two sample different prompts in a different order (TRL's sampler shuffles its dataset), so the comparison
is of trends within the seed spread, not of steps.
"""

import json
import statistics
import time
from pathlib import Path

import torch
from jsonargparse import auto_cli

from pgrpo.records.events import HACK, find_runs

LOGS = Path("logs/trl_host")
WINDOW = 10  # steps averaged at the start and the end of a run


def run(arm: str = "ProbePenalty", seeds: list[int] = [0], steps: int = 60, logs: Path = LOGS) -> None:
    """Train `arm` (an intervention's class, pgrpo.interventions.<arm>) inside TRL's GRPOTrainer, one run per seed;
    each run's per-step hack rate and step time go to <logs>/trl/<arm>/seed<k>.json."""
    from trl import GRPOConfig

    from pgrpo.hosts.trl import build_trainer
    from pgrpo.interventions.catalog import arms

    for seed in seeds:
        out = logs / "trl" / arm / f"seed{seed}.json"
        if out.exists():
            print(f"{out}: done")
            continue
        torch.manual_seed(seed)
        args = GRPOConfig(output_dir=str(out.parent / f"seed{seed}"), max_steps=steps, per_device_train_batch_size=32,
                          num_generations=8, max_completion_length=128, temperature=1.0, top_k=0, learning_rate=3e-2,
                          lr_scheduler_type="constant", beta=0.0, loss_type="dr_grpo", scale_rewards="none",
                          max_grad_norm=0.0, use_cpu=True, bf16=False, report_to="none", save_strategy="no",
                          logging_steps=1, seed=seed, disable_tqdm=True)
        start = time.perf_counter()
        trainer = build_trainer(arms()[arm](), args, prompts_per_step=4, max_grad_norm=1.0)
        trainer.train()
        logged = [log for log in trainer.state.log_history if HACK in log]
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"hack": [log[HACK] for log in logged],
                                   "step_s": [log["step_time"] for log in logged],
                                   "seconds": time.perf_counter() - start}))
        print(f"{out}: {steps} steps in {time.perf_counter() - start:.0f} s")


def step_seconds(scalars: dict) -> list[float]:
    """Each step's seconds in a pgrpo run: the sum of its logged phases (time/*)."""
    phases = [tag for tag in scalars if tag.startswith("time/")]
    return [sum(vals) for vals in zip(*([v for _, v in scalars[t]] for t in phases))]


def compare(arms: list[str] = ["Vanilla=vanilla+no_teacher", "ProbePenalty=probe_penalty+no_teacher"],
            logs: Path = LOGS) -> None:
    """Each run's hack rate over its first and last WINDOW steps, and its median step time, TRL beside pgrpo.
    `arms`: TRL's arm (an intervention class) = the pgrpo sweep's arm that runs the same."""
    runs = find_runs(logs)
    print(f"| arm | host | seed | hack, steps 0–{WINDOW - 1} | hack, last {WINDOW} steps | median step (s) |")
    print("|---|---|---|---|---|---|")
    for pair in arms:
        trl_arm, pgrpo_arm = pair.split("=")
        rows = []
        for r in runs:
            if r.arm == pgrpo_arm:
                rows.append(("pgrpo", r.seed, [v for _, v in r.scalars[HACK]], step_seconds(r.scalars)))
        for path in sorted((logs / "trl" / trl_arm).glob("seed*.json")):
            data = json.loads(path.read_text())
            rows.append(("TRL", path.stem, data["hack"], data["step_s"]))
        for host, seed, hack, step_s in rows:
            print(f"| {pgrpo_arm} | {host} | {seed} | {statistics.mean(hack[:WINDOW]):.3f} | "
                  f"{statistics.mean(hack[-WINDOW:]):.3f} | {statistics.median(step_s):.2f} |")


def timing(steps: int = 10, rounds: int = 2, logs: Path = LOGS / "timing") -> None:
    """What a step costs in pgrpo's own trainer against TRL's on the same work: vanilla, the shapes above, no
    teacher rows, TRL's activation checkpointing off (pgrpo does not recompute). Whole runs of `steps` steps
    alternate, `rounds` times each, so that load drifting over time falls on both; the first step (warm-up) is left
    out. Prints each host's median step time and seconds per generated token, and their ratio."""
    import subprocess
    import sys

    from trl import GRPOConfig

    from pgrpo.records.events import read_scalars
    from pgrpo.hosts.trl import build_trainer
    from pgrpo.interventions import Vanilla

    step_s: dict[str, list[float]] = {"pgrpo": [], "TRL": []}
    token_s: dict[str, list[float]] = {"pgrpo": [], "TRL": []}
    for i in range(rounds):
        name = f"pgrpo{i}"
        subprocess.run([sys.executable, "-m", "pgrpo.cli", "fit", "--config", "configs/vanilla.yaml", "--config",
                        "configs/teacher/no_teacher.yaml", f"--trainer.max_steps={steps}",
                        "--end_eval.samples_per_problem=0",
                        f"--trainer.logger.init_args.save_dir={logs}", f"--trainer.logger.init_args.name={name}"],
                       check=True, capture_output=True)
        scalars = read_scalars(next((logs / name).glob("version_*")))
        per_step = step_seconds(scalars)[1:]
        lengths = [v for _, v in scalars["completions/mean_length"]][1:]
        step_s["pgrpo"] += per_step
        token_s["pgrpo"] += [s / (32 * n) for s, n in zip(per_step, lengths)]

        torch.manual_seed(0)
        args = GRPOConfig(output_dir=str(logs / f"trl{i}"), max_steps=steps, per_device_train_batch_size=32,
                          num_generations=8, max_completion_length=128, temperature=1.0, top_k=0, learning_rate=3e-2,
                          lr_scheduler_type="constant", beta=0.0, loss_type="dr_grpo", scale_rewards="none",
                          max_grad_norm=0.0, use_cpu=True, bf16=False, report_to="none", save_strategy="no",
                          logging_steps=1, seed=0, disable_tqdm=True, gradient_checkpointing=False)
        trainer = build_trainer(Vanilla(), args, prompts_per_step=4, max_grad_norm=1.0)
        trainer.train()
        logged = [log for log in trainer.state.log_history if HACK in log][1:]
        step_s["TRL"] += [log["step_time"] for log in logged]
        token_s["TRL"] += [log["step_time"] / (32 * log["completions/mean_length"]) for log in logged]
    median = {host: statistics.median(v) for host, v in step_s.items()}
    per_token = {host: statistics.median(v) for host, v in token_s.items()}
    print(f"torch threads {torch.get_num_threads()}; {rounds} rounds of {steps} steps each, the first step left out")
    print("| host | median step (s) | ms per generated token |")
    print("|---|---|---|")
    for host in step_s:
        print(f"| {host} | {median[host]:.2f} | {1000 * per_token[host]:.2f} |")
    print(f"TRL / pgrpo: {median['TRL'] / median['pgrpo']:.2f}x a step, "
          f"{per_token['TRL'] / per_token['pgrpo']:.2f}x a generated token")


if __name__ == "__main__":
    auto_cli([run, compare, timing])
