"""Pooled hidden states: each row's completion tokens averaged per layer, whatever else shares its batch."""

import torch

from pgrpo.directions.activations import pooled_states
from pgrpo.step.rollout import pack
from test_extraction import tiny_model

PROMPTS = [[5, 6, 7], [8, 9, 10, 11, 12, 13]]
COMPLETIONS = [[20, 21], [22, 23, 24, 25, 26]]


def test_a_rows_pooled_states_are_the_mean_over_its_completion_tokens_at_every_layer():
    model = tiny_model()
    states = pooled_states(model, pack(PROMPTS, COMPLETIONS, pad_id=0))  # (2, L+1, d)
    assert states.shape == (2, model.config.num_hidden_layers + 1, model.config.hidden_size)
    for row, (prompt, completion) in enumerate(zip(PROMPTS, COMPLETIONS)):
        alone = model(torch.tensor([prompt + completion]), output_hidden_states=True).hidden_states
        expected = torch.stack([h[0, len(prompt):].mean(0) for h in alone])  # (L+1, d)
        assert torch.allclose(states[row], expected, atol=1e-5)


def test_padding_and_batch_size_do_not_change_a_rows_states():
    model = tiny_model()
    packed = pack(PROMPTS, COMPLETIONS, pad_id=0)
    together, one_by_one = pooled_states(model, packed), pooled_states(model, packed, batch_size=1)
    assert torch.allclose(together, one_by_one, atol=1e-5)
