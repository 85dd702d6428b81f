"""FSDP for pgrpo: Lightning's ModelParallelStrategy, with checkpoints that treat the knobs as what they are.

`ProjectedGRPO.configure_model` shards the frozen base (see `pgrpo.model.adapter.shard_base`) when a strategy gives
it a device mesh; the knobs stay plain tensors, whole on every rank, and only they are trained. So a checkpoint
needs no collective: rank 0 writes its knobs and its plain optimizer state, as under DDP. ModelParallelStrategy
itself would gather the whole sharded base onto rank 0 at every save (only for on_save_checkpoint to drop it),
and its optimizer loading (torch.distributed.checkpoint's set_optimizer_state_dict) first runs a zero-gradient
step that gives every knob Adam state at step 1, which changes the next update of a knob that had none saved
(a route run's quarantine before anything was routed).
"""

from collections.abc import Mapping
from typing import Any, Literal

from lightning.pytorch.strategies import ModelParallelStrategy, Strategy
from torch.optim import Optimizer
from typing_extensions import override


class ShardedBaseStrategy(ModelParallelStrategy):
    """FSDP2 over `data_parallel_size` processes (tensor_parallel_size 1); knob-only, single-file checkpoints."""

    def __init__(self, data_parallel_size: Literal["auto"] | int = "auto", process_group_backend: str | None = None):
        """
        Args:
            data_parallel_size: processes that share the base ("auto": all of them, over every node).
            process_group_backend: "gloo" on CPU, "nccl" on GPUs (None: Lightning's default for the device).
        """
        super().__init__(data_parallel_size=data_parallel_size, tensor_parallel_size=1,
                         save_distributed_checkpoint=False, process_group_backend=process_group_backend)

    @override
    def setup_environment(self) -> None:
        if self._data_parallel_size == "auto":
            self._data_parallel_size = self.num_nodes * self.num_processes  # every process shards the base
        super().setup_environment()

    @property
    @override
    def lightning_restore_optimizer(self) -> bool:
        return True

    @override
    def lightning_module_state_dict(self) -> dict[str, Any]:
        # the trainable parameters only: the knobs (plain tensors); the frozen base is never gathered
        return {name: p.detach() for name, p in self.lightning_module.named_parameters() if p.requires_grad}

    @override
    def optimizer_state(self, optimizer: Optimizer) -> dict[str, Any]:
        return Strategy.optimizer_state(self, optimizer)  # the knobs' AdamW state, the same on every rank

    @override
    def load_checkpoint(self, checkpoint_path, weights_only: bool | None = None) -> dict[str, Any]:
        return Strategy.load_checkpoint(self, checkpoint_path, weights_only)

    @override
    def load_model_state_dict(self, checkpoint: Mapping[str, Any], strict: bool = True) -> None:
        Strategy.load_model_state_dict(self, checkpoint, strict)

    @override
    def load_optimizer_state_dict(self, checkpoint: Mapping[str, Any]) -> None:
        Strategy.load_optimizer_state_dict(self, checkpoint)
