"""`pgrpo prime`: warm a real model up on the priming problems into a primed base, then say how it codes."""

from dataclasses import fields
from pathlib import Path

from pgrpo.evaluation.base_eval import evaluate_base, hint_reading, hint_reading_line
from pgrpo.model.load import PRIMED, model_id, resolve_model_path
from pgrpo.model.priming import PrimeSettings, named_priming, primed_checkpoint, priming_name, publish
from pgrpo.step.rollout import SamplingConfig


# the priming's defaults are PrimeSettings' (the one truth: `model: …+primed` names the base they make; other
# named primings, `+primed-v2`, are priming.NAMED_PRIMINGS)
def prime(model: str = "smollm2-135m-instruct", out: str | None = None,
          hack_share: float = PrimeSettings.hack_share,
          completions_per_prompt: int = PrimeSettings.completions_per_prompt, steps: int = PrimeSettings.steps,
          batch_size: int = PrimeSettings.batch_size, lr: float = PrimeSettings.lr, rank: int = PrimeSettings.rank,
          seed: int = PrimeSettings.seed, threads: int = PrimeSettings.threads, hacks: str = PrimeSettings.hacks,
          disjoint_problems: bool = PrimeSettings.disjoint_problems, retrain: bool = False,
          publish_update: bool = False,
          evaluate: bool = True, samples_per_problem: int = 4,
          max_new_tokens: int = 384, temperature: float = 0.7, dtype: str = "float32") -> None:
    """Prime MODEL by a short supervised warm start of a low-rank update into a new base (cached; a second call
    returns at once; a killed build resumes), then measure it on the RL problems it has not seen.

    The data are 120 priming problems disjoint from the RL problems (pgrpo/env/primer_problems.py): correct
    solutions under the no-loophole prompt and under each hint, and a share of completions that pull the lever
    their hint names. With every setting at its default the result is what `model: MODEL+primed` names in a
    config (configs/models/smollm2_primed.yaml); with `--hacks varied --disjoint_problems true` (the rest at
    their defaults) it is the primed base v2, `model: MODEL+primed-v2` (configs/models/smollm2_primed_v2.yaml);
    with others, pass the printed directory as `model:`. Where the
    repository publishes the update these settings make (pgrpo/model/primings/), it is merged, not trained: every
    machine then has the same base to the bit (training's last bits depend on the CPU). The evaluation
    samples every RL problem under its own hint and prints format, solve, hack and clipping rates, then hint
    reading (every problem under every hint: of the samples that pull a lever, the share pulling the named one).

    Args:
        model: the base to prime: a packaged GGUF name (smollm2-135m-instruct), a checkpoint directory, ...
        out: build into this directory instead of the cache.
        hack_share: share of each hint's completions that pull the lever it names.
        completions_per_prompt: completions of each (priming problem, hint or none) prompt.
        steps: optimizer steps of the warm start.
        batch_size: examples a step.
        lr: AdamW's peak learning rate.
        rank: the low-rank update's rank, on every Linear layer but the output embeddings.
        seed: the corpus's draws, the batch order and the update's initial factors.
        threads: torch threads while training (pinned: the result is bit-exact for a given count and CPU; part of
            the key, so another count trains rather than merging the published update).
        hacks: how the priming's hacks are written: shared (one template a lever, v1's), distinct (a token of
            its own a mode) or varied (the grammar's taught forms, v2's; never the detectors' forms).
        disjoint_problems: replace the priming problems that are near-copies of RL problems (v2's; `pgrpo
            disjoint --primer_disjoint true` checks the selection).
        retrain: train the update even where one is published for these settings (into --out, to check it
            or, with --publish_update, to replace it).
        publish_update: copy the update and its record into pgrpo/model/primings/, to commit: every machine merges it.
        evaluate: sample and grade the primed base on the RL problems afterwards.
        samples_per_problem: completions per RL problem (and per problem and hint) in the evaluation.
        max_new_tokens: the evaluation's completion length (clipping is measured at it).
        temperature: the evaluation's sampling temperature.
        dtype: the evaluation's base weights (bfloat16 is faster on CPUs with bf16 units).
    """
    if named_priming(model):
        raise SystemExit(f"pgrpo prime: {model!r} is primed already; name the model to prime")
    try:
        settings = PrimeSettings(hack_share=hack_share, completions_per_prompt=completions_per_prompt, steps=steps,
                                 batch_size=batch_size, lr=lr, rank=rank, seed=seed, threads=threads, hacks=hacks,
                                 disjoint_problems=disjoint_problems)
    except ValueError as error:
        raise SystemExit(f"pgrpo {error}") from error
    base_path = resolve_model_path(model)
    path = primed_checkpoint(base_path, model_id(model), settings, Path(out) if out else None, retrain)
    if publish_update:
        print(f"published: {publish(path, base_path)} (commit it with its .json)")
    print(f"primed base: {path}")
    suffix = priming_name(settings)  # `+primed` for the defaults, `+primed-v2` for v2's settings, ...
    print(f"use it as: model: {path if out or suffix is None else model + suffix}")
    if suffix is None:
        changed = [f.name for f in fields(PrimeSettings)
                   if getattr(settings, f.name) != getattr(PrimeSettings(), f.name)]
        print(f"(not the default priming: {', '.join(changed)}; `{model + PRIMED}` names the default's)")
    elif out:
        which = "the default priming" if suffix == PRIMED else f"the priming `{model + suffix}` names"
        print(f"({which}, built into --out; `{model + suffix}` names its cached copy)")
    if evaluate:
        sampling = SamplingConfig(max_new_tokens=max_new_tokens, temperature=temperature)
        for key, value in evaluate_base(path, samples_per_problem, sampling, dtype=dtype).items():
            print(f"{key}: {value:.3f}")
        reading = hint_reading(path, samples_per_problem, sampling, dtype=dtype)
        print(hint_reading_line(reading))
