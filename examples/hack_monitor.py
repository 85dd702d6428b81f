"""A hack monitor in a plain TRL GRPO run: no pgrpo trainer, no intervention, only measurements
(docs/scale.md#a-hack-monitor-for-any-grpo-run).

    python examples/hack_monitor.py --steps 2

Each step's log gains V's hack-ward share of the step's gradient beside its random-direction null
(`hackward_share/gradient`, `hackward_share/gradient_null`), where the knobs sit along V (`adapter/delta_s_along_v`)
and the share of rollouts a probe flags (`detector/flagged`). The embedded default stands in for your model (pgrpo
builds it once).
"""

import argparse
import json
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer

from pgrpo.hosts.monitor import HackMonitor
from pgrpo.hosts.trl import GraderReward, TRLRunView, attach, pgrpo_dataset
from pgrpo.interventions import ProbePenalty
from pgrpo.model.load import resolve_model_path


def brevity(completions: list[str], **_) -> list[float]:
    """A reward function of your own: a little for each character left unwritten."""
    return [-1e-4 * len(text) for text in completions]


def train(steps: int = 2, out: Path = Path("logs/hack_monitor"), monitor: bool = True
          ) -> tuple[GRPOTrainer, TRLRunView]:
    """A plain GRPOTrainer run of `steps` steps on the embedded default, watched by a HackMonitor (or not)."""
    args = GRPOConfig(output_dir=str(out), max_steps=steps, per_device_train_batch_size=4, num_generations=4,
                      max_completion_length=16, temperature=1.0, top_k=0, learning_rate=3e-2, beta=0.0,
                      use_cpu=not torch.cuda.is_available(), report_to="none", save_strategy="no", logging_steps=1,
                      seed=0, disable_tqdm=True)
    path = resolve_model_path("embedded")  # stands for your checkpoint
    model = AutoModelForCausalLM.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    # the adapter on your model and V; ProbePenalty is prepared here only to be read as a probe: in a plain
    # GRPOTrainer no hook of it runs
    view = attach(model, tokenizer, args, ProbePenalty(), model_name="embedded")
    reward_funcs = [GraderReward(view.train_problems), brevity]
    hack_monitor = HackMonitor(view, probe=view.intervention) if monitor else None
    if hack_monitor is not None:
        reward_funcs.append(hack_monitor.probe_flags)  # scores nothing: it logs the probe's flag rate
    trainer = GRPOTrainer(model=model, reward_funcs=reward_funcs, args=args,
                          train_dataset=pgrpo_dataset(tokenizer, view.train_problems))
    if hack_monitor is not None:
        hack_monitor.add_to(trainer)
    trainer.train()
    return trainer, view


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("logs/hack_monitor"))
    cli = parser.parse_args(argv)
    trainer, _ = train(cli.steps, cli.out)
    watched = ("hackward_share/gradient", "hackward_share/gradient_null", "adapter/delta_s_along_v",
               "detector/flagged")
    for log in trainer.state.log_history:
        if "loss" in log:
            print(json.dumps({"step": log["step"], **{name: log.get(name) for name in watched}}))


if __name__ == "__main__":
    main()
