"""adv_shortcut_v: a rollout's score is the slope of its NLL as the knobs step hack-ward along V (V points where
the hack pairs' NLL gradients exceed the clean ones'), and a real V scores the pairs' hacks above their clean
completions."""

from types import SimpleNamespace

import pytest
import torch
from test_extraction import planted_pairs, tiny_model

from pgrpo.model.adapter import attach_adapter
from pgrpo.directions.extraction import HackBasis, extract_basis
from pgrpo.interventions import AdvShortcutV
from pgrpo.interventions.adv_shortcut_v import v_scores
from pgrpo.step.loss import token_logprobs
from pgrpo.step.rollout import pack


def rollouts(n: int = 4):
    generator = torch.Generator().manual_seed(0)
    prompts = [torch.randint(1, 64, (3 + i % 2,), generator=generator).tolist() for i in range(n)]
    completions = [torch.randint(1, 64, (2 + i,), generator=generator).tolist() for i in range(n)]
    return pack(prompts, completions, 0)


def mean_logp(model, packed) -> torch.Tensor:
    """(B,) each row's mean completion-token log-likelihood."""
    logp, _ = token_logprobs(model, packed.input_ids, packed.attention_mask, packed.completion_len)
    mask = packed.completion_mask.float()
    return (logp * mask).sum(1) / mask.sum(1)


def test_a_rollouts_score_is_the_slope_of_its_nll_along_v():
    model = tiny_model()
    adapter = attach_adapter(model)
    generator = torch.Generator().manual_seed(1)
    V = {name: torch.linalg.qr(torch.randn(m.rank, 2, generator=generator, ))[0].T
         for name, m in sorted(adapter.items())[:3]}
    basis = HackBasis(V, {name: torch.ones(2) for name in V})
    module = SimpleNamespace(policy=model, adapter=adapter, basis=basis, micro_batch_size=2,
                             generation=SimpleNamespace(temperature=1.0))
    packed = rollouts()
    rewards = torch.zeros(2, 2)
    edit = AdvShortcutV(alpha=1.0).rewards(module, rewards, packed, None)

    eps = 1e-2  # the knobs fold into the weights in fp32: a smaller step drowns in rounding

    def stepped(sign: float) -> torch.Tensor:
        with torch.no_grad():
            for name, rows in V.items():
                adapter[name].delta_s += sign * eps * rows.sum(0)
            out = mean_logp(model, packed)
            for name, rows in V.items():
                adapter[name].delta_s -= sign * eps * rows.sum(0)
        return out

    slope = (stepped(-1) - stepped(+1)) / (2 * eps)  # (B,): the NLL's finite-difference slope along V's rows
    z = (slope - slope.mean()) / slope.std()
    torch.testing.assert_close(edit.rewards.flatten(), -z.clamp(min=0), rtol=0, atol=0.03)
    assert edit.flagged.flatten().tolist() == (z > 0).tolist()


def test_v_extracted_from_pairs_scores_their_hacks_above_their_clean_completions():
    g_hack, g_clean, _ = planted_pairs()  # per-completion NLL gradients, as extraction reads them
    basis = extract_basis({"m": g_hack}, {"m": g_clean}, k=1)
    assert (v_scores({"m": g_hack}, basis) > v_scores({"m": g_clean}, basis)).all()


def test_a_negative_alpha_names_the_field():
    with pytest.raises(ValueError, match="alpha"):
        AdvShortcutV(alpha=-1.0)
