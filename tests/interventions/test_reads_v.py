"""Negative controls: an intervention that reads V swaps it at train start for a placebo matched in k per module
(erase's and route's random V: matched in strength, tests/directions/test_calibration.py), never twice (the controls'
construction itself: tests/directions/test_controls.py)."""


import pytest
import torch

from pgrpo.directions.basis import ExtractionConfig
from pgrpo.directions.extraction import HackBasis
from pgrpo.interventions import AdvGate, Erase, ReadsV, Route, erase
from pgrpo.step.optim import OptimConfig

RANK = 8
# tau_axis and the noise floor left the real V with a different k in each module, and no module c at all
REAL_K = {"a": 3, "b": 1}


def basis(k_per_module: dict[str, int], seed: int = 0, control: str | None = None) -> HackBasis:
    g = torch.Generator().manual_seed(seed)
    V = {n: torch.linalg.qr(torch.randn(RANK, k, generator=g))[0].T.contiguous() for n, k in k_per_module.items()}
    sigma = {n: torch.arange(k, 0, -1).float() for n, k in k_per_module.items()}
    return HackBasis(V, sigma, {"control": control} if control else {})


class FakeModule:
    """The part of the run's view (RunView) a control needs: the extraction, its problems, extract_basis, the log."""

    def __init__(self, extracted: HackBasis | None = None):
        self.extraction, self.optim = ExtractionConfig(tau_axis=0.5, noise_floor=0.1), OptimConfig()
        self.extraction_problems, self.logged = [], []
        self.extracted, self.calls = extracted, []

    def log_at_start(self, metrics):
        self.logged.append(metrics)

    def extract_basis(self, problems, control="none", extraction=None, cached=True):
        self.calls.append((control, extraction))
        return self.extracted


def test_the_real_v_is_read_as_it_is():
    real = basis(REAL_K)
    assert Erase().basis(FakeModule(), real) is real


@pytest.fixture
def no_base_advantage(monkeypatch):
    """Base rollouts whose groups all scored alike: no gradient to match erase's placebo on, so it keeps k."""
    monkeypatch.setattr(erase, "base_gradient", lambda module: {n: torch.zeros(RANK) for n in REAL_K})


@pytest.mark.parametrize("intervention", [Erase, Route, AdvGate])
def test_random_control_is_orthonormal_matched_in_k_and_seeded(intervention, no_base_advantage):
    control = intervention(v="random", v_seed=3).basis(FakeModule(), basis(REAL_K))
    assert control.meta["control"] == "random"
    for name, k in REAL_K.items():
        assert control.V[name].shape == (k, RANK)
        torch.testing.assert_close(control.V[name] @ control.V[name].T, torch.eye(k), atol=1e-5, rtol=0)
    again = intervention(v="random", v_seed=3).basis(FakeModule(), basis(REAL_K))
    assert all(torch.equal(again.V[n], control.V[n]) for n in REAL_K)
    other = intervention(v="random", v_seed=4).basis(FakeModule(), basis(REAL_K))
    assert not torch.equal(other.V["a"], control.V["a"])


def test_random_control_follows_the_run_seed_by_default(monkeypatch, no_base_advantage):
    drawn = {}
    for seed in ("0", "1"):
        monkeypatch.setenv("PL_GLOBAL_SEED", seed)
        drawn[seed] = Erase(v="random").basis(FakeModule(), basis(REAL_K)).V["a"]
    assert not torch.equal(drawn["0"], drawn["1"])


@pytest.mark.parametrize("control", ["shuffled", "nonhack"])
def test_extracted_controls_keep_their_top_rows_matched_to_the_real_k(control):
    extracted = basis({"a": 4, "b": 4, "c": 4}, seed=1, control=control)
    module = FakeModule(extracted)
    chosen = Erase(v=control).basis(module, basis(REAL_K))
    ((asked, cfg),) = module.calls
    # no axis dropping for the control: it must have at least the real V's rows in every module
    assert asked == control and cfg.tau_axis is None and cfg.noise_floor is None
    assert {n: v.shape[0] for n, v in chosen.V.items()} == REAL_K
    assert all(torch.equal(chosen.V[n], extracted.V[n][:k]) for n, k in REAL_K.items())
    assert chosen.meta["control"] == control and chosen.meta["k_total"] == "4"


def test_a_resumed_control_basis_is_not_swapped_again():
    restored = basis(REAL_K, control="shuffled")  # on resume V comes from the checkpoint
    module = FakeModule()
    assert Erase(v="shuffled").basis(module, restored) is restored and module.calls == []


def test_unknown_control_names_the_choices():
    with pytest.raises(ValueError, match="random"):
        ReadsV(v="reversed")
