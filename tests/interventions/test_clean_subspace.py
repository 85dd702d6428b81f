"""clean_subspace: the gradient keeps only its component in the clean gradients' top-K subspace."""

from types import SimpleNamespace

import pytest
import torch

from pgrpo.interventions import CleanSubspace
from pgrpo.interventions.clean_subspace import clean_directions, random_directions


def clean_grads() -> dict[str, torch.Tensor]:
    """Clean gradients (n = 10, r = 6) that span the first two axes only, the first 3× more strongly."""
    grads = torch.zeros(10, 6)
    grads[:, 0] = 3 * torch.tensor([1.0, -1.0] * 5)
    grads[:, 1] = torch.tensor([1.0, 1.0, -1.0, -1.0] * 2 + [1.0, 1.0])  # orthogonal to the first column
    return {"m": grads}


def projected(directions: dict, grad: torch.Tensor) -> torch.Tensor:
    module = SimpleNamespace(adapter={"m": SimpleNamespace(delta_s=SimpleNamespace(grad=grad.clone()))})
    intervention = CleanSubspace()
    intervention.directions = directions
    intervention.gradient(module)
    return module.adapter["m"].delta_s.grad


def test_a_gradient_inside_the_clean_subspace_is_kept_and_one_outside_it_is_removed():
    directions = clean_directions(clean_grads(), k=2, weighting="uniform")
    grad = torch.tensor([1.0, -2.0, 0.5, 0.0, 3.0, 0.0])
    assert torch.allclose(projected(directions, grad), torch.tensor([1.0, -2.0, 0, 0, 0, 0]), atol=1e-5)


def test_singular_value_weighting_shrinks_the_weaker_clean_directions():
    directions = clean_directions(clean_grads(), k=2, weighting="singular_value")
    _, weights = directions["m"]
    assert weights.tolist() == pytest.approx([1.0, 1 / 3])
    out = projected(directions, torch.tensor([1.0, 1.0, 0, 0, 0, 0]))
    assert out[0] == pytest.approx(1.0, abs=1e-5) and out[1] == pytest.approx(float(weights[1]), abs=1e-5)


def test_k_is_capped_by_the_number_of_clean_completions():
    directions = clean_directions({"m": torch.randn(3, 6)}, k=8, weighting="uniform")
    assert directions["m"][0].shape == (3, 6)


def test_the_placebo_keeps_as_many_orthonormal_directions_with_the_same_weights():
    real = clean_directions(clean_grads(), k=2, weighting="singular_value")
    placebo = random_directions(real, seed=0)
    rows, weights = placebo["m"]
    assert rows.shape == (2, 6) and torch.equal(weights, real["m"][1])
    assert torch.allclose(rows @ rows.T, torch.eye(2), atol=1e-5)
    assert not torch.allclose(rows.abs(), real["m"][0].abs(), atol=1e-2)


@pytest.mark.parametrize("kwargs, match", [({"k": 0}, "k=0"), ({"weighting": "sigma"}, "weighting"),
                                           ({"subspace": "shuffled"}, "subspace")])
def test_bad_settings_name_the_field(kwargs, match):
    with pytest.raises(ValueError, match=match):
        CleanSubspace(**kwargs)
