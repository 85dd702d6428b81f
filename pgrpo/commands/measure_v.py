"""`pgrpo measure-v`: V measured offline on a base, each figure beside its null (pgrpo/directions/measure.py)."""

import json
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

from pgrpo.commands.fit import PGRPOCLI
from pgrpo.directions.basis import completion_grads, pair_prompts
from pgrpo.directions.measure import (kept_shares, markdown, null_bases, pair_sides, rollout_separations,
                                      sample_base_rollouts)
from pgrpo.directions.calibration import SEED
from pgrpo.hosts.lightning.data import GRPODataModule
from pgrpo.hosts.lightning.module import ProjectedGRPO
from pgrpo.records.cache import announce

CLONE = Path(__file__).resolve().parents[2]
SMOLLM2_BENCH = ["configs/vanilla.yaml", "configs/models/smollm2_primed.yaml"]
PRIMED_ARMS = ["honest", "vanilla", "erase", "random_v", "adv_gate", "adv_gate_random_v", "probe_penalty",
               "probe_penalty_random"]


@dataclass
class Preset:
    configs: list[str]  # the fit configs of the run whose base and V are measured (its vanilla cell)
    results: str | None  # the sweep whose kept cells trained on that base and V
    arms: list[str] | None


PRESETS = {
    "embedded": Preset(["configs/vanilla.yaml"], "results/confirmatory-2",
                       ["honest", "vanilla", "erase", "random_v", "route", "route_random_v", "adv_gate",
                        "adv_gate_random_v"]),
    "smollm2-135m-instruct+primed": Preset(SMOLLM2_BENCH, "results/smollm2-primed",
                                           [f"{arm}+smollm2_primed" for arm in PRIMED_ARMS]),
}


def measure_v(model: str = "embedded", rollouts: int = 128, null_draws: int = 8, results: str | None = "preset",
              arms: list[str] | None = None, window: int = 20, fit_args: list[str] = [], out: str | None = None,
              seed: int = SEED) -> None:
    """Measure the hack directions V of a base beside their nulls, and print them as markdown tables.

    The base and V are the ones MODEL's vanilla cell trains with: `configs/vanilla.yaml` for the embedded default,
    with `configs/models/smollm2_primed.yaml` after it for any other model (SmolLM2's bench sizes; `model.model`
    set to MODEL). Three measurements:

    1. The extraction pairs' two sides: the mean ‖g‖ of each side's ∇δS NLL (as extraction computes it), the
       cosine of span(V) with it, ‖P_V g‖/‖g‖, and its hack-ward share ‖relu(V g)‖/‖g‖, each beside the same in
       random subspaces of V's k (NULL_DRAWS of them).
    2. The base's rollouts on the training problems, sampled, graded and backpropagated as the step does: how
       well V's per-rollout hack-ward share ranks the exploited rollouts above the clean ones (AUROC with Hanley
       and McNeil's 95% interval, the counts, and random subspaces' AUROC), scored on each rollout's part of the
       step's gradient and on its own ∇NLL.
    3. V's hack-ward share of the students' gradient over training, in STEP windows, per arm of a sweep's kept
       cells (RESULTS), beside a random direction's, with ⟨V, δS⟩ at the end (< 0: hack-ward). Honest, which has
       no loophole, is the null that matters for the other arms.

    Args:
        model: the base: embedded, smollm2-135m-instruct+primed (`make setup-smollm2` once), smollm2-135m-instruct,
            or any model a config names.
        rollouts: base rollouts to sample (rounded up to whole groups; rounds of every training problem, round i
            from SEED + i); 0 skips them.
        null_draws: random subspaces of V's k behind each null.
        results: the sweep's kept cells to read (pgrpo sweep --results); "preset": MODEL's own (the embedded
            default's results/confirmatory-2, the primed SmolLM2's results/smollm2-primed; none for others);
            "none": skip.
        arms: the arms to read there (default: MODEL's preset, else every arm that logs the share).
        window: steps a window of the kept runs' table.
        fit_args: more `pgrpo fit` overrides of the measured run, e.g. ["--model.generation.max_new_tokens=24"].
        out: also write measure-v.json and measure-v.md into this directory.
        seed: the first round's sampling seed (the placebos' calibration samples from the same one).
    """
    preset = PRESETS.get(model, Preset(SMOLLM2_BENCH, None, None))
    configs = [CLONE / c for c in preset.configs]
    absent = [str(c) for c in configs if not c.is_file()]
    if absent:
        raise SystemExit(f"pgrpo measure-v: the fit configs {absent} are not here: run it from a clone")
    args = [a for c in configs for a in ("--config", str(c))]
    args += [f"--model.model={model}", "--trainer.logger=false", "--trainer.enable_progress_bar=false", *fit_args]
    with warnings.catch_warnings():  # "args given beside sys.argv": these are the measured run's, not ours
        warnings.filterwarnings("ignore", message="LightningCLI's args parameter")
        cli = PGRPOCLI(ProjectedGRPO, GRPODataModule, args=args, run=False, seed_everything_default=0)
    module, data, trainer = cli.model, cli.datamodule, cli.trainer
    module.configure_model()
    data.setup("fit")
    trainer.strategy.connect(module)  # the step's backward goes through the trainer's strategy, as in a fit
    module.trainer = trainer
    trainer.datamodule = data  # type: ignore[attr-defined]  # as Trainer.fit attaches it (a plain attribute)
    basis = module.extract_basis(data.extraction_problems)
    nulls = null_bases(basis, null_draws)

    pairs = module.extraction_pairs()
    prompts = pair_prompts(module.tokenizer, pairs)
    extraction, temperature = module.resolved_extraction(), module.generation.temperature
    announce(f"measure-v: the gradients of {2 * len(pairs)} pair completions")
    g_hack, g_clean = (completion_grads(module.policy, module.adapter, module.tokenizer, prompts,
                                        [getattr(p, side) for p in pairs], extraction, temperature)
                       for side in ("hack", "clean"))
    sampled = sample_base_rollouts(module, rollouts, seed) if rollouts else None
    # a preset's sweep is the clone's; one given is where the caller says
    kept = CLONE / preset.results if results == "preset" and preset.results else None if results in (
        "preset", "none", None) else Path(results).resolve()
    result = {
        "model": model, "basis": {**basis.meta, "k_total": basis.k_total, "digest": basis.digest()[:16]},
        "pairs": {"n": len(pairs), **{k: asdict(v) for k, v in pair_sides(g_hack, g_clean, basis, nulls).items()}},
        "rollouts": None if sampled is None else {
            "n": len(sampled.exploited), "live": int(sampled.live.sum()), "seed": seed,
            **{k: asdict(v) for k, v in rollout_separations(sampled, basis, nulls).items()}},
        "null_draws": null_draws,
        "kept": None if kept is None else {
            "results": str(kept.relative_to(CLONE) if kept.is_relative_to(CLONE) else kept), "window": window,
            "arms": [asdict(a) for a in kept_shares(kept, arms if arms is not None else preset.arms, window)]},
    }
    text = markdown(result)
    print(text)
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "measure-v.json").write_text(json.dumps(result, indent=1) + "\n")
        (Path(out) / "measure-v.md").write_text(text)
        print(f"wrote {out}/measure-v.json and measure-v.md")
