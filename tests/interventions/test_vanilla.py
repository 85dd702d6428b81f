"""Vanilla: the gradient, the update and the optimizer's state are left as they are."""

from types import SimpleNamespace

import torch

from pgrpo.interventions import Vanilla
from test_erase import adapters_with_grads


def test_vanilla_leaves_the_gradient_and_the_knobs_alone():
    modules, basis = adapters_with_grads()
    step = SimpleNamespace(adapter=modules, basis=basis)
    grads = {name: m.delta_s.grad.clone() for name, m in modules.items()}
    knobs = {name: m.delta_s.detach().clone() for name, m in modules.items()}
    Vanilla().gradient(step)
    Vanilla().update(step, {name: k + 1 for name, k in knobs.items()})
    for name, m in modules.items():
        assert torch.equal(m.delta_s.grad, grads[name]) and torch.equal(m.delta_s.detach(), knobs[name])
