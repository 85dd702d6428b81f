"""The interface: every hook of the base class leaves the step alone, and an intervention is described by
{class_path, init_args} the way a config names it, and read back from that."""

from types import SimpleNamespace

import torch

from pgrpo.interventions import AdvGate, Erase, GtPenalty, GtScreen, Intervention, Route, Vanilla, from_config
from pgrpo.interventions.base import RewardEdit

ALL = [Vanilla(), Erase(gate="one_sided", target="position"), Route(), AdvGate(center=0.3), GtScreen(),
       GtPenalty(penalty=2.0)]


def test_every_intervention_round_trips_through_its_config():
    for intervention in ALL:
        again = from_config(intervention.config())
        assert again == intervention and type(again) is type(intervention)
    assert from_config(None) == Vanilla()


def test_a_config_names_the_class_by_its_file_and_arms_by_snake_case():
    assert Erase().config() == {"class_path": "pgrpo.interventions.erase.Erase", "init_args": {
        "gate": "no_gate", "overshoot": 1.0, "preserve_magnitude": False, "target": "grad",
        "purge_adam_moments": False, "v": "real", "v_seed": None, "yoked_to": None}}
    assert [i.arm() for i in ALL] == ["vanilla", "erase", "route", "adv_gate", "gt_screen", "gt_penalty"]


def test_a_placebo_is_labelled_as_its_methods_placebo_and_names_what_it_reads():
    from pgrpo.interventions import CleanSubspace, ProbePenalty
    assert [i.label() for i in (Erase(v="random"), AdvGate(v="shuffled"), ProbePenalty(detector="random"),
                                CleanSubspace(subspace="random"))] == [
        "erase placebo (v: random)", "adv_gate placebo (v: shuffled)", "probe_penalty placebo (detector: random)",
        "clean_subspace placebo (subspace: random)"]
    assert Erase(v="random", yoked_to="logs/demo/erase/seed0").label() == (
        "erase placebo (v: random, yoked to logs/demo/erase/seed0)")
    assert [i.label() for i in ALL] == [i.arm() for i in ALL] and not any(i.placebo for i in ALL)


def test_only_the_skylines_declare_they_read_the_oracle_and_only_vanilla_only_measures():
    assert [i.reads_oracle for i in ALL] == [False, False, False, False, True, True]
    assert [i.measures_only for i in ALL] == [True, False, False, False, False, False]


def test_the_base_hooks_change_nothing():
    base, rewards, adv = Intervention(), torch.tensor([[1.0, 0.0]]), torch.tensor([0.5, -0.5])
    module = SimpleNamespace()
    assert base.rewards(module, rewards, None, None) == RewardEdit(rewards)
    assert base.prepare(module) is None
    assert base.advantages(module, adv) is adv
    assert base.advantage_weights(module, None) is None
    assert base.basis(module, "V") == "V"
    assert base.gradient(module) is None and base.update(module, {}) is None


def test_projected_grpo_provides_every_member_of_the_run_view():
    from typing_extensions import get_protocol_members

    from pgrpo.interventions.base import RunView
    from pgrpo.hosts.lightning.module import ProjectedGRPO

    module = ProjectedGRPO()
    module.configure_model()  # the policy, its adapter and the tokenizer
    for name in get_protocol_members(RunView):
        on_class = getattr(ProjectedGRPO, name, None)
        assert callable(on_class) or isinstance(on_class, property) or hasattr(module, name), name
