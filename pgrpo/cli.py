"""The `pgrpo` console script.

`pgrpo fit --config configs/erase.yaml` trains (LightningCLI: `--print_config`,
dotted overrides such as `--model.projection.arm route`, `--ckpt_path last`).
The other commands are plain functions whose docstrings are their `--help`.
"""

import inspect
import logging
import sys
import time
import warnings
from pathlib import Path

import transformers
from jsonargparse import CLI, set_parsing_settings
from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import ModelCheckpoint, ProgressBar
from lightning.pytorch.cli import LightningCLI
from typing_extensions import override

from pgrpo.adapter import DEFAULT_TARGETS
from pgrpo.callbacks import CompletionSamples, HackMetricsLogger
from pgrpo.data import GRPODataModule
from pgrpo.env import RewardConfig, load_problems
from pgrpo.basis import ExtractionConfig
from pgrpo.bench import bench
from pgrpo.evaluate import eval_checkpoint
from pgrpo.export import export
from pgrpo.module import ProjectedGRPO
from pgrpo.progress import StepProgressBar
from pgrpo.sampled_pool import Sampling, sample_pool
from pgrpo.report import report
from pgrpo.summary import RunSummary
from pgrpo.sweep import sweep


def selfcheck(problems: str | None = None) -> None:
    """Print the exploit x loophole-mode matrix and exit non-zero unless it is diagonal.

    Args:
        problems: an rl-rewardhacking JSONL file (default: the built-in problems).
    """
    from pgrpo.env.selfcheck import exploit_matrix, format_matrix, is_diagonal

    matrix = exploit_matrix(load_problems(problems) if problems else None)
    print(format_matrix(matrix))
    if not is_diagonal(matrix):
        sys.exit("selfcheck FAILED: an exploit fooled a mode other than its own, or the oracle")


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
    from pgrpo.env.pool import TeacherPool, build_pool as build

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
        model: "embedded", a checkpoint directory, or a cached hub id.
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
    from functools import partial

    from pgrpo.adapter import attach_adapter
    from pgrpo.basis import load_or_extract_basis
    from pgrpo.cache import cache_dir
    from pgrpo.controls import CONTROLS, control_basis
    from pgrpo.data import held_out
    from pgrpo.extraction import basis_overlap
    from pgrpo.models import load_model_and_tokenizer, model_id

    policy, tokenizer = load_model_and_tokenizer(model, dtype)
    adapter = attach_adapter(policy, tuple(target_modules), max_rank)
    problem_set = load_problems(problems, modes=modes)
    held = {p.id for p in held_out(problem_set, n_eval_prompts)}
    load = partial(load_or_extract_basis, policy, adapter, tokenizer, [p for p in problem_set if p.id not in held],
                   model_id=model_id(model), cache=cache_dir() / "bases", temperature=temperature)
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


def build_base(out: str | None = None, evaluate: bool = True, samples_per_problem: int = 8) -> None:
    """Build the embedded default (tokenizer, tiny Qwen3, pretraining; ~3 min on 2 cores) and say how it codes.

    Without --out it goes into the cache, where every command that uses `model: embedded` finds it
    (a second call returns at once). The build is deterministic. The evaluation samples every
    built-in problem under its own loophole hint at temperature 1 and grades the completions:
    format, solve (the strict oracle) and hack rates, overall and per mode. Then hint reading: every
    problem under every mode's hint, and of the samples that pull a lever, the share that pull the one
    the hint names (chance 1/6; ~1 min more).

    Args:
        out: build into this directory instead of the cache.
        evaluate: sample and grade the base after building it.
        samples_per_problem: completions per problem in the evaluation.
    """
    from pgrpo.embedded import build_embedded_default, embedded_default_path
    from pgrpo.base_eval import evaluate_base, hint_reading

    start = time.perf_counter()
    path = build_embedded_default(Path(out)) if out else embedded_default_path()
    print(f"embedded default: {path} ({time.perf_counter() - start:.0f} s)")
    if evaluate:
        rates = evaluate_base(path, samples_per_problem)
        for key, value in rates.items():
            print(f"{key}: {value:.3f}")
        reading = hint_reading(path, samples_per_problem)
        print(f"hint_reading: {reading['hint_reading']:.3f} ({reading['named_lever']} of the "
              f"{reading['lever_samples']} samples that pull a lever pull the one the hint names; chance 1/6)")


TOOLS = {
    "selfcheck": selfcheck, "build-pool": build_pool, "extract": extract, "sweep": sweep, "report": report,
    "bench": bench, "build-base": build_base, "export": export, "eval": eval_checkpoint,
}
# tools whose required arguments are positional (`pgrpo report LOGDIR`); the others take options only
POSITIONAL_TOOLS = {"report", "export"}


class PGRPOCLI(LightningCLI):
    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        # GRPO here has no validation/test/predict loop: training is the one Trainer command
        return {"fit": LightningCLI.subcommands()["fit"]}

    def add_arguments_to_parser(self, parser) -> None:
        # always-on callbacks get their own config sections, so trainer.callbacks stays free for optional ones
        parser.add_lightning_class_args(HackMetricsLogger, "metrics")
        parser.add_lightning_class_args(CompletionSamples, "samples")
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.add_lightning_class_args(RunSummary, "summary")
        parser.set_defaults({
            "checkpoint.every_n_train_steps": 25, "checkpoint.save_top_k": -1, "checkpoint.save_last": True,
            "trainer.log_every_n_steps": 1, "trainer.max_steps": 30, "trainer.precision": "32-true",
            "trainer.num_sanity_val_steps": 0, "trainer.limit_val_batches": 0,
        })
        # the data module's tokenizer, pool rewards and batch repetition must match the model's
        parser.link_arguments("model.model", "data.model")
        for field in ("format_bonus", "pass_reward"):
            parser.link_arguments(f"model.reward.{field}", f"data.reward.{field}")
        parser.link_arguments("model.num_iterations", "data.num_iterations")

    @override
    def _instantiate_trainer(self, config: dict, callbacks: list) -> Trainer:
        """The step bar goes last, after HackMetricsLogger has put the step's numbers in the bar; and only where a
        bar is shown and none was given: Lightning refuses a bar callback under enable_progress_bar=false."""
        given = config.get("callbacks") or []
        given = given if isinstance(given, list) else [given]
        if config.get("enable_progress_bar") is not False and not any(isinstance(c, ProgressBar) for c in given):
            callbacks = [*callbacks, StepProgressBar()]
        return super()._instantiate_trainer(config, callbacks)

    def before_instantiate_classes(self) -> None:
        """`--ckpt_path last` resumes the newest run of this logger name in place (same version dir)."""
        config = self.config.get(self.subcommand) if self.subcommand else None
        if config is None or not config.get("ckpt_path"):
            return
        logger = config.trainer.logger
        if not (hasattr(logger, "init_args") and "TensorBoardLogger" in str(logger.class_path)):
            return
        run_root = Path(logger.init_args.save_dir) / logger.init_args.name
        if config.ckpt_path == "last":
            found = sorted(run_root.glob("version_*/checkpoints/last.ckpt"), key=lambda p: p.stat().st_mtime)
            if not found:
                raise FileNotFoundError(f"--ckpt_path last: no {run_root}/version_*/checkpoints/last.ckpt to resume")
            config.ckpt_path = str(found[-1])
        ckpt = Path(config.ckpt_path)
        if not ckpt.is_file():
            raise FileNotFoundError(f"--ckpt_path {ckpt}: no such checkpoint file")
        if ckpt.parent.name == "checkpoints" and ckpt.parent.parent.name.startswith("version_"):
            # keep writing curves and checkpoints into the interrupted run's directory
            logger.init_args.version = ckpt.parent.parent.name


def underscored_options(args: list[str]) -> list[str]:
    """`--from-model X` means `--from_model X`: a tool's options are its parameters' names, either spelling."""
    out = []
    for arg in args:
        if arg.startswith("--") and not arg.startswith("---"):
            name, eq, value = arg[2:].partition("=")
            arg = f"--{name.replace('-', '_')}{eq}{value}"
        out.append(arg)
    return out


def bare_flags_to_true(tool, args: list[str]) -> list[str]:
    """`--json` alone means `--json true` for a tool's bool parameters (jsonargparse wants the value)."""
    flags = {f"--{name}" for name, p in inspect.signature(tool).parameters.items() if p.annotation in (bool, "bool")}
    out = []
    for i, arg in enumerate(args):
        out.append(arg)
        if arg in flags and (i + 1 == len(args) or args[i + 1].startswith("--")):
            out.append("true")
    return out


def _no_advert(record: logging.LogRecord) -> bool:
    return "litlogger" not in record.getMessage()


def main(argv: list[str] | None = None) -> None:
    # each config dataclass field's own docstring becomes its --help line (as litgpt does)
    set_parsing_settings(docstring_parse_attribute_docstrings=True)
    # a run's terminal says what pgrpo builds and how training goes: no bar per checkpoint load or save, and
    # not Lightning's internal deprecation notice (lightning 2.6 on torch 2.13) on every fit
    transformers.utils.logging.disable_progress_bar()
    warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated")
    # nor Lightning's advert for its cloud logger (lightning 2.6, every fit); its other notices stay
    logging.getLogger("lightning.pytorch.utilities.rank_zero").addFilter(_no_advert)
    args = sys.argv[1:] if argv is None else list(argv)
    if args and args[0] in TOOLS:
        name, tool = args[0], TOOLS[args[0]]
        CLI(tool, args=bare_flags_to_true(tool, underscored_options(args[1:])), as_positional=name in POSITIONAL_TOOLS)
        return
    PGRPOCLI(
        ProjectedGRPO, GRPODataModule, args=argv, seed_everything_default=0,
        save_config_kwargs={"overwrite": True},
        parser_kwargs={"description": "Projected GRPO. Training: `pgrpo fit --config configs/erase.yaml`. "
                       f"Other commands: {', '.join(TOOLS)} (each with --help)."},
    )


if __name__ == "__main__":
    main()
