"""SVD adapter: train two knobs per Linear in the singular-value basis of its frozen weight.

For W = U Σ Vh the adapted layer computes y = W x + U ((δS + δS_hack) ⊙ (Vh x)).
It does so as one Linear with the folded weight W + U diag(δS + δS_hack) Vh (fp32, rounded once to the
base dtype), which is exactly W when both knobs are zero: the model is then bit-identical to the base and
doubles as the reference model π_ref. The fold costs one (d_out, r, d_in) product per call, where the
low-rank term costs two token-sized matmuls in the forward and two more in the backward; the knobs'
gradient, Σ_tokens (U^T g) ⊙ (Vh x), is computed in the backward (`_FoldedLinear`).
"""

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.distributed.tensor import DTensor

DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "gate_proj", "down_proj")
KNOB_NAMES = ("delta_s", "delta_s_hack")


class SVDAdapterLinear(nn.Module):
    """A frozen nn.Linear plus trainable fp32 knobs `delta_s` and `delta_s_hack` of shape (r,).

    U (d_out, r) and Vh (r, d_in) are non-persistent buffers: they are derived from
    the base weight, so they stay out of state_dict (checkpoints hold the knobs only).
    `shard_base` turns them into frozen parameters, so that FSDP shards them too.
    `max_rank` keeps only the top singular directions (less memory, less capacity).
    """

    def __init__(self, base: nn.Linear, max_rank: int | None = None) -> None:
        super().__init__()
        if not isinstance(base, nn.Linear):
            raise TypeError(f"SVDAdapterLinear wraps nn.Linear, got {type(base).__name__}")
        if max_rank is not None and max_rank < 1:
            raise ValueError(f"max_rank must be >= 1 or None, got {max_rank}")
        base.requires_grad_(False)
        self.base = base
        weight = base.weight
        # fp32 copy with autograd off: U and Vh must never carry a graph.
        with torch.no_grad():
            u, _, vh = torch.linalg.svd(weight.detach().float(), full_matrices=False)
        rank = u.shape[1] if max_rank is None else min(max_rank, u.shape[1])
        self.register_buffer("U", u[:, :rank].to(weight.dtype).contiguous(), persistent=False)  # (d_out, r)
        self.register_buffer("Vh", vh[:rank].to(weight.dtype).contiguous(), persistent=False)  # (r, d_in)
        # Knobs stay fp32 on a bf16 base: bf16 knobs lose small updates and mixed dtypes crashed the reference.
        self.delta_s = nn.Parameter(torch.zeros(rank, device=weight.device, dtype=torch.float32))
        self.delta_s_hack = nn.Parameter(torch.zeros(rank, device=weight.device, dtype=torch.float32))
        self._merged_weight: Tensor | None = None
        self._row_sink: "_RowSink | None" = None
        # False runs the low-rank term beside the base Linear: shard_base sets it (inside a forward FSDP hands
        # the layer plain gathered weights, so the type cannot tell), and pgrpo bench compares the two
        self.fold = True

    @property
    def rank(self) -> int:
        return self.delta_s.shape[0]

    def forward(self, x: Tensor) -> Tensor:
        if self._merged_weight is not None:
            if torch.is_grad_enabled():
                raise RuntimeError("merged_for_generation is inference-only: run the forward under torch.no_grad()")
            return F.linear(x, self._merged_weight, self.base.bias)
        if self.fold:
            capturing = self._row_sink is not None and torch.is_grad_enabled() and self.delta_s.requires_grad
            slot = self._row_sink.new_slot(x) if capturing else None
            return _FoldedLinear.apply(x, self.delta_s, self.delta_s_hack, self, slot)
        # a sharded base (shard_base): outside FSDP's own all-gathers no rank holds a whole W to fold into,
        # so the low-rank term runs beside the base Linear
        y = self.base(x)
        scale = (self.delta_s + self.delta_s_hack).to(x.dtype)  # (r,)
        h = F.linear(x, self.Vh)  # (..., r)
        z = h * scale  # (..., r)
        if self._row_sink is not None and z.requires_grad:
            self._row_sink.watch(h, z)
        # At δ = 0 this adds exact zeros, so y is unchanged bit for bit.
        return y + F.linear(z, self.U)

    def extra_repr(self) -> str:
        return f"rank={self.rank}"


class _FoldedLinear(torch.autograd.Function):
    """y = x W_eff^T + b with W_eff = W + U diag(δS + δS_hack) Vh; gradients for x and both knobs.

    Nothing token-sized beyond x is kept for the backward, and W_eff is folded again there rather than
    held (a real model's folded weights would double its Linear memory between forward and backward).
    With `capture_row_grads` active, each row's share of the knob gradient goes to the module's sink, the
    slot taken in forward order.
    """

    @staticmethod
    def forward(ctx, x: Tensor, delta_s: Tensor, delta_s_hack: Tensor, m: "SVDAdapterLinear",
                slot: "_Slot | None") -> Tensor:
        ctx.m, ctx.slot = m, slot
        ctx.save_for_backward(x)
        return F.linear(x, folded_weight(m, KNOB_NAMES), m.base.bias)

    @staticmethod
    def backward(ctx, grad_y: Tensor):
        (x,) = ctx.saved_tensors
        m = ctx.m
        # under autocast (TRL's bf16) the forward ran in a lower precision than the weights, and the backward
        # runs outside it: bring x and grad_y to the weights' dtype (a no-op without autocast)
        x, grad_in = x.to(m.Vh.dtype), grad_y.to(m.U.dtype)
        grad_x = (grad_in @ folded_weight(m, KNOB_NAMES)).to(grad_y.dtype) if ctx.needs_input_grad[0] else None
        grad_knob = None
        if ctx.needs_input_grad[1] or ctx.needs_input_grad[2]:
            # ∂L/∂scale_j = Σ_tokens (Vh x)_j (U^T g)_j, kept per batch row; fp32 so rows sum to the full grad
            h, g_u = F.linear(x, m.Vh).float(), (grad_in @ m.U).float()  # (..., r) each
            rows = torch.einsum("b...r,b...r->br", h, g_u) if x.dim() > 1 else (h * g_u)[None]  # (B, r)
            if ctx.slot is not None:
                ctx.slot.add(rows)
            grad_knob = rows.sum(0)
        return grad_x, grad_knob, grad_knob, None, None


def attach_adapter(
    model: nn.Module,
    target_modules: tuple[str, ...] = DEFAULT_TARGETS,
    max_rank: int | None = None,
) -> dict[str, SVDAdapterLinear]:
    """Replace every nn.Linear whose attribute name is in `target_modules` by an SVDAdapterLinear.

    Freezes every base parameter. Returns the adapters keyed by qualified name, sorted.
    """
    if any(isinstance(m, SVDAdapterLinear) for m in model.modules()):
        raise ValueError("model already has SVD adapters attached")
    model.requires_grad_(False)
    linear_names = sorted(name for name, m in model.named_modules() if isinstance(m, nn.Linear))
    matched = [name for name in linear_names if name.rsplit(".", 1)[-1] in target_modules]
    if not matched:
        raise ValueError(
            f"no nn.Linear matched target_modules={list(target_modules)}; "
            f"available Linear names include {linear_names[:8]}"
        )
    adapters = {}
    for name in matched:
        parent_name, _, child_name = name.rpartition(".")
        parent = model.get_submodule(parent_name)
        adapter = SVDAdapterLinear(getattr(parent, child_name), max_rank=max_rank)
        setattr(parent, child_name, adapter)
        adapters[name] = adapter
    return adapters


def knob_parameters(modules: Mapping[str, SVDAdapterLinear]) -> list[nn.Parameter]:
    """All trainable knobs: delta_s then delta_s_hack per module, in sorted module order."""
    return [getattr(modules[name], knob) for name in sorted(modules) for knob in KNOB_NAMES]


def all_reduce_mean_(tensors: list[Tensor]) -> None:
    """Average tensors in place over the torch.distributed processes, in one collective; alone, a no-op."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()) or not tensors:
        return
    flat = torch.cat([t.flatten() for t in tensors])
    torch.distributed.all_reduce(flat)
    flat /= torch.distributed.get_world_size()
    for t, part in zip(tensors, flat.split([t.numel() for t in tensors])):
        t.copy_(part.view_as(t))


def all_reduce_knob_grads(modules: Mapping[str, SVDAdapterLinear]) -> None:
    """Average every knob's .grad over the processes (DDP's mean) after backward passes run without sync.

    One collective whatever each rank did: a rank whose groups all had zero reward
    variance contributes zeros instead of skipping the collective (which would hang
    the others). If no rank backpropagated anything, .grad stays None everywhere,
    as in one process.
    """
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return
    params = knob_parameters(modules)
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    backpropagated = torch.tensor([float(any(p.grad is not None for p in params))], device=params[0].device)
    all_reduce_mean_(grads + [backpropagated])
    if backpropagated.item() > 0:
        for p, grad in zip(params, grads):
            p.grad = grad


@contextmanager
def _zeroed(modules: Mapping[str, SVDAdapterLinear], knobs: tuple[str, ...]) -> Iterator[None]:
    params = [getattr(m, knob) for m in modules.values() for knob in knobs]
    with torch.no_grad():
        saved = [p.detach().clone() for p in params]
        for p in params:
            p.zero_()
    try:
        yield
    finally:
        with torch.no_grad():
            for p, value in zip(params, saved):
                p.copy_(value)


@contextmanager
def knobs_zeroed(modules: Mapping[str, SVDAdapterLinear]) -> Iterator[None]:
    """Both knobs zero inside (the model is π_ref), restored bit for bit on exit.

    For reference logprobs without grad, nest `merged_for_generation` inside this:
    the fold is then exactly W and the forward costs the same as the base model.
    """
    with _zeroed(modules, KNOB_NAMES):
        yield


@contextmanager
def quarantine_zeroed(modules: Mapping[str, SVDAdapterLinear]) -> Iterator[None]:
    """Only delta_s_hack zero inside (the deployment view of the route arm), restored on exit."""
    with _zeroed(modules, ("delta_s_hack",)):
        yield


def adapter_state_dict(modules: Mapping[str, SVDAdapterLinear]) -> dict[str, Tensor]:
    """Knobs only (never the base), as detached clones keyed `<module>.<knob>`."""
    return {
        f"{name}.{knob}": getattr(modules[name], knob).detach().clone()
        for name in sorted(modules)
        for knob in KNOB_NAMES
    }


def load_adapter_state_dict(modules: Mapping[str, SVDAdapterLinear], state: Mapping[str, Tensor]) -> None:
    """Copy knob values in place (keeps each knob's fp32 dtype and device). Keys must match exactly."""
    expected = {f"{name}.{knob}" for name in modules for knob in KNOB_NAMES}
    missing, unexpected = sorted(expected - state.keys()), sorted(state.keys() - expected)
    if missing or unexpected:
        raise ValueError(f"adapter state mismatch: missing={missing[:5]} unexpected={unexpected[:5]}")
    with torch.no_grad():
        for key, value in state.items():
            name, _, knob = key.rpartition(".")
            param = getattr(modules[name], knob)
            if value.shape != param.shape:
                raise ValueError(f"{key}: shape {tuple(value.shape)} != expected {tuple(param.shape)}")
            param.copy_(value)


class RowGrads:
    """Per-row gradients of delta_s captured in one backward (see `capture_row_grads`).

    `per_row[name]` is (rows, r) fp32: row b is batch row b's contribution to
    delta_s.grad (and identically to delta_s_hack.grad). Rows follow forward order:
    with several forwards (micro-batches) the rows of each forward are concatenated
    in the order the forwards ran. A forward whose output got no gradient gives
    zero rows. Backward may run inside or after the context.
    """

    def __init__(self, modules: Mapping[str, SVDAdapterLinear]) -> None:
        self._sinks = {name: _RowSink(modules[name].rank, modules[name].delta_s.device) for name in sorted(modules)}

    @property
    def per_row(self) -> dict[str, Tensor]:
        return {name: sink.rows() for name, sink in self._sinks.items()}

    def split(self, is_student: Tensor) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        """(g_student, g_teacher): per module, the sums of student rows and of the other rows. (r,) each."""
        g_student, g_teacher = {}, {}
        for name, rows in self.per_row.items():
            if rows.shape[0] != is_student.shape[0]:
                raise ValueError(f"{name}: {rows.shape[0]} captured rows but is_student has {is_student.shape[0]}")
            mask = is_student.to(device=rows.device, dtype=torch.bool)
            g_student[name] = rows[mask].sum(0)
            g_teacher[name] = rows[~mask].sum(0)
        return g_student, g_teacher


@dataclass
class _Slot:
    """One forward call: how many rows it had and their accumulated (rows, r) fp32 gradient."""

    n_rows: int
    device: torch.device
    grad: Tensor | None = None

    def add(self, rows: Tensor) -> None:
        self.grad = rows if self.grad is None else self.grad + rows


class _RowSink:
    """Collects one module's per-row contributions, one slot per forward call."""

    def __init__(self, rank: int, device: torch.device) -> None:
        self.rank = rank
        # the knob's device: a rank that ran no forward still returns rows where the DDP mask and NCCL expect them
        self.device = device
        self.slots: list[_Slot] = []

    def new_slot(self, x: Tensor) -> "_Slot":
        """The slot of one forward call, in forward order."""
        if x.dim() < 2:
            raise ValueError(f"capture_row_grads needs a batch dimension, got input of shape {tuple(x.shape)}")
        slot = _Slot(x.shape[0], x.device)
        self.slots.append(slot)
        return slot

    def watch(self, h: Tensor, z: Tensor) -> None:
        """The unfolded path (a sharded base): a hook on the low-rank intermediate z = h ⊙ scale."""
        slot = self.new_slot(h)
        # ∂L/∂scale_j = Σ_tokens h_j · ∂L/∂z_j, kept per batch row; fp32 so rows sum to the full grad.
        z.register_hook(lambda grad_z: slot.add(torch.einsum("b...r,b...r->br", h.float(), grad_z.float())))

    def rows(self) -> Tensor:
        parts = [
            slot.grad if slot.grad is not None else torch.zeros(slot.n_rows, self.rank, device=slot.device)
            for slot in self.slots
        ]
        return torch.cat(parts) if parts else torch.zeros(0, self.rank, device=self.device)


@contextmanager
def capture_row_grads(modules: Mapping[str, SVDAdapterLinear]) -> Iterator[RowGrads]:
    """While active, forwards with grad enabled record per-row knob gradients; read them after backward.

    The adapter's own backward (or, unfolded, a hook on the low-rank intermediate) adds each row's part,
    so one backward gives every row's gradient. Not for gradient checkpointing (a recomputed forward would be
    recorded twice).
    """
    if any(m._row_sink is not None for m in modules.values()):
        raise RuntimeError("capture_row_grads is already active on these modules")
    capture = RowGrads(modules)
    for name, sink in capture._sinks.items():
        modules[name]._row_sink = sink
    try:
        yield capture
    finally:
        for m in modules.values():
            m._row_sink = None


@contextmanager
def merged_for_generation(modules: Mapping[str, SVDAdapterLinear]) -> Iterator[None]:
    """Fold the current knobs into an effective weight W + U diag(δ) Vh so a forward costs what the base costs.

    Inference only (forwards must run under no_grad) and knob changes inside are
    not seen. The fold runs in fp32 and is rounded once to the base dtype: exact
    in fp32 up to matmul reassociation; on a bf16 base it differs from the
    unmerged path by bf16 rounding of W_eff (~2^-8 relative). At δ = 0 the fold
    is exactly W. The base weight is never touched, so exit restores exactly.

    On a sharded base (`shard_base`) this folds nothing and forwards take the unmerged
    adapter path: outside a forward each rank holds only a slice of W, U and Vh, and a
    folded full weight per Linear would be the very memory that sharding saves.
    """
    if base_is_sharded(modules):
        yield
        return
    try:
        for m in modules.values():
            m._merged_weight = folded_weight(m, KNOB_NAMES)
        yield
    finally:
        for m in modules.values():
            m._merged_weight = None


def folded_weight(m: SVDAdapterLinear, knobs: tuple[str, ...]) -> Tensor:
    """W + U diag(Σ knobs) Vh: folded in fp32, rounded once to the base dtype; exactly W where the knobs are 0."""
    with torch.no_grad():
        scale = sum(getattr(m, knob).float() for knob in knobs)  # (r,)
        low_rank = (m.U.float() * scale) @ m.Vh.float()  # (d_out, d_in)
        return (m.base.weight.float() + low_rank).to(m.base.weight.dtype)


def fold_into_base(model: nn.Module, modules: Mapping[str, SVDAdapterLinear], knobs: tuple[str, ...]) -> None:
    """Replace every adapter by a plain nn.Linear whose weight has `knobs` folded in; the other knobs are dropped.

    What is left is the architecture the base came with, so `save_pretrained` writes a checkpoint that
    loads without pgrpo. The adapters' base weights are not modified (each gets a new Linear).
    """
    if base_is_sharded(modules):
        raise ValueError("fold_into_base needs the whole weights: gather a sharded base first")
    for name, m in modules.items():
        linear = nn.Linear(m.base.in_features, m.base.out_features, bias=m.base.bias is not None,
                           device=m.base.weight.device, dtype=m.base.weight.dtype)
        linear.weight = nn.Parameter(folded_weight(m, knobs), requires_grad=False)
        if m.base.bias is not None:
            linear.bias = nn.Parameter(m.base.bias.detach().clone(), requires_grad=False)
        parent_name, _, child_name = name.rpartition(".")
        setattr(model.get_submodule(parent_name), child_name, linear)


def base_is_sharded(modules: Mapping[str, SVDAdapterLinear]) -> bool:
    """Whether `shard_base` sharded these adapters' base (their weights are DTensor shards outside a forward)."""
    return any(isinstance(m.base.weight, DTensor) for m in modules.values())


def shard_base(model: nn.Module, modules: Mapping[str, SVDAdapterLinear], mesh) -> None:
    """FSDP2 over `mesh`: shard the frozen base, its U and Vh included, per decoder layer and at the root.

    The knobs are left out of sharding (`ignored_params`): they stay plain tensors,
    replicated on every rank, and FSDP never reduces their gradients, so
    `capture_row_grads` and the one `all_reduce_knob_grads` per step work as under DDP
    and the projection sees every module's full, global gradient. U and Vh become
    frozen parameters (fully_shard shards parameters, not buffers; together they are
    as large as the weights). Every forward must then run on every rank of the mesh,
    the same number of times: FSDP all-gathers each layer's shards in its forward
    (and again in backward). Decoder layers are the model's `_no_split_modules`. The
    root (embedding, final norm, LM head) stays gathered after its forward: token_logprobs
    applies the LM head chunk by chunk after the model's forward has returned.
    """
    from torch.distributed.fsdp import fully_shard

    layer_classes = set(getattr(model, "_no_split_modules", None) or ())
    layers = [m for m in model.modules() if type(m).__name__ in layer_classes]
    if not layers:
        raise ValueError(f"{type(model).__name__} names no decoder layer class (_no_split_modules) to shard")
    for m in modules.values():
        m.fold = False  # folding would rebuild every gathered Linear in every forward, generation's included
        for name in ("U", "Vh"):
            basis = m._buffers.pop(name)
            m.register_parameter(name, nn.Parameter(basis, requires_grad=False))
    knobs = set(knob_parameters(modules))
    for layer in layers:
        fully_shard(layer, mesh=mesh, ignored_params=knobs)
    fully_shard(model, mesh=mesh, ignored_params=knobs, reshard_after_forward=False)
