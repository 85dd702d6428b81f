"""A hack monitor for any GRPO run on a model with pgrpo's adapter: it measures and never changes the step.

Each optimizer step it logs, under `pgrpo fit`'s names, V's hack-ward share of the step's gradient beside what a
random direction would give (`hackward_share/gradient`, `hackward_share/gradient_null`, and
`basis/axes_pushed_hackward`, the share of V's axes the gradient leans hack-ward on), and where the knobs sit
along V (`adapter/delta_s_along_v`, ⟨V, δS⟩ summed over the axes, > 0 away from hack; its share of ‖δS‖;
‖δS‖); with a probe, the share of each batch's rollouts the probe flags (`detector/flagged`).
It is a `transformers.TrainerCallback`, so TRL's GRPOTrainer (or any Trainer) runs it:

    view = attach(model, tokenizer, args)                  # pgrpo.hosts.trl: the adapter on your model, V
    monitor = HackMonitor(view)
    trainer = GRPOTrainer(model=model, reward_funcs=[your_reward], args=args, train_dataset=your_data)
    monitor.add_to(trainer)
    trainer.train()

examples/hack_monitor.py runs it on the embedded default (docs/scale.md#a-hack-monitor-for-any-grpo-run).
"""

import math
from collections import defaultdict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING

import torch
from torch import nn
from transformers import TrainerCallback

from pgrpo.step.projection import knob_stats, measure_grads
from pgrpo.step.rollout import pack

if TYPE_CHECKING:
    from pgrpo.interventions.base import RunView
    from pgrpo.interventions.reads_activations import ReadsActivations


class StepLog:
    """Numbers measured at each step, waiting for the trainer's next log: each name's mean over the steps since
    (NaN left out, as TRL averages its own; None where every value was NaN)."""

    def __init__(self):
        self.values: dict[str, list[float]] = defaultdict(list)

    def add(self, stats: Mapping[str, float]) -> None:
        for name, value in stats.items():
            self.values[name].append(float(value))

    def flush(self) -> dict[str, float | None]:
        means = {}
        for name, values in self.values.items():
            kept = [v for v in values if not math.isnan(v)]
            means[name] = sum(kept) / len(kept) if kept else None
        self.values.clear()
        return means


class HackMonitor(TrainerCallback):
    """Logs how hack-ward each step's gradient is and where the knobs sit along V; changes nothing.

    `view`: what `pgrpo.hosts.trl.attach` returned (the policy with pgrpo's adapter, its V and tokenizer).
    `probe`: a detector that reads the policy's activations (a prepared `ProbePenalty`, say); its flag rate is
    logged when `monitor.probe_flags` is one of the trainer's reward functions (it returns None for every rollout,
    which TRL leaves out of the reward's sum: the rewards stay as they were)."""

    def __init__(self, view: "RunView", probe: "ReadsActivations | None" = None):
        self.view = view
        self.log = StepLog()
        self.probe_flags = ProbeFlags(view, probe, self.log) if probe is not None else None

    def add_to(self, trainer) -> None:
        """Add the monitor ahead of the trainer's reporters (TensorBoard, W&B, ...), so that they see its numbers
        (a callback passed as `callbacks=[...]` runs after them: its numbers reach the trainer's log history and
        the console only)."""
        trainer.add_callback(self)
        callbacks = trainer.callback_handler.callbacks
        callbacks.insert(0, callbacks.pop(callbacks.index(self)))

    def measure_gradient(self) -> None:
        """V's hack-ward share of the step's summed knob gradient (after any all-reduce), and its null."""
        adapter, basis = self.view.adapter, self.view.basis
        if any(adapter[name].delta_s.grad is None for name in basis.V):
            return  # no backward reached the knobs this step
        measured = measure_grads(adapter, basis)
        self.log.add({tag: measured[tag] for tag in
                      ("hackward_share/gradient", "hackward_share/gradient_null", "basis/axes_pushed_hackward")})

    def measure_knobs(self) -> None:
        """Where δS sits along V after the optimizer's step (what `pgrpo fit` logs of it)."""
        stats = knob_stats(self.view.adapter, self.view.basis)
        self.log.add({name: stats[name] for name in
                      ("adapter/delta_s_norm", "adapter/delta_s_along_v", "adapter/delta_s_along_v_share")})

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self.measure_gradient()

    def on_optimizer_step(self, args, state, control, **kwargs):
        self.measure_knobs()

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs is None or any(name.startswith("eval_") for name in logs):
            return
        measured = self.log.flush()
        logs.update(measured)
        if state.log_history and state.log_history[-1].get("step") == state.global_step:
            state.log_history[-1].update(measured)  # the trainer copied `logs` there before calling back


class ProbeFlags:
    """A reward function that scores nothing: it logs the share of the batch's rollouts `probe` flags, under the
    policy as it is now (`detector/flagged`), and returns None for each (TRL sums the other functions' rewards
    without it: the rewards, the advantages and the step stay as they were)."""

    __name__ = "pgrpo_probe_flags"  # TRL names a reward function's logs after it

    def __init__(self, view: "RunView", probe: "ReadsActivations", log: StepLog):
        self.view, self.probe, self.log = view, probe, log

    def __call__(self, prompts: list, completions: list, completion_ids: list[list[int]], log_metric=None,
                 **columns) -> list[None]:
        view = self.view
        packed = rollout_rows(view.tokenizer, prompts, completion_ids).to(view.device)
        with eval_mode(view.policy), torch.no_grad():
            flagged = self.probe.scores(view, packed) > self.probe.cut
        rate = float(flagged.float().mean())
        if log_metric is not None:  # TRL's: averaged over the processes, logged with the batch
            log_metric("detector/flagged", rate)
        else:
            self.log.add({"detector/flagged": rate})
        return [None] * len(completions)


def prompt_ids(tokenizer, prompts: list) -> list[list[int]]:
    """The prompts' token ids as TRL's GRPOTrainer encodes them for sampling (without tools or images): text as the
    tokenizer encodes it, a conversation through the tokenizer's chat template with the generation prompt."""
    if prompts and isinstance(prompts[0], list):
        return tokenizer.apply_chat_template(prompts, add_generation_prompt=True, tokenize=True,
                                             return_dict=True)["input_ids"]
    return tokenizer(text=prompts)["input_ids"]


def rollout_rows(tokenizer, prompts: list, completion_ids: list[list[int]]):
    """The rollouts TRL sampled, packed as pgrpo's hooks read them (an empty completion as its EOS alone)."""
    eos = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    return pack(prompt_ids(tokenizer, prompts), [list(ids) or [eos] for ids in completion_ids], pad)


@contextmanager
def eval_mode(model: nn.Module) -> Iterator[None]:
    """The policy as pgrpo's hooks read it: in eval mode, as pgrpo's own trainer keeps it (no dropout, and no
    activation checkpointing, whose recomputed forward a per-rollout gradient capture would count twice)."""
    training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(training)
