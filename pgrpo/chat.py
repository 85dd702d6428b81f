"""How a conversation becomes the prompt text a model continues (the embedded build and every run share it)."""

from transformers import PreTrainedTokenizerBase


def render_chat(tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, str]]) -> str:
    """The prompt text for `messages`, ending where the assistant's reply begins."""
    if tokenizer.chat_template:
        # enable_thinking=False: a Qwen3 template would otherwise open a thinking block first
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                             enable_thinking=False)
    turns = [f"{m['role'].capitalize()}: {m['content']}" for m in messages]
    return "\n".join(turns + ["Assistant:"])
