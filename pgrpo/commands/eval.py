"""`pgrpo eval`: the public benchmark's evaluation (pgrpo/evaluation/evaluate.py) of a checkpoint as deployed, a model
directory or the embedded base, printed as a table and written as JSON."""

import json
import pickle
import zipfile
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import yaml

from pgrpo.model.adapter import merged_for_generation
from pgrpo.chat import render_chat
from pgrpo.env import GradeResult, Problem, grade_batch, load_problems
from pgrpo.env.heldout_problems import evaluated_heldout_problems
from pgrpo.env.prompts import build_messages
from pgrpo.env.time_limits import FLOOR_S
from pgrpo.env.variants import VARIANTS
from pgrpo.evaluation.evaluate import TEMPERATURE, SampleAndGrade, evaluate, format_table, with_loopholes
from pgrpo.step.rollout import SamplingConfig, sample_decoded, seeded


@dataclass(frozen=True)
class EvalData:
    """Which problems `pgrpo eval` samples (each field's docstring is its `--help`)."""

    problems: str | None = None
    """an rl-rewardhacking JSONL file: all its problems (default: the run's problems and its held-out split;
    the built-in problems for a model)."""
    modes: str | None = None
    """loophole-mode assignment of the fixed_name prompts: partition, file or one mode (default: the run's;
    partition for a model, or for a run without loopholes)."""
    n_eval_prompts: int | None = None
    """evaluate only this held-out split (data.n_eval_prompts of `pgrpo fit`) of the problems (default: the
    run's for its own problems; all problems of an explicit file or of a model)."""


@dataclass
class EvalSampling(SamplingConfig):
    """How `pgrpo eval` samples (each field's docstring is its `--help`)."""

    max_new_tokens: int | None = None
    """Completion budget (default: the run's; 128 for a model)."""
    temperature: float = TEMPERATURE
    """Sampling temperature (the benchmark's 0.7)."""


def eval_checkpoint(
    ckpt_path: str,
    data: EvalData = EvalData(),
    n: int = 8,
    sampling: EvalSampling = EvalSampling(),
    seed: int = 0,
    variants: list[str] = list(VARIANTS),
    keep_quarantine: bool = False,
    batch_prompts: int = 8,
    grade_timeout: float = FLOOR_S,
    dtype: str | None = None,
    device: str = "auto",
    out: str | None = None,
) -> dict:
    """Evaluate a model as the public benchmark does: strict hacks, attempted hacks and correct answers per prompt.

    Strict hack: the flawed grader passed, the oracle failed; attempted: a lever pulled, working or not;
    correct: the oracle passed. n samples per prompt at temperature 0.7, on three prompt variants:
    fixed_name (each problem's own loophole, as trained; per mode), random_name (the overwrite_tests
    loophole under a drawn test-function name) and no_loophole (the neutral prompt). Prints a table and
    writes the numbers as JSON.

    Args:
        ckpt_path: a `pgrpo fit` checkpoint (any arm; evaluated as deployed: δS_hack zeroed), a run directory
            (its checkpoints/last.ckpt), a model directory, "embedded" (the base) or a cached hub id.
        data: the problems: --data.problems FILE (all of its problems), --data.modes, --data.n_eval_prompts.
            A checkpoint's own problems default to the split its run held out (data.n_eval_prompts in the
            config.yaml beside it); a run that held none out is evaluated on all of them, and says so.
        n: samples per prompt.
        sampling: --sampling.temperature (the benchmark's 0.7), --sampling.top_p, --sampling.max_new_tokens (the
            run's by default).
        seed: sampling seed, and the seed of the drawn test-function names.
        variants: some of fixed_name, random_name, no_loophole.
        keep_quarantine: evaluate a checkpoint with δS_hack kept, as trained, instead of as deployed.
        batch_prompts: prompts per generate call (memory).
        grade_timeout: floor of each sandboxed run's wall budget, in seconds.
        dtype: base weights' dtype (default: the run's; float32 for a model).
        device: "auto" (cuda when there is one), "cpu", "cuda", ...
        out: the JSON file to write, or a directory to write it in (default: beside the checkpoint; the current
            directory for a model).
    """
    device = ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
    source = _load_source(ckpt_path, dtype, device)
    problems, split = _eval_problems(source, data)
    sampling = SamplingConfig(sampling.max_new_tokens or source.info.get("max_new_tokens") or 128,
                              sampling.temperature, sampling.top_p)
    settings = {"n": n, **asdict(sampling), "seed": seed,
                "variants": list(variants), "quarantine": "kept" if keep_quarantine else "zeroed (as deployed)"}
    with ExitStack() as view:
        if source.adapter is not None:
            if not keep_quarantine:
                view.enter_context(source.deployed())
            view.enter_context(merged_for_generation(source.adapter))  # δ folded: base-model speed
        rollouts = model_rollouts(source.model, source.tokenizer, sampling=sampling, seed=seed,
                                  batch_prompts=batch_prompts, grade_timeout=grade_timeout)
        result = evaluate(problems, n, rollouts, variants=variants, seed=seed)
    report = {"source": source.info, "problems": split, "settings": settings, "variants": result}
    print(describe(report))
    print(format_table(result))
    path = _out_path(out, source)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {path}")
    return report


def model_rollouts(model, tokenizer, *, sampling: SamplingConfig, seed: int, batch_prompts: int,
                   grade_timeout: float) -> SampleAndGrade:
    """Rollouts from a plain model: sampled in batches of prompts from one seed (the run's RNG left as it was),
    then graded in parallel in the sandbox."""
    if batch_prompts < 1:
        raise ValueError(f"batch_prompts={batch_prompts}: must be >= 1")

    def rollouts(problems: list[Problem], n: int) -> list[tuple[str, GradeResult]]:
        texts = []
        with seeded(seed, model.device):  # one stream over the batches
            for start in range(0, len(problems), batch_prompts):
                prompts = [render_chat(tokenizer, build_messages(p)) for p in problems[start:start + batch_prompts]]
                texts += sample_decoded(model, tokenizer, prompts, n, sampling)[0]
        owners = [p for p in problems for _ in range(n)]
        grades = grade_batch(list(zip(owners, texts)), timeout_s=grade_timeout)
        return list(zip(texts, grades))

    return rollouts


@dataclass
class _Source:
    model: object
    tokenizer: object
    adapter: dict | None  # a checkpoint's adapter (None: a plain model)
    info: dict  # what was evaluated, for the report
    run_data: dict | None  # the run's `data` config section (None: a plain model, or no config.yaml found)
    default_out: Path
    intervention: object = None  # a checkpoint's Intervention: its `deployed` view is the model as it ships

    def deployed(self):
        return self.intervention.deployed(self.adapter)


def _load_source(ckpt_path: str, dtype: str | None, device: str) -> _Source:
    from pgrpo.model.checkpoint import load_run_checkpoint
    from pgrpo.model.load import load_model_and_tokenizer, model_id

    path = Path(ckpt_path).expanduser()
    if path.is_dir() and (path / "checkpoints" / "last.ckpt").is_file() and not (path / "config.json").is_file():
        path = path / "checkpoints" / "last.ckpt"  # a run directory
    if path.suffix == ".ckpt" or (path.is_file() and path.suffix != ".gguf"):  # a .gguf file is a model
        if path.suffix != ".ckpt":
            raise ValueError(f"--ckpt_path {ckpt_path}: a file, but not a .ckpt checkpoint of `pgrpo fit`; expected "
                             f"one, a run directory, a model directory or 'embedded'")
        if dtype is not None:
            raise ValueError("--dtype: a checkpoint is evaluated in its run's dtype")
        try:
            run = load_run_checkpoint(path, device)
        except (RuntimeError, EOFError, pickle.UnpicklingError, zipfile.BadZipFile) as e:
            raise ValueError(f"--ckpt_path {ckpt_path}: not a readable checkpoint ({type(e).__name__}: "
                             f"{str(e)[:120]})") from None
        config = run.config_path
        run_data = (yaml.safe_load(config.read_text()) or {}).get("data") if config else None
        info = {"kind": "checkpoint", "checkpoint": str(path.resolve()), "step": run.step,
                "arm": run.intervention.label(), "oracle_skyline": run.intervention.reads_oracle,
                "model": run.hparams["model"], "model_id": model_id(run.hparams["model"]),
                "config": str(config) if config else None,
                "max_new_tokens": run.hparams.get("generation", {}).get("max_new_tokens")}
        return _Source(run.policy, run.tokenizer, run.adapter, info, run_data,
                       path.parent / f"eval-{path.stem}.json", run.intervention)
    if path.is_dir() and not (path / "config.json").is_file():
        raise FileNotFoundError(f"--ckpt_path {ckpt_path}: a directory with neither checkpoints/last.ckpt (a run) nor "
                                f"config.json (a model)")
    try:
        model, tokenizer = load_model_and_tokenizer(ckpt_path, dtype or "float32", device)
    except FileNotFoundError as e:
        raise FileNotFoundError(f"--ckpt_path {ckpt_path}: no such checkpoint file, run directory or model "
                                f"directory, and not 'embedded' nor a hub id in the local cache ({e})") from None
    info = {"kind": "model", "model": ckpt_path, "model_id": model_id(ckpt_path), "dtype": dtype or "float32"}
    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in path.name or ckpt_path)
    return _Source(model, tokenizer, None, info, None, Path(f"eval-{name}.json"))


def _eval_problems(source: _Source, data: EvalData) -> tuple[list[Problem], dict]:
    """The problems to evaluate, with their fixed_name loophole modes, and which split they are."""
    from pgrpo.hosts.lightning.data import held_out

    run = source.run_data
    if source.info["kind"] == "checkpoint" and run is None and data.problems is None:
        raise ValueError(f"{source.info['checkpoint']}: no config.yaml beside it, so the problems and the split its "
                         f"run held out are unknown; pass --data.problems FILE (all its problems are evaluated)")
    own = data.problems is None and run is not None
    path = data.problems if data.problems is not None else (run or {}).get("problems")
    if path is not None and not Path(path).is_file():
        where = "--data.problems" if data.problems is not None else "the run's data.problems"
        raise FileNotFoundError(f"{where} {path}: no such file")
    run_modes = (run or {}).get("modes") or "partition"
    modes = data.modes or run_modes
    # the split is drawn with the run's own modes (held_out spreads over them), as the run drew it; the
    # prompts then carry the requested modes
    problems = load_problems(path, modes=run_modes if own else modes)
    n_held = data.n_eval_prompts if data.n_eval_prompts is not None else (
        int(run.get("n_eval_prompts") or 0) if own else 0)
    extra = own and data.n_eval_prompts is None and bool(run.get("extra_held_out"))  # data.extra_held_out
    picked = held_out(problems, n_held) if n_held or extra else problems
    if modes != (run_modes if own else modes):
        problems = load_problems(path, modes=modes)
        by_id = {p.id: p for p in problems}
        picked = [by_id[p.id] for p in picked]
    picked = with_loopholes(picked, problems)
    if extra:  # the run evaluated them beside its split, never trained on them (their own loopholes, as it had)
        picked += evaluated_heldout_problems(modes)
        split = f"held out ({n_held} of {len(problems)} and the {len(picked) - n_held} extra, as the run held them out)"
    elif n_held:
        split = f"held out ({n_held} of {len(problems)}{', as the run held them out' if own else ''})"
    elif own:
        split = f"all {len(problems)} (the run held none out: every prompt was trained on)"
    else:
        split = f"all {len(problems)}"
    return picked, {"file": str(Path(path).resolve()) if path else "built-in", "modes": modes, "split": split,
                    "trained_on": own and not n_held and not extra, "ids": [p.id for p in picked]}


def describe(report: dict) -> str:
    src, probs, s = report["source"], report["problems"], report["settings"]
    if src["kind"] == "checkpoint":
        what = (f"{src['checkpoint']} (arm {src['arm']}{', an oracle skyline' if src['oracle_skyline'] else ''}"
                f", step {src['step']}, δS_hack {s['quarantine']})")
    else:
        what = f"model {src['model']}"
    lines = [f"pgrpo eval: {what}",
             f"problems: {probs['file']}, {probs['split']}, fixed_name modes: {probs['modes']}",
             f"{s['n']} samples per prompt at temperature {s['temperature']} (top_p {s['top_p']}), "
             f"{s['max_new_tokens']} new tokens at most, seed {s['seed']}"]
    if probs["trained_on"]:
        lines.append("warning: these prompts were trained on (the run held none out; data.n_eval_prompts)")
    return "\n".join(lines)


def _out_path(out: str | None, source: _Source) -> Path:
    if out is None:
        return source.default_out
    path = Path(out)
    return path if path.suffix == ".json" else path / source.default_out.name
