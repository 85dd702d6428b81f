"""A run's checkpoint read back as the adapted model it trained, without Lightning or the run's data.

A pgrpo checkpoint holds the knobs, V and the hyperparameters, never the frozen base: the base is
loaded again from where the run loaded it, and must still be the same model (V's cache key records
its content id, so an embedded default rebuilt from a changed recipe is caught, not silently used; a recipe
whose build came out byte-identical, both builds still in the cache, is the same base).
"""

from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from pgrpo.model.adapter import SVDAdapterLinear, attach_adapter, load_adapter_state_dict
from pgrpo.interventions import Intervention, from_config
from pgrpo.model.load import check_same_base, load_model_and_tokenizer

# the LightningModule's attribute that holds the policy: its state_dict keys start with it
POLICY_PREFIX = "policy."


@dataclass
class RunCheckpoint:
    path: Path
    hparams: dict
    step: int
    policy: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    adapter: dict[str, SVDAdapterLinear]

    @property
    def intervention(self) -> Intervention:
        """The intervention the run trained with (its `deployed` view is the model as it ships)."""
        return from_config(self.hparams["intervention"])

    @property
    def config_path(self) -> Path | None:
        """The run's resolved config (LightningCLI writes it beside checkpoints/), if it is still there."""
        for run_dir in (self.path.parent.parent, self.path.parent):
            if (run_dir / "config.yaml").is_file():
                return run_dir / "config.yaml"
        return None


def load_run_checkpoint(path: str | Path, device: str | torch.device = "cpu") -> RunCheckpoint:
    """The base the run trained, with its adapter attached and the checkpoint's knobs loaded (both of them)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path}: no such file")
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    if "hyper_parameters" not in ckpt or "pgrpo_basis" not in ckpt:
        raise ValueError(f"checkpoint {path}: not a pgrpo run checkpoint (no hyper_parameters or pgrpo_basis)")
    hp = ckpt["hyper_parameters"]
    check_same_base(ckpt["pgrpo_basis"]["meta"].get("model_id"), hp["model"], f"checkpoint {path}")
    policy, tokenizer = load_model_and_tokenizer(hp["model"], hp["dtype"], device)
    adapter = attach_adapter(policy, tuple(hp["target_modules"]), hp["max_rank"])
    state = {k.removeprefix(POLICY_PREFIX): v for k, v in ckpt["state_dict"].items()}
    load_adapter_state_dict(adapter, state)
    return RunCheckpoint(path, hp, int(ckpt["global_step"]), policy, tokenizer, adapter)
