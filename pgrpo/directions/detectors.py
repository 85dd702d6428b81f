"""Linear detectors on mean-pooled hidden states (pgrpo/directions/activations.py): a logistic probe and a shortcut direction
(the difference of the hack and clean means), each at the layer that separates held-out pairs best, and the
random placebo of either.

Both are built from the contrastive pairs V is extracted from, before training, and stay fixed while it runs.
Features are standardised with the training completions' mean and std, so one weight scale fits every layer.
"""

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class LinearDetector:
    """score(x) = w · (x_layer − mean) / scale + bias, on one layer of (B, L+1, d) pooled states; > 0 is hack."""

    layer: int
    weight: Tensor  # (d,)
    bias: float
    mean: Tensor  # (d,)
    scale: Tensor  # (d,)
    heldout_accuracy: float

    def features(self, states: Tensor) -> Tensor:
        """(B, L+1, d) → (B, d) fp32: the detector's layer, standardised."""
        return (states[:, self.layer].float() - self.mean.to(states.device)) / self.scale.to(states.device)

    def scores(self, states: Tensor) -> Tensor:
        """(B, L+1, d) → (B,) fp32."""
        return self.features(states) @ self.weight.to(states.device) + self.bias


# (hack, clean) standardised features (n, d) each → (weight (d,), bias)
Fit = Callable[[Tensor, Tensor], tuple[Tensor, float]]


def fit_logistic(hack: Tensor, clean: Tensor, l2: float = 1e-2, steps: int = 100) -> tuple[Tensor, float]:
    """Logistic regression (hack = 1) with an L2 penalty, full batch, L-BFGS in float64 from zero: the same data
    gives the same probe, bit for bit, on a resumed run."""
    x = torch.cat([hack, clean]).double()
    y = torch.cat([torch.ones(len(hack)), torch.zeros(len(clean))]).double()
    params = torch.zeros(x.shape[1] + 1, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([params], max_iter=steps, line_search_fn="strong_wolfe")

    def loss() -> Tensor:
        opt.zero_grad()
        value = torch.nn.functional.binary_cross_entropy_with_logits(x @ params[:-1] + params[-1], y)
        value = value + 0.5 * l2 * params[:-1].pow(2).sum()
        value.backward()
        return value

    with torch.enable_grad():
        opt.step(loss)
    params = params.detach().float()
    return params[:-1], float(params[-1])


def fit_mean_difference(hack: Tensor, clean: Tensor) -> tuple[Tensor, float]:
    """The unit direction from the clean mean to the hack mean, zero at their midpoint (Wu & Tang's shortcut
    direction, on activations)."""
    mu_hack, mu_clean = hack.mean(0), clean.mean(0)
    direction = mu_hack - mu_clean
    direction = direction / direction.norm().clamp(min=torch.finfo(torch.float32).tiny)
    return direction, float(-direction @ (mu_hack + mu_clean) / 2)


def fit_detector(hack: Tensor, clean: Tensor, n_heldout: int, fit: Fit, layer: int | None = None) -> LinearDetector:
    """A detector from pairs' pooled states (n, L+1, d) each (row i of both is pair i): fitted on all but the last
    n_heldout pairs, at `layer`, or (None) at the decoder layer where it classifies the held-out completions best,
    the deeper one on a tie. Never the embeddings unless asked for: their mean over a completion is a bag of its
    tokens, which no knob of the policy moves, so a detector there reads the text and not the policy."""
    if not 0 < n_heldout < len(hack):
        raise ValueError(f"{len(hack)} pairs with n_heldout={n_heldout}: the detector needs pairs to fit on and "
                         f"pairs to choose its layer by (model.extraction.n_heldout)")
    n_layers = hack.shape[1]
    if layer is not None and not -n_layers <= layer < n_layers:
        raise ValueError(f"layer={layer}: this model has hidden states 0..{n_layers - 1} (0: the embeddings)")
    candidates = range(1, n_layers) if layer is None else [layer % n_layers]
    train, held = slice(None, -n_heldout), slice(-n_heldout, None)
    best = None
    for at in candidates:
        both = torch.cat([hack[train, at], clean[train, at]]).float()
        mean, scale = both.mean(0), both.std(0).clamp(min=1e-6)
        weight, bias = fit((hack[train, at] - mean) / scale, (clean[train, at] - mean) / scale)
        detector = LinearDetector(at, weight, bias, mean, scale, 0.0)
        detector.heldout_accuracy = accuracy(detector, hack[held], clean[held])
        if best is None or detector.heldout_accuracy >= best.heldout_accuracy:
            best = detector
    return best


def accuracy(detector: LinearDetector, hack: Tensor, clean: Tensor) -> float:
    """Share of completions classified right (hack: score > 0), hack and clean weighted alike."""
    return float(((detector.scores(hack) > 0).float().mean() + (detector.scores(clean) <= 0).float().mean()) / 2)


def random_placebo(detector: LinearDetector, hack: Tensor, clean: Tensor, seed: int, cut: float = 0.0,
                   calibrate_on: Tensor | None = None) -> LinearDetector:
    """The placebo of `detector`: a random direction at its layer and weight norm, orthogonal to the difference of
    the hack and clean means there, its bias set so that it flags (score > cut) the same share of `calibrate_on`'s
    completions (B, L+1, d) as the real one (default: the pairs' completions (n, L+1, d) each). Only *which*
    rollouts it flags differs.

    Orthogonal, because a merely random direction is no null here: hack and clean completions differ in their
    pooled states along many features at once, so a random direction has a share of the mean difference and reads
    the hack (on the embedded default random probes classified the held-out pairs at 0.44–0.75).
    """
    generator = torch.Generator().manual_seed(seed)
    shift = detector.features(hack).mean(0) - detector.features(clean).mean(0)
    shift = shift / shift.norm().clamp(min=torch.finfo(torch.float32).tiny)
    weight = torch.randn(detector.weight.shape, generator=generator)
    weight = weight - (weight @ shift) * shift
    weight = weight * detector.weight.norm() / weight.norm()
    placebo = LinearDetector(detector.layer, weight, 0.0, detector.mean, detector.scale, float("nan"))
    states = torch.cat([hack, clean]) if calibrate_on is None else calibrate_on
    rate = float((detector.scores(states) > cut).float().mean())
    scores = placebo.scores(states)
    # flag the top `rate` share: the bias puts `cut` between the last flagged completion's score and the next one's
    n_flag = round(rate * len(scores))
    ordered = scores.sort(descending=True).values
    if n_flag == 0:
        placebo.bias = cut - float(ordered[0]) - 1.0
    elif n_flag == len(scores):
        placebo.bias = cut - float(ordered[-1]) + 1.0
    else:
        placebo.bias = cut - float(ordered[n_flag - 1] + ordered[n_flag]) / 2
    return placebo
