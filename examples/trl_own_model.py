"""pgrpo's intervention in a TRL run on your terms: your model, loaded by transformers, your dataset and your reward
functions beside pgrpo's grader, trained by a GRPOTrainer with pgrpo's hooks (docs/scale.md).

    python examples/trl_own_model.py --steps 2
    accelerate launch --multi_gpu --num_processes 2 examples/trl_own_model.py --steps 2   # two processes

On a machine without a GPU, `--multi_gpu` starts CPU processes that all-reduce over gloo. The embedded default
stands in for your checkpoint (pgrpo builds it once, in a few minutes on a laptop); `--out` keeps each process's
knobs and the log history.
"""

import argparse
import json
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig

from pgrpo.hosts.trl import GraderReward, InterventionGRPOTrainer, attach, pgrpo_dataset
from pgrpo.interventions.catalog import arms
from pgrpo.model.load import resolve_model_path


def brevity(completions: list[str], **_) -> list[float]:
    """A reward function of your own: a little for each character left unwritten."""
    return [-1e-4 * len(text) for text in completions]


def main(argv: list[str] | None = None) -> InterventionGRPOTrainer:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arm", default="Erase", help="the intervention: a class in pgrpo.interventions")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("logs/trl_own_model"))
    cli = parser.parse_args(argv)
    args = GRPOConfig(output_dir=str(cli.out), max_steps=cli.steps, per_device_train_batch_size=4, num_generations=4,
                      max_completion_length=16, temperature=1.0, top_k=0, learning_rate=3e-2,
                      lr_scheduler_type="constant", beta=0.0, loss_type="dr_grpo", scale_rewards="none",
                      max_grad_norm=0.0, use_cpu=not torch.cuda.is_available(), report_to="none", save_strategy="no",
                      logging_steps=1, seed=0, disable_tqdm=True)
    with args.main_process_first(desc="the embedded default built"):
        path = resolve_model_path("embedded")  # stands for your checkpoint
    model = AutoModelForCausalLM.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path)

    # pgrpo's pieces: the adapter on your model (and V), its grader as one reward function among yours, the hooks
    view = attach(model, tokenizer, args, arms()[cli.arm](), model_name="embedded")
    trainer = InterventionGRPOTrainer(view, args=args, reward_funcs=[GraderReward(view.train_problems), brevity],
                                      train_dataset=pgrpo_dataset(tokenizer, view.train_problems), max_grad_norm=1.0)
    trainer.train()

    rank = trainer.accelerator.process_index
    cli.out.mkdir(parents=True, exist_ok=True)
    torch.save({name: m.delta_s.detach().cpu() for name, m in view.adapter.items()}, cli.out / f"knobs{rank}.pt")
    if trainer.accelerator.is_main_process:
        (cli.out / "log_history.json").write_text(json.dumps(trainer.state.log_history, indent=1))
    # a process that exits with its gloo group alive can abort in teardown (pytorch#190489)
    trainer.accelerator.end_training()
    return trainer


if __name__ == "__main__":
    main()
