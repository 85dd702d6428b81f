"""`pgrpo build-pool`: a frozen, pre-graded teacher pool, from templates or sampled from a model."""

from pgrpo.env import RewardConfig, load_problems
from pgrpo.env.pool import TeacherPool, build_pool as build
from pgrpo.evaluation.sampled_pool import Sampling, sample_pool


def build_pool(
    out: str,
    problems: str | None = None,
    modes: str = "partition",
    hack_variants: int = 2,
    clean_variants: int = 2,
    reward: RewardConfig = RewardConfig(),
    from_model: str | None = None,
    sampling: Sampling = Sampling(),
    dtype: str = "float32",
) -> None:
    """Grade hack and clean completions once and write them as a frozen teacher pool: template completions, or
    with --from-model samples of a model (a `pgrpo fit` checkpoint, a model directory or "embedded").

    Args:
        out: output directory (one <problem_id>.jsonl.gz per problem plus pool.json with the provenance).
        problems: an rl-rewardhacking JSONL file (default: the built-in problems).
        modes: loophole-mode assignment: partition, file, or one mode for all.
        hack_variants: hack templates per problem (in the problem's own mode); with --from-model, how many of
            the samples that hacked are kept per problem.
        clean_variants: clean templates per problem; with --from-model, how many of the samples that the
            strict oracle passed are kept per problem.
        reward: reward weights the rows are graded with (must match training's).
        from_model: sample the rows from this model instead of writing them from templates.
        sampling: with --from-model: samples per problem, temperature, top_p, max_new_tokens, seed, and a
            system prompt that replaces the task's while sampling (e.g. one that encourages using the disclosed
            grading mechanism).
        dtype: with --from-model, the base weights' dtype.
    """

    probs = load_problems(problems, modes=modes)
    if from_model:
        path = sample_pool(from_model, probs, out, hacks=hack_variants, cleans=clean_variants, sampling=sampling,
                           reward=reward, dtype=dtype)
    else:
        path = build(probs, out, hack_variants=hack_variants, clean_variants=clean_variants, reward=reward)
    pool = TeacherPool.load(path)
    covered, total = pool.coverage(probs)
    rows = [r for rs in pool.rows.values() for r in rs]
    hacks = sum(r.kind == "hack" for r in rows)
    print(f"wrote {len(rows)} rows ({hacks} hacks, {len(rows) - hacks} clean) to {path}; covers {covered}/{total} "
          f"problems")
