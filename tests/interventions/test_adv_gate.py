"""adv_gate: a factor on each rollout's advantage from its own gradient's hack fraction (that the step applies
it exactly: tests/hosts/lightning/test_module.py)."""

from types import SimpleNamespace

import pytest
import torch

from pgrpo.directions.extraction import HackBasis
from pgrpo.interventions import AdvGate
from pgrpo.step.loss import LossConfig
from pgrpo.step.step_grads import StepGrads


def test_a_rollout_along_v_is_discounted_and_one_across_it_is_kept():
    V = torch.eye(4)[:1]  # hack axis 0 of r = 4
    rows = {"m": torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0], [-1.0, 0.0, 0.0, 0.0]])}
    grads = StepGrads(rows, {"m": torch.zeros(0, 4)}, torch.zeros(0, dtype=torch.bool), torch.ones(3, dtype=torch.bool))
    w = AdvGate().advantage_weights(SimpleNamespace(basis=HackBasis({"m": V}, {"m": torch.ones(1)})), grads)
    assert w[0] < 1e-4 and w[1] == pytest.approx(1.0, abs=1e-3) and w[2] == pytest.approx(1.0, abs=1e-3)


@pytest.mark.parametrize("settings, key", [({"share_prompts": True}, "model.share_prompts"),
                                           ({"share_prompts": False, "beta": 0.1}, "model.loss.beta")])
def test_adv_gate_refuses_settings_under_which_a_rollouts_gradient_is_not_its_own(settings, key):
    module = SimpleNamespace(share_prompts=settings["share_prompts"], loss_cfg=LossConfig(beta=settings.get("beta", 0.0)))
    with pytest.raises(ValueError, match=key):
        AdvGate().check(module)


def test_a_non_positive_temperature_names_the_field():
    with pytest.raises(ValueError, match="temperature"):
        AdvGate(temperature=0.0)
