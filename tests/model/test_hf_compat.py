from torch import nn

from pgrpo.model.hf_compat import cache_name


def test_the_cache_keyword_is_the_one_the_models_forward_takes():
    class Current(nn.Module):
        def forward(self, input_ids, cache=None, use_cache=None): ...

    class Before5(nn.Module):
        def forward(self, input_ids, past_key_values=None, use_cache=None): ...

    assert cache_name(Current()) == "cache"
    assert cache_name(Before5()) == "past_key_values"
