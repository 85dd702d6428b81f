"""A low-rank update of a model's Linear layers: trained as a side path beside the frozen weights, stored as its
factors, and merged into the weights to the same bits on any CPU.

Why the merge is written out rather than `W + B @ A`: a matmul sums in the order its kernel picks for the CPU in
hand (MKL and oneDNN block by vector width), so two machines would merge one update into two bases. Here each
rank's outer product is an elementwise multiply, the ranks are summed one after another in float64, and the
result rounds once to the weight's dtype: elementwise IEEE operations round alike on every CPU. Training the update
is not reproducible across CPUs (its matmuls are the CPU's); merging a stored one is.
"""

import torch
from torch import nn


def target_linears(model: nn.Module) -> dict[str, nn.Linear]:
    """Every Linear layer but the output embeddings (often tied to the input embeddings, which stay as they are)."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    return {name: m for name, m in model.named_modules() if isinstance(m, nn.Linear) and m is not head}


class LowRankUpdate(nn.Module):
    """Factors A (rank, in) and B (out, rank) for each target Linear; its output gains (x @ A.T) @ B.T. B starts at
    zero, so the update starts as the identity; A is drawn from `seed` alone (kaiming-uniform, as LoRA's)."""

    def __init__(self, model: nn.Module, rank: int, seed: int):
        super().__init__()
        linears = target_linears(model)
        self.names = sorted(linears)
        generator = torch.Generator().manual_seed(seed)
        self.a = nn.ParameterList()
        self.b = nn.ParameterList()
        for name in self.names:
            out_features, in_features = linears[name].weight.shape
            bound = 1 / in_features**0.5
            self.a.append(nn.Parameter(torch.empty(rank, in_features).uniform_(-bound, bound, generator=generator)))
            self.b.append(nn.Parameter(torch.zeros(out_features, rank)))

    def attach(self, model: nn.Module) -> list:
        """Forward hooks that add the update's side path to each target's output; remove them when done."""
        linears = target_linears(model)
        return [linears[name].register_forward_hook(self._side_path(i)) for i, name in enumerate(self.names)]

    def _side_path(self, i: int):
        def hook(module, args, output):
            return output + (args[0] @ self.a[i].t()) @ self.b[i].t()  # (..., in) -> (..., rank) -> (..., out)
        return hook

    def factors(self, dtype: torch.dtype) -> dict[str, torch.Tensor]:
        """The factors by layer name, rounded once to `dtype` (what is stored, published and merged)."""
        found = {}
        for name, a, b in zip(self.names, self.a, self.b):
            found[f"{name}.lora_a"] = a.detach().to(dtype).contiguous()
            found[f"{name}.lora_b"] = b.detach().to(dtype).contiguous()
        return found


@torch.no_grad()
def merge(model: nn.Module, factors: dict[str, torch.Tensor]) -> None:
    """Add B @ A into each target's weight in place, the same to the bit on every CPU (the module's docstring).
    Refuses factors that do not name exactly this model's target layers, or of the wrong shape."""
    linears = target_linears(model)
    named = {key.rsplit(".", 1)[0] for key in factors}
    if named != set(linears):
        missing, extra = sorted(set(linears) - named), sorted(named - set(linears))
        raise ValueError(f"low-rank update: its layers do not match the model's (missing {missing[:3]}, "
                         f"unknown {extra[:3]})")
    for name, linear in linears.items():
        a, b = factors[f"{name}.lora_a"].double(), factors[f"{name}.lora_b"].double()
        if b.shape[0] != linear.out_features or a.shape[1] != linear.in_features or a.shape[0] != b.shape[1]:
            raise ValueError(f"low-rank update: {name}'s factors {tuple(b.shape)} @ {tuple(a.shape)} do not fit its "
                             f"weight {tuple(linear.weight.shape)}")
        total = linear.weight.double()
        for k in range(a.shape[0]):  # a fixed order, elementwise only: no kernel picks how the sum is blocked
            total = total + b[:, k:k + 1] * a[k:k + 1, :]
        linear.weight.copy_(total.to(linear.weight.dtype))
