"""Route: erase's projection of the update, parked in δS_hack; the deployed view zeroes it."""

from types import SimpleNamespace

import pytest
import torch

from pgrpo.interventions import Route
from test_erase import adapters_with_grads


def test_route_on_the_gradient_is_refused_by_name():
    # δS_hack with Adam moments of its own leaves vanilla's path (deployed, it neither hacks nor solves)
    with pytest.raises(ValueError, match="target 'update' or 'position'"):
        Route(target="grad")


def test_route_leaves_the_gradient_and_parks_what_it_removes_from_the_update():
    modules, basis = adapters_with_grads()
    step = SimpleNamespace(adapter=modules, basis=basis)
    grads = {name: m.delta_s.grad.clone() for name, m in modules.items()}
    Route().gradient(step)
    assert all(torch.equal(m.delta_s.grad, grads[n]) for n, m in modules.items())
    before = {name: m.delta_s.detach().clone() for name, m in modules.items()}
    with torch.no_grad():
        for m in modules.values():
            m.delta_s.add_(torch.randn(m.rank))
    made = {name: m.delta_s.detach().clone() for name, m in modules.items()}
    Route().update(step, before)
    for name, m in modules.items():  # the training knob δS + δS_hack is what the optimizer made
        torch.testing.assert_close(m.delta_s.detach() + m.delta_s_hack.detach(), made[name])
    assert all(modules[n].delta_s_hack.abs().sum() > 0 for n in basis.V)
    with Route().deployed(modules):
        assert all(m.delta_s_hack.abs().sum() == 0 for m in modules.values())
    assert all(modules[n].delta_s_hack.abs().sum() > 0 for n in basis.V)  # restored after
