"""What transformers renamed between the versions pgrpo supports (transformers>=4.51 in pyproject.toml).

From the 5.2x releases the key/value cache is `cache`, as argument and as output field; `past_key_values`
still works there but prints a FutureWarning on every generate and forward. Older releases know only
`past_key_values`. The name is read off the model's own forward, so a new release needs no change here.
"""

import inspect

from torch import nn


def cache_name(model: nn.Module) -> str:
    """The keyword `model`'s forward takes its key/value cache under (and the output field that returns it)."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
