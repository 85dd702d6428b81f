"""`pgrpo export`: the model a run deploys, written as a plain Hugging Face checkpoint.

Deployed means δS folded into each targeted Linear's weight and δS_hack dropped: the route arm's
quarantine never ships (on the other arms it is zero anyway). What is written has the base's own
architecture, so `from_pretrained(DIR)` and vLLM load it without pgrpo.
"""

import shutil
from pathlib import Path

import torch

from pgrpo.model.adapter import fold_into_base
from pgrpo.model.checkpoint import load_run_checkpoint
from pgrpo.interventions import from_config

# the config of the run, copied beside the weights under this name
SOURCE_CONFIG = "pgrpo_config.yaml"


def export(ckpt: str, out: str | None = None, device: str = "auto") -> None:
    """Write the deployed model of a run's checkpoint (δS folded in, δS_hack dropped) as a Hugging Face checkpoint.

    The directory gets the weights, the tokenizer, a model card (README.md) naming the arm, the steps
    and the source config, and that config itself as pgrpo_config.yaml.

    Args:
        ckpt: a checkpoint of `pgrpo fit` (…/checkpoints/last.ckpt or epoch=…-step=….ckpt).
        out: the directory to write; it must not exist or be empty (default: deployed-step<N> in the run's
            directory).
        device: where the adapter's SVD and the fold run: "auto" (cuda when there is one), "cpu", "cuda", ...
            (a real model's hundreds of SVDs take minutes on a few CPU cores, seconds on a GPU).
    """
    device = ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
    run = load_run_checkpoint(ckpt, device)
    out_dir = Path(out) if out else run.path.parent.parent / f"deployed-step{run.step}"
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise FileExistsError(f"--out {out_dir}: exists and is not an empty directory; pick a new one")
    quarantine_norm = sum(float(m.delta_s_hack.detach().norm() ** 2) for m in run.adapter.values()) ** 0.5
    fold_into_base(run.policy, run.adapter, ("delta_s",))
    run.policy.save_pretrained(out_dir)
    run.tokenizer.save_pretrained(out_dir)
    config = run.config_path
    if config is not None:
        shutil.copyfile(config, out_dir / SOURCE_CONFIG)
    (out_dir / "README.md").write_text(model_card(run.hparams, run.step, run.path, config, quarantine_norm))
    print(f"exported the deployed model of {run.path} (step {run.step}) to {out_dir}")


def model_card(hparams: dict, step: int, ckpt: Path, config: Path | None, quarantine_norm: float) -> str:
    intervention = from_config(hparams["intervention"])
    arm, oracle = intervention.label(), intervention.reads_oracle
    base = hparams["model"]
    source = f"`{config}` (copied here as `{SOURCE_CONFIG}`)" if config else "not found beside the checkpoint"
    return f"""---
library_name: transformers
tags: [pgrpo, grpo, reward-hacking]
---
# pgrpo export: arm `{arm}`, step {step}

- arm: `{arm}` ({intervention!r}){" (an oracle skyline: its reward used the oracle's labels)" if oracle else ""}
- steps: {step} optimizer steps
- base model: `{base}` ({hparams["dtype"]}), adapted Linears: {", ".join(hparams["target_modules"])}
- source checkpoint: `{ckpt}`
- source config: {source}

The deployed model: each adapted Linear's weight is W + U diag(δS) Vh, folded in fp32 and rounded
once to {hparams["dtype"]}. δS_hack (norm {quarantine_norm:.4g}) was dropped: it holds what the route
arm quarantined and is zeroed at deployment. Load it with `AutoModelForCausalLM.from_pretrained`.
"""
