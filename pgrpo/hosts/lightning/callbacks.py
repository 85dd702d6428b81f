"""Callbacks beside the training step: curves and text, the V refresh, the deployment eval."""

import time
from collections import deque
from contextlib import nullcontext

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_warn
from typing_extensions import override

from pgrpo.env import Problem
from pgrpo.env.variants import VARIANTS
from pgrpo.evaluation.evaluate import evaluate, metrics as eval_metrics, variant_problems, with_loopholes
from pgrpo.directions.extraction import basis_overlap
from pgrpo.step.rollout import seeded
from pgrpo.records.summary import WINDOW

# shown in the progress bar under these names, as means over the last WINDOW generated batches (the window of
# the run's summary); everything else goes to the loggers only
PROGRESS_KEYS = {"hack/student": "hack", "solve/student": "solve"}


class StepCheckpoint(ModelCheckpoint):
    """Lightning's ModelCheckpoint that also saves the run's final step. Lightning's own end-of-training save
    happens only if no last.ckpt was ever written, so a run whose max_steps is not a multiple of
    every_n_train_steps would end with its last.ckpt steps behind the knobs it trained (and an export, an
    eval or a lengthened sweep would start from there)."""

    @property
    @override
    def state_key(self) -> str:
        # ModelCheckpoint's own key: a checkpoint written before this subclass must hand its state (last.ckpt's
        # path) to the resumed run, which would otherwise write last-v1.ckpt beside a stale last.ckpt
        return super().state_key.replace(type(self).__qualname__, ModelCheckpoint.__qualname__, 1)

    @override
    def on_train_end(self, trainer, pl_module) -> None:
        if not self._should_skip_saving_checkpoint(trainer):
            candidates = self._monitor_candidates(trainer)
            self._save_topk_checkpoint(trainer, candidates)
            self._save_last_checkpoint(trainer, candidates)
        super().on_train_end(trainer, pl_module)


class HackMetricsLogger(L.Callback):
    """Logs every number the step returned (hack/solve rates, reward, kl, hackward_share/*, adapter/*, time/*), and
    at fit start data/pool_coverage: the fraction of training problems the teacher pool covers (the only ones
    trained on). Puts the running means of PROGRESS_KEYS in the progress bar.
    """

    def __init__(self):
        self._recent = {key: deque(maxlen=WINDOW) for key in PROGRESS_KEYS}

    @override
    def on_train_start(self, trainer, pl_module) -> None:
        coverage = getattr(trainer.datamodule, "pool_coverage", None)
        if coverage is None:
            return  # no teacher pool
        # a property of the run, not of a step: once, at the step the first batch's metrics will be logged at
        log_scalars(trainer, {"data/pool_coverage": coverage}, step=trainer.global_step)

    @override
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        metrics = outputs["metrics"]
        if trainer.world_size > 1:
            metrics = mean_over_ranks(metrics)
        for key, values in self._recent.items():
            if key in metrics:  # a step that reused its batch (num_iterations > 1) has no rollout numbers
                values.append(metrics[key])
        pl_module.log_dict({PROGRESS_KEYS[k]: sum(v) / len(v) for k, v in self._recent.items() if v}, prog_bar=True,
                           logger=False, on_step=True, on_epoch=False, batch_size=1)
        # straight to the loggers, every step: through self.log a key would be written again with its last value
        # on a step that did not produce it (the rollout numbers of a batch reused under num_iterations > 1)
        log_scalars(trainer, metrics)


def mean_over_ranks(metrics: dict[str, float]) -> dict[str, float]:
    """Each metric averaged over the ranks that logged it, in one collective.

    Ranks hold equal shares of the prompts, so a rate over all of a rank's rows averages to the global
    batch's; a conditional one (per mode, given an attempt) is the mean of the ranks' rates. Keys may
    differ between ranks (modes present, hacks seen), which rules out a reduce per key.
    """
    gathered: list[dict[str, float]] = [{} for _ in range(torch.distributed.get_world_size())]
    torch.distributed.all_gather_object(gathered, metrics)
    keys = sorted({k for m in gathered for k in m})
    return {k: sum(m[k] for m in gathered if k in m) / sum(k in m for m in gathered) for k in keys}


class CompletionSamples(L.Callback):
    """A few student completions with their grades as TensorBoard text, from the first step and then from the
    first generated batch at least `every_n_steps` after the last one shown."""

    def __init__(self, every_n_steps: int = 10):
        self.every_n_steps = every_n_steps
        self._shown_at: int | None = None

    @override
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        # a step that reused its batch (num_iterations > 1) has no samples of its own: wait for the next generation
        if self.every_n_steps <= 0 or not outputs["samples"]:
            return
        if self._shown_at is not None and step - self._shown_at < self.every_n_steps:
            return
        self._shown_at = step
        text = "\n\n".join(format_sample(s) for s in outputs["samples"])
        for logger in trainer.loggers:
            if isinstance(logger, TensorBoardLogger):
                logger.experiment.add_text("samples", text, step)


def format_sample(sample: dict) -> str:
    flags = ", ".join(f"{k}={sample[k]}" for k in ("reward", "passed", "gt_correct", "exploited", "mechanism"))
    # four-space indent renders the completion verbatim in TensorBoard's markdown
    body = "\n".join("    " + line for line in sample["completion"].splitlines()) or "    (empty)"
    return f"**problem {sample['problem']}** (mode `{sample['mode']}`): {flags}\n\n{body}"


class BasisRefresh(L.Callback):
    """Every N steps, re-extract V against the current policy (δS_hack zeroed) and log how far it moved.

    basis/refresh_overlap: mean principal-angle cosine between the old and new V over all rows (1 = same span,
    ~sqrt(k/r) = unrelated); basis_overlap/<module> per module. Which V comes back is the intervention's
    (`refresh`): a real V re-extracted, a control V as its placebo says.
    """

    def __init__(self, every_n_steps: int = 2, warn_below: float = 0.2):
        """
        Args:
            every_n_steps: optimizer steps between refreshes.
            warn_below: warn when basis/refresh_overlap drops below this (the refresh may have rotated off the hack).
        """
        if every_n_steps < 1:
            raise ValueError(f"BasisRefresh.every_n_steps={every_n_steps}: must be >= 1")
        self.every_n_steps = every_n_steps
        self.warn_below = warn_below

    @override
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step % self.every_n_steps:
            return
        start = time.perf_counter()
        old = pl_module.basis
        new = pl_module.intervention.refresh(pl_module, old).to(pl_module.device)
        overall, per_module = basis_overlap(old, new)
        pl_module.basis = new
        log_scalars(trainer, {"basis/refresh_overlap": overall, "time/refresh": time.perf_counter() - start,
                              **{f"basis_overlap/{name}": v for name, v in per_module.items()}})
        if overall < self.warn_below:
            lowest = ", ".join(f"{n} {v:.2f}" for n, v in sorted(per_module.items(), key=lambda kv: kv[1])[:3])
            rank_zero_warn(f"V refresh at step {trainer.global_step}: overlap with the previous V is {overall:.3f} "
                           f"< {self.warn_below}; the refreshed V may have rotated off the hack (lowest: {lowest})")


class DeploymentEval(L.Callback):
    """Every N steps and at the end: the benchmark's evaluation (pgrpo.evaluation.evaluate) of the held-out prompts with
    δS_hack zeroed, as deployed, and with it kept.

    deploy/<variant>/{strict_hack,attempted,correct}: the rates of `pgrpo eval` on the held-out problems,
    for the variants fixed_name (per loophole mode too: deploy/fixed_name/<mode>/...), random_name (plus
    run_tests_lever) and no_loophole; deploy/hack and deploy/solve are fixed_name's strict hack and correct
    rates. The same keys with `_kept` appended: the same prompts and sampling seed with the quarantine kept (the
    route arm's view as trained). Needs data.n_eval_prompts > 0 (prompts never trained on).
    """

    def __init__(self, every_n_steps: int = 10, samples_per_prompt: int = 4, seed: int = 0,
                 temperature: float | None = None, variants: list[str] = list(VARIANTS)):
        """
        Args:
            every_n_steps: optimizer steps between evals (the last step is always evaluated).
            samples_per_prompt: completions per held-out prompt and variant.
            seed: sampling seed of every eval (the same each time: curves move with the model, not the noise),
                and the seed of the random_name variant's drawn test-function names.
            temperature: sampling temperature of the eval (None: the run's; `pgrpo eval` uses the benchmark's 0.7).
            variants: some of fixed_name, random_name, no_loophole.
        """
        if every_n_steps < 1:
            raise ValueError(f"DeploymentEval.every_n_steps={every_n_steps}: must be >= 1")
        variant_problems([], variants)  # refuses unknown variants now, not at the first eval
        self.every_n_steps = every_n_steps
        self.samples_per_prompt = samples_per_prompt
        self.seed = seed
        self.temperature = temperature
        self.variants = list(variants)

    @override
    def on_train_start(self, trainer, pl_module) -> None:
        if not trainer.datamodule.eval_problems:
            raise ValueError("DeploymentEval needs held-out prompts: set data.n_eval_prompts (e.g. 6)")

    @override
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if step % self.every_n_steps and step < trainer.max_steps:
            return
        start = time.perf_counter()
        dm = trainer.datamodule
        metrics = deployment_eval(pl_module, with_loopholes(dm.eval_problems, dm.problems), self.samples_per_prompt,
                                  self.seed, temperature=self.temperature, variants=self.variants)
        log_scalars(trainer, metrics | {"time/deploy_eval": time.perf_counter() - start})


def deployment_eval(pl_module, problems: list[Problem], samples_per_prompt: int, seed: int, *,
                    temperature: float | None = None, variants: list[str] = list(VARIANTS)) -> dict[str, float]:
    """deploy/... with δS_hack zeroed and deploy/..._kept without, from one sampling seed (see DeploymentEval).

    δS_hack is restored bit for bit, and the run's RNG streams are left as they were (a run with evals
    samples its training rollouts exactly as one without).
    """
    deployed = _eval(pl_module, problems, samples_per_prompt, seed, temperature, variants, zero_quarantine=True)
    quarantined = any(bool(m.delta_s_hack.detach().any()) for m in pl_module.adapter.values())
    # an empty quarantine changes nothing: same weights, same seed, same samples
    kept = (_eval(pl_module, problems, samples_per_prompt, seed, temperature, variants, zero_quarantine=False)
            if quarantined else deployed)
    return _deploy_keys(deployed) | _deploy_keys(kept, "_kept")


def _deploy_keys(result: dict, suffix: str = "") -> dict[str, float]:
    out = eval_metrics(result, "deploy/", suffix)
    if "fixed_name" in result:  # the keys `pgrpo report` reads, from before the benchmark's variants
        out[f"deploy/hack{suffix}"] = result["fixed_name"]["strict_hack_rate"]
        out[f"deploy/solve{suffix}"] = result["fixed_name"]["correct_rate"]
    return out


def _eval(pl_module, problems: list[Problem], n: int, seed: int, temperature: float | None, variants: list[str],
          zero_quarantine: bool) -> dict:
    view = pl_module.intervention.deployed(pl_module.adapter) if zero_quarantine else nullcontext()
    sampler = pl_module.sampler if temperature is None else pl_module.sampler.with_settings(temperature=temperature)
    with seeded(seed, pl_module.device), view:
        return evaluate(problems, n, sampler.rollouts, variants=variants, seed=seed)


def log_scalars(trainer, metrics: dict[str, float], step: int | None = None) -> None:
    """Write now, at `step` (default: the step of the batch just trained, where its step metrics are logged).

    Straight to the loggers rather than through self.log, so these numbers are never dropped by
    trainer.log_every_n_steps nor repeated on a step that did not produce them.
    """
    for logger in trainer.loggers:
        logger.log_metrics(metrics, step=trainer.global_step - 1 if step is None else step)
