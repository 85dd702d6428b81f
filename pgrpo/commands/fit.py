"""`pgrpo fit`: training, through LightningCLI (`--print_config`, dotted overrides such as
`--model.intervention.init_args.gate one_sided`, `--ckpt_path last` to resume a killed run in place)."""

from pathlib import Path

from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import ProgressBar
from lightning.pytorch.cli import LightningCLI
from typing_extensions import override

from pgrpo.hosts.lightning.callbacks import CompletionSamples, HackMetricsLogger, StepCheckpoint
from pgrpo.hosts.lightning.data import GRPODataModule
from pgrpo.evaluation.end_eval import EndOfRunEval
from pgrpo.hosts.lightning.module import ProjectedGRPO
from pgrpo.hosts.lightning.progress import StepProgressBar
from pgrpo.records.summary import RunSummary


def fit(args: list[str] | None = None, other_commands: tuple[str, ...] = ()) -> None:
    """Train one arm on one seed: `pgrpo fit --config configs/erase.yaml` (`--help` lists every knob)."""
    PGRPOCLI(
        ProjectedGRPO, GRPODataModule, args=args, seed_everything_default=0,
        save_config_kwargs={"overwrite": True},
        parser_kwargs={"description": "Projected GRPO. Training: `pgrpo fit --config configs/erase.yaml`. "
                       f"Other commands: {', '.join(other_commands)} (each with --help)."},
    )


class PGRPOCLI(LightningCLI):
    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        # GRPO here has no validation/test/predict loop: training is the one Trainer command
        return {"fit": LightningCLI.subcommands()["fit"]}

    def add_arguments_to_parser(self, parser) -> None:
        # always-on callbacks get their own config sections, so trainer.callbacks stays free for optional ones
        parser.add_lightning_class_args(HackMetricsLogger, "metrics")
        parser.add_lightning_class_args(CompletionSamples, "samples")
        parser.add_lightning_class_args(StepCheckpoint, "checkpoint")
        # the evaluation before the summary: a resume with no step left evaluates in on_fit_end, as the summary prints
        parser.add_lightning_class_args(EndOfRunEval, "end_eval")
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
