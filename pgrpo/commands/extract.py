"""`pgrpo extract`: the hack directions V of a model for a run's adapter layout (cached), and its controls."""

from functools import partial

from pgrpo.model.adapter import DEFAULT_TARGETS, attach_adapter
from pgrpo.directions.basis import ExtractionConfig, load_or_extract_basis
from pgrpo.records.cache import cache_dir
from pgrpo.directions.controls import CONTROLS, control_basis
from pgrpo.hosts.lightning.data import held_out
from pgrpo.env import load_problems
from pgrpo.directions.extraction import basis_overlap
from pgrpo.model.load import hack_openings, load_model_and_tokenizer, model_id


def extract(
    model: str = "embedded",
    dtype: str = "float32",
    problems: str | None = None,
    modes: str = "partition",
    extraction: ExtractionConfig = ExtractionConfig(),
    temperature: float = 1.0,
    n_eval_prompts: int = 0,
    target_modules: list[str] = list(DEFAULT_TARGETS),
    max_rank: int | None = None,
    controls: bool = False,
    out: str | None = None,
) -> None:
    """Extract the hack directions V for a model (cached by model, pairs, k and tau) and report them.

    Args:
        model: "embedded" (or "embedded-distinct"), a checkpoint directory, or a cached hub id.
        dtype: base weights' dtype.
        problems: an rl-rewardhacking JSONL file (default: the built-in problems).
        modes: loophole-mode assignment: partition, file, or one mode for all.
        extraction: pairs source, k, tau_axis, noise floor, held-out pairs.
        temperature: the sampling temperature of the run that will use V (its logprobs are scored at it).
        n_eval_prompts: problems the run holds out for its deployment eval; V never sees them (as in a fit).
        target_modules: the Linears the run adapts (as the run's model.target_modules).
        max_rank: the run's adapter rank cap (as its model.max_rank; default full rank).
        controls: also build each negative-control V (random, shuffled, nonhack; k matched per module) and
            print its principal-angle overlap with the real V (1 = the same subspace).
        out: also save V to this safetensors file.
    """

    policy, tokenizer = load_model_and_tokenizer(model, dtype)
    adapter = attach_adapter(policy, tuple(target_modules), max_rank)
    problem_set = load_problems(problems, modes=modes)
    held = {p.id for p in held_out(problem_set, n_eval_prompts)}
    load = partial(load_or_extract_basis, policy, adapter, tokenizer, [p for p in problem_set if p.id not in held],
                   model_id=model_id(model), cache=cache_dir() / "bases", temperature=temperature,
                   openings=hack_openings(model))
    basis = load(extraction)
    for key, value in sorted(basis.meta.items()):
        print(f"{key}: {value}")
    if controls:
        for control in CONTROLS:
            other = control_basis(control, basis, extraction, lambda c, cfg: load(cfg, control=c))
            print(f"overlap with the real V, {control} V: {basis_overlap(basis, other)[0]:.3f}")
    if out:
        basis.save(out)
        print(f"saved V to {out}")
