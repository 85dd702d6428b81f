"""`pgrpo build-base`: build the embedded default and say how it codes before any GRPO."""

import time
from pathlib import Path

from pgrpo.evaluation.base_eval import evaluate_base, hint_reading, hint_reading_line
from pgrpo.model.embedded import build_embedded_default, embedded_default_path


def build_base(out: str | None = None, evaluate: bool = True, samples_per_problem: int = 8,
               openings: str = "shared") -> None:
    """Build the embedded default (tokenizer, tiny Qwen3, pretraining; ~3 min on 2 cores) and say how it codes.

    Without --out it goes into the cache, where every command that uses `model: embedded` finds it
    (`model: embedded-distinct` with --openings distinct; a second call returns at once). The build is
    deterministic. The evaluation samples every built-in problem under its own loophole hint at
    temperature 1 and grades the completions:
    format, solve (the strict oracle) and hack rates, overall and per mode. Then hint reading: every
    problem under every mode's hint, and of the samples that pull a lever, the share that pull the one
    the hint names (chance 1/6; ~1 min more).

    Args:
        out: build into this directory instead of the cache.
        evaluate: sample and grade the base after building it.
        samples_per_problem: completions per problem in the evaluation.
        openings: how the hacks the base is pretrained on open: shared (every mode's after one choice line)
            or distinct (each mode's lever opens with a token of its own: the substrate `embedded-distinct`).
    """

    start = time.perf_counter()
    path = build_embedded_default(Path(out), openings) if out else embedded_default_path(openings=openings)
    print(f"embedded default: {path} ({time.perf_counter() - start:.0f} s)")
    if evaluate:
        rates = evaluate_base(path, samples_per_problem)
        for key, value in rates.items():
            print(f"{key}: {value:.3f}")
        reading = hint_reading(path, samples_per_problem)
        print(hint_reading_line(reading))
