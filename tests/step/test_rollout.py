"""Student sampling: each prompt prefilled once; rows reported as they end, while the batch goes on."""

import torch
import transformers

from pgrpo.step.loss import token_logprobs
from pgrpo.step.rollout import SamplingConfig, left_pad, pack, sample

EOS = 2


class PromptTokenizer:
    """The least a tokenizer must do for `sample`: encode prompts (no chat template), name pad and EOS."""

    chat_template = None
    pad_token_id = 0
    eos_token_id = EOS

    def __call__(self, prompts: list[str], add_special_tokens: bool) -> dict:
        return {"input_ids": [[3, 1] * len(p) + [4] for p in prompts]}  # unequal lengths: left padding


def tiny_model() -> transformers.Qwen3ForCausalLM:
    torch.manual_seed(0)
    config = transformers.Qwen3Config(vocab_size=5, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=1, head_dim=8, eos_token_id=EOS)
    return transformers.Qwen3ForCausalLM(config).eval()


def test_each_row_is_reported_the_step_it_emits_eos_with_its_completion():
    model = tiny_model()
    reported = []
    _, completions, clipped = sample(model, PromptTokenizer(), ["a", "bb"], 6, SamplingConfig(12),
                                     on_finished=lambda row, tokens: reported.append((row, list(tokens))))
    ended = [row for row, c in enumerate(clipped) if not c]
    assert 0 < len(ended) < len(clipped)  # the seed gives both kinds of row
    assert sorted(row for row, _ in reported) == ended  # every row that ended, once; none that ran out of tokens
    assert all(tokens == completions[row] and tokens[-1] == EOS for row, tokens in reported)
    lengths = [len(tokens) for _, tokens in reported]
    assert lengths == sorted(lengths)  # reported as they end, not when the batch is done


def test_prefilling_each_prompt_once_samples_what_generate_samples_from_the_whole_prompts():
    model = tiny_model()
    tokenizer = PromptTokenizer()
    torch.manual_seed(1)
    _, completions, _ = sample(model, tokenizer, ["a", "bb"], 3, SamplingConfig(6))
    ids, mask = left_pad([p for p in tokenizer(["a", "bb"], False)["input_ids"] for _ in range(3)], 0)
    torch.manual_seed(1)
    whole = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
                           max_new_tokens=6, pad_token_id=0, eos_token_id=EOS)[:, ids.shape[1]:].tolist()
    for got, expected in zip(completions, whole):
        assert got == expected[: len(got)] and (got[-1] == EOS or len(got) == 6)


def test_rows_are_cut_to_their_own_lengths_and_score_their_tokens_as_in_the_whole_batch():
    prompts = [[3, 1, 4], [3, 1, 1, 1, 1, 1, 4], [1, 4]]
    completions = [[1, 2], [3, 3, 3, 3, 3, 3, 3, 2], [4, 2]]  # the second row is long, prompt and completion
    packed = pack(prompts, completions, 0)
    short = packed.rows(torch.tensor([0, 2]))
    assert short.input_ids.shape == (2, 3 + 2) and short.completion_len == 2  # only their own padding left
    model = tiny_model()
    with torch.no_grad():
        whole = token_logprobs(model, packed.input_ids, packed.attention_mask, packed.completion_len)[0]
        cut = token_logprobs(model, short.input_ids, short.attention_mask, short.completion_len)[0]
    torch.testing.assert_close(cut, whole[[0, 2], :2], rtol=1e-5, atol=1e-6)
