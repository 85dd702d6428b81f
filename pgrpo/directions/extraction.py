"""Hack directions V: per module, the top singular directions of paired NLL-gradient differences in δS space."""

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from pgrpo.model.adapter import SVDAdapterLinear, capture_row_grads, quarantine_zeroed
from pgrpo.records.cache import hash_tensor_into
from pgrpo.step.loss import token_logprobs

Normalize = Literal["length", "fixed"]


def nll_grads(
    model: nn.Module,
    modules: Mapping[str, SVDAdapterLinear],
    input_ids: Tensor,
    attention_mask: Tensor,
    completion_mask: Tensor,
    normalize: Normalize = "length",
    fixed_denominator: float | None = None,
    batch_size: int = 8,
    chunk_size: int = 128,
    temperature: float = 1.0,
    on_batch: Callable[[], None] | None = None,
) -> dict[str, Tensor]:
    """Per-completion gradient of its completion-token NLL wrt each module's delta_s: {name: (n, r) fp32}.

    input_ids/attention_mask (n, T) hold prompt + completion; completion_mask
    (n, T_c) marks the completion tokens among the last T_c columns (the TRL
    layout of `token_logprobs`). normalize="length" divides each NLL by the
    completion's own token count; "fixed" divides by `fixed_denominator` (the
    Dr.GRPO convention, e.g. max_new_tokens), which is what the live loss does.
    Logits are divided by `temperature`, as the loss divides them by the sampling temperature.
    One forward + one backward per batch of `batch_size` completions, with
    delta_s_hack zeroed. Existing .grad fields are left untouched; the model's
    train/eval mode is used as is (extract in eval mode to avoid dropout). `on_batch` is called after each
    batch (a progress announcement).
    """
    n, completion_len = completion_mask.shape
    if input_ids.shape != attention_mask.shape or input_ids.shape[0] != n:
        raise ValueError(
            f"input_ids {tuple(input_ids.shape)}, attention_mask {tuple(attention_mask.shape)} and "
            f"completion_mask {tuple(completion_mask.shape)} must share the batch size and (n, T)"
        )
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    completion_mask = completion_mask.float()
    if normalize == "length":
        if fixed_denominator is not None:
            raise ValueError("fixed_denominator is only used with normalize='fixed'")
        denominators = completion_mask.sum(1)  # (n,)
        if (denominators == 0).any():
            raise ValueError(f"completions with no tokens at rows {(denominators == 0).nonzero().flatten().tolist()}")
    elif normalize == "fixed":
        if fixed_denominator is None or fixed_denominator <= 0:
            raise ValueError(f"normalize='fixed' needs fixed_denominator > 0, got {fixed_denominator}")
        denominators = torch.full((n,), float(fixed_denominator), device=completion_mask.device)
    else:
        raise ValueError(f"normalize must be 'length' or 'fixed', got {normalize!r}")
    knobs = [modules[name].delta_s for name in sorted(modules)]
    batches: dict[str, list[Tensor]] = {name: [] for name in sorted(modules)}
    with quarantine_zeroed(modules), torch.enable_grad():
        for start in range(0, n, batch_size):
            rows = slice(start, start + batch_size)
            with capture_row_grads(modules) as capture:
                logp, _ = token_logprobs(model, input_ids[rows], attention_mask[rows], completion_len, chunk_size,
                                          temperature)
                nll = -(logp * completion_mask[rows]).sum(1) / denominators[rows]  # (b,)
                # autograd.grad, not backward: the hooks see every row and .grad stays as it was.
                torch.autograd.grad(nll.sum(), knobs, allow_unused=True)
            for name, per_row in capture.per_row.items():
                batches[name].append(per_row)
            if on_batch is not None:
                on_batch()
    return {name: torch.cat(parts) for name, parts in batches.items()}


@dataclass
class HackBasis:
    """Per-module hack directions V (k_m, r), orthonormal rows oriented hack-ward, with singular values (k_m,)."""

    V: dict[str, Tensor]
    sigma: dict[str, Tensor]
    meta: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.V.keys() != self.sigma.keys():
            raise ValueError(f"V and sigma name different modules: {sorted(self.V.keys() ^ self.sigma.keys())[:5]}")
        for name, rows in self.V.items():
            if rows.dim() != 2 or self.sigma[name].shape != rows.shape[:1]:
                raise ValueError(f"{name}: V {tuple(rows.shape)} and sigma {tuple(self.sigma[name].shape)} mismatch")
        bad = {k: v for k, v in self.meta.items() if not (isinstance(k, str) and isinstance(v, str))}
        if bad:
            raise ValueError(f"HackBasis.meta must map str to str, got {bad}")

    @property
    def k_total(self) -> int:
        return sum(rows.shape[0] for rows in self.V.values())

    def digest(self) -> str:
        """sha256 over every module's V and sigma (name, dtype, shape, bytes, in name order): which V a run
        used, whatever file or cache it came from. meta is left out: it describes V, the numbers are V."""
        digest = hashlib.sha256()
        for name in sorted(self.V):
            hash_tensor_into(digest, f"V/{name}", self.V[name])
            hash_tensor_into(digest, f"sigma/{name}", self.sigma[name])
        return digest.hexdigest()

    def apply_noise_floor(self, quantile: float) -> "HackBasis":
        """Pool every module's singular values, drop rows below that quantile, drop modules left empty."""
        if not 0 <= quantile < 1:
            raise ValueError(f"noise floor quantile must be in [0, 1), got {quantile}")
        pooled = torch.cat([s.float().cpu() for s in self.sigma.values()])
        floor = torch.quantile(pooled, quantile).item()
        V, sigma = {}, {}
        for name, rows in self.V.items():
            keep = self.sigma[name] >= floor
            if keep.any():
                V[name], sigma[name] = rows[keep], self.sigma[name][keep]
        k_total = sum(len(s) for s in sigma.values())
        return HackBasis(V, sigma, {**self.meta, "noise_floor": str(quantile), "k_total": str(k_total)})

    def to(self, device: torch.device | str, dtype: torch.dtype | None = None) -> "HackBasis":
        """V moved (and cast if dtype is given); sigma moved and kept as is."""
        return HackBasis(
            {name: rows.to(device=device, dtype=dtype or rows.dtype) for name, rows in self.V.items()},
            {name: s.to(device) for name, s in self.sigma.items()},
            dict(self.meta),
        )

    def save(self, path: str | Path) -> None:
        tensors = {f"V/{name}": rows.detach().cpu().contiguous() for name, rows in self.V.items()}
        tensors |= {f"sigma/{name}": s.detach().cpu().contiguous() for name, s in self.sigma.items()}
        save_file(tensors, str(path), metadata=self.meta)

    @classmethod
    def load(cls, path: str | Path, device: torch.device | str = "cpu") -> "HackBasis":
        # cloned: a tensor read from the file sits wherever the header length puts it, and a matmul on a
        # misaligned V rounds differently (a loaded V would not give the extracted V's numbers bit for bit)
        tensors = {key: t.clone() for key, t in load_file(str(path), device=str(device)).items()}
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
        V = {key.removeprefix("V/"): t for key, t in tensors.items() if key.startswith("V/")}
        sigma = {key.removeprefix("sigma/"): t for key, t in tensors.items() if key.startswith("sigma/")}
        return cls(V, sigma, meta)


@dataclass
class Separation:
    """How well a basis separates paired gradient differences D = g_hack − g_clean.

    frac_positive: fraction of pairs whose summed projection Σ_m Σ_i D_m·v_i is > 0
    (0.5 = chance, 1 = every pair points hack-ward). hackward_share: mean over pairs of
    ‖relu(V D)‖ / ‖D‖ aggregated over modules like projection's `hack_fraction`; compare it with
    hackward_share_null, the same mean of `hackward_share_null` (a random direction's value) over the pairs.
    per_module_frac_positive: frac_positive computed within each module alone.
    """

    frac_positive: float
    hackward_share: float
    hackward_share_null: float
    per_module_frac_positive: dict[str, float]


def separation(basis: HackBasis, g_hack: Mapping[str, Tensor], g_clean: Mapping[str, Tensor]) -> Separation:
    """Score any basis (real or control) on pairs; extract_basis uses it on the held-out pairs."""
    if not basis.V:
        raise ValueError("basis has no modules to score (all rows dropped by tau_axis or the noise floor?)")
    missing = sorted(basis.V.keys() - g_hack.keys())
    if missing:
        raise ValueError(f"gradients missing for basis modules {missing[:5]}")
    total, relu_sq, norm_sq = 0.0, 0.0, 0.0
    per_module, diffs = {}, {}
    for name, rows in basis.V.items():
        diff = diffs[name] = (g_hack[name] - g_clean[name]).float()  # (n, r)
        coeffs = diff @ rows.to(diff).T  # (n, k)
        per_module[name] = (coeffs.sum(1) > 0).float().mean().item()
        total = total + coeffs.sum(1)
        relu_sq = relu_sq + coeffs.clamp(min=0).pow(2).sum(1)
        norm_sq = norm_sq + diff.pow(2).sum(1)
    share = (relu_sq.sqrt() / norm_sq.sqrt().clamp(min=torch.finfo(torch.float32).tiny)).mean().item()
    return Separation(
        frac_positive=(total > 0).float().mean().item(),
        hackward_share=share,
        hackward_share_null=hackward_share_null(diffs, basis).mean().item(),
        per_module_frac_positive=per_module,
    )


def hackward_share_null(vectors: Mapping[str, Tensor], basis: HackBasis) -> Tensor:
    """What the hack-ward share ‖relu(V g)‖ / ‖g‖ is, in expectation of its square, for a random direction g.

    Per module, a random g of norm ‖g_m‖ has E‖relu(V_m g_m)‖² = ‖g_m‖² k_m / (2 r_m): each of the k_m
    coefficients carries ‖g_m‖²/r_m and relu keeps half of it. Pooled over modules as the share is, each module
    counts by its share of ‖g‖²: sqrt(Σ_m w_m k_m / (2 r_m)) with w_m = ‖g_m‖² / Σ‖g‖². vectors[name] is
    (r,) or (n, r); the result is () or (n,), 0 where g = 0.
    """
    weighted, total = 0.0, 0.0
    for name, rows in basis.V.items():
        k, r = rows.shape
        norm_sq = vectors[name].float().pow(2).sum(-1)
        weighted = weighted + norm_sq * (k / (2 * r))
        total = total + norm_sq
    return (weighted / total.clamp(min=torch.finfo(torch.float32).tiny)).sqrt()


def extract_basis(
    g_hack: Mapping[str, Tensor],
    g_clean: Mapping[str, Tensor],
    k: int,
    tau_axis: float | None = None,
    n_heldout: int = 0,
    noise_floor: float | None = None,
    meta: Mapping[str, str] | None = None,
) -> HackBasis:
    """Per module: SVD of D = g_hack − g_clean over the first n − n_heldout pairs, top-k right singular vectors.

    Each row is flipped unless a strict majority of training pairs has D·v > 0
    (a vote, so a few outlier pairs with huge opposite projections cannot flip it).
    Rows with σ = 0 carry nothing and are dropped; `tau_axis` also drops rows with
    σ < tau · σ_max of that module; modules left empty are dropped; `noise_floor`
    then applies `HackBasis.apply_noise_floor`. With n_heldout > 0 the last pairs
    are scored by `separation`, on the rows that survived, and the result is
    recorded in meta (heldout_frac_positive, heldout_hackward_share, heldout_hackward_share_null).
    `meta` adds caller facts (model id, pairs hash, normalize) to the record.
    """
    if g_hack.keys() != g_clean.keys():
        raise ValueError(f"g_hack and g_clean name different modules: {sorted(g_hack.keys() ^ g_clean.keys())[:5]}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if tau_axis is not None and not 0 <= tau_axis <= 1:
        raise ValueError(f"tau_axis must be in [0, 1] or None, got {tau_axis}")
    n_pairs = next(iter(g_hack.values())).shape[0]
    n_train = n_pairs - n_heldout
    if n_heldout < 0 or n_train < 1:
        raise ValueError(f"n_heldout must be in [0, {n_pairs - 1}] for {n_pairs} pairs, got {n_heldout}")
    V, sigma = {}, {}
    for name in sorted(g_hack):
        if g_hack[name].shape != g_clean[name].shape or g_hack[name].shape[0] != n_pairs:
            raise ValueError(f"{name}: g_hack {tuple(g_hack[name].shape)} vs g_clean {tuple(g_clean[name].shape)}")
        for side, grads in (("hack", g_hack), ("clean", g_clean)):
            broken = (~torch.isfinite(grads[name]).all(1)).nonzero().flatten().tolist()
            if broken:  # an SVD of them fails to converge, which names neither the module nor the pairs
                raise ValueError(f"{name}: the gradients of the {side} completions of pairs {broken[:8]} "
                                 f"({len(broken)} of {n_pairs}) are not finite: the model's forward or backward made "
                                 f"a NaN or inf there")
        diff = (g_hack[name][:n_train] - g_clean[name][:n_train]).float()  # (n_train, r)
        _, singular, vh = torch.linalg.svd(diff, full_matrices=False)
        rows, singular = vh[:k], singular[:k]  # (k, r), (k,)
        hack_ward_votes = ((diff @ rows.T) > 0).sum(0)  # (k,)
        signs = torch.where(2 * hack_ward_votes > n_train, 1.0, -1.0).to(rows)
        rows = rows * signs[:, None]
        keep = singular > 0
        if tau_axis is not None:
            keep &= singular >= tau_axis * singular[0]
        if keep.any():
            V[name], sigma[name] = rows[keep].contiguous(), singular[keep].contiguous()
    record = {
        **(meta or {}),
        "k": str(k),
        "tau_axis": str(tau_axis),
        "n_pairs": str(n_pairs),
        "n_heldout": str(n_heldout),
        "k_total": str(sum(len(s) for s in sigma.values())),
    }
    basis = HackBasis(V, sigma, record)
    if noise_floor is not None:
        basis = basis.apply_noise_floor(noise_floor)
    if n_heldout > 0:
        heldout = slice(n_train, n_pairs)
        score = separation(
            basis, {n: g[heldout] for n, g in g_hack.items()}, {n: g[heldout] for n, g in g_clean.items()}
        )
        basis.meta |= {
            "heldout_frac_positive": f"{score.frac_positive:.6g}",
            "heldout_hackward_share": f"{score.hackward_share:.6g}",
            "heldout_hackward_share_null": f"{score.hackward_share_null:.6g}",
        }
    return basis


def pairs_hash(pairs: Sequence[tuple[str, str, str]]) -> str:
    """sha256 over the text of (prompt, hack, clean) triples, order included (held-out pairs are the last ones)."""
    for i, pair in enumerate(pairs):
        if len(pair) != 3 or not all(isinstance(text, str) for text in pair):
            raise ValueError(f"pair {i} must be a (prompt, hack, clean) triple of str, got {pair!r:.200}")
    return hashlib.sha256(json.dumps([list(pair) for pair in pairs]).encode()).hexdigest()


def basis_cache_key(
    model_id: str,
    pairs_hash: str,
    k: int,
    tau_axis: float | None,
    normalize: Normalize,
    extra: Mapping[str, str | int | float | bool | None] | None = None,
) -> str:
    """A 16-hex-digit key over everything that determines V (never a path alone, so a stale V is not reused)."""
    facts = {
        "model_id": model_id,
        "pairs_hash": pairs_hash,
        "k": k,
        "tau_axis": tau_axis,
        "normalize": normalize,
        "extra": dict(extra or {}),
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:16]


def uniform_rows(gaussian: Tensor) -> Tensor:
    """The orthonormal rows (n, r) that span a Gaussian (r, n) draw's columns, uniformly oriented: Q of its QR, each
    column signed by R's diagonal. Without the signs a Householder QR (LAPACK's) gives row i a negative i-th
    coordinate in most draws (row 0 in every one), and what reads a row's sign (a hack-ward share, a one-sided gate,
    adv_gate's weights) would read that bias, not a random direction."""
    q, upper = torch.linalg.qr(gaussian)
    return (q * torch.sign(torch.diagonal(upper))).T


def random_rows_like(like: dict[str, tuple[Tensor, Tensor]], seed: int,
                     scale: float = 1.0) -> dict[str, tuple[Tensor, Tensor]]:
    """Per module, round(scale · k) random orthonormal rows (at least one, at most r) in place of `like`'s rows
    (k, r), with its per-row values (k,) stretched over them, order and shape kept. Each module draws one random
    rotation whatever the scale and takes its first rows, so a larger placebo holds a smaller one and its strength
    grows with its size (what matching it in strength bisects on)."""
    generator = torch.Generator().manual_seed(seed)
    out = {}
    for name, (rows, values) in sorted(like.items()):
        k, r = rows.shape
        n = min(r, max(1, round(k * scale)))
        out[name] = (uniform_rows(torch.randn(r, r, generator=generator))[:n].contiguous(),
                     values[torch.arange(n) * k // n].clone())
    return out


def random_basis_like(basis: HackBasis, seed: int, scale: float = 1.0) -> HackBasis:
    """Negative control: random orthonormal rows, round(scale · k) of them per module (scale 1: the same k; the
    strength-matched placebo scales it), sigma stretched over them."""
    drawn = random_rows_like({name: (basis.V[name], basis.sigma[name]) for name in basis.V}, seed, scale)
    V = {name: rows.to(basis.V[name]) for name, (rows, _) in drawn.items()}
    sigma = {name: values for name, (_, values) in drawn.items()}
    k_total = sum(s.shape[0] for s in sigma.values())
    return HackBasis(V, sigma, {**basis.meta, "control": "random", "control_seed": str(seed),
                                "control_scale": f"{scale:.6g}", "k_total": str(k_total)})


def basis_overlap(old: HackBasis, new: HackBasis) -> tuple[float, dict[str, float]]:
    """Mean principal-angle cosine of the row spaces, over all rows and per module.

    A module's cosines are the singular values of V_old V_newᵀ; rows only one basis has (k changed, a module
    appeared or vanished) count as cosine 0, so a module scores Σ cos / max(k_old, k_new). Orientation is
    ignored: a flipped row has cosine 1.
    """
    per_module, cosines, rows = {}, 0.0, 0
    for name in sorted(old.V.keys() | new.V.keys()):
        a, b = old.V.get(name), new.V.get(name)
        k = max(v.shape[0] for v in (a, b) if v is not None)
        total = 0.0
        if a is not None and b is not None:
            total = torch.linalg.svdvals(a.float() @ b.float().to(a.device).T).clamp(max=1.0).sum().item()
        per_module[name] = total / k
        cosines, rows = cosines + total, rows + k
    return cosines / max(rows, 1), per_module
