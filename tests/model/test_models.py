import json
import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import huggingface_hub
import pytest
import torch
from transformers import LogitsProcessor, LogitsProcessorList

from pgrpo.model import embedded
from pgrpo.chat import render_chat
from pgrpo.model.load import load_model_and_tokenizer, model_id

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Sum two ints."}]


@pytest.fixture(autouse=True)
def cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    # one cache for the module, so the embedded default is built once
    root = tmp_path_factory.getbasetemp() / "pgrpo-cache"
    monkeypatch.setenv("PGRPO_CACHE", str(root))
    return root


@pytest.fixture
def embedded_dir(cache: Path) -> Path:
    return embedded.embedded_default_path()


@pytest.fixture
def loaded():
    return load_model_and_tokenizer("embedded")


@pytest.mark.parametrize("flags, warned", [("fpu avx2 fma", True), ("avx2 avx512f avx512_bf16", False),
                                           ("avx2 amx_bf16 amx_tile", False)])
def test_bf16_weights_on_a_cpu_without_bf16_instructions_are_named_as_the_slow_choice(
        flags, warned, tmp_path, monkeypatch, capsys):
    """On an AMD EPYC with AVX2 a bf16 matmul took 53x float32's time: a config's bf16 cannot pass in silence."""
    import pgrpo.model.load as models
    import pgrpo.model.substrate as substrate

    info = tmp_path / "cpuinfo"
    info.write_text(f"model name\t: Some CPU\nflags\t\t: {flags}\n")
    monkeypatch.setattr(substrate, "CPUINFO", info)
    models._warn_slow_bf16.cache_clear()
    load_model_and_tokenizer("embedded", dtype="bfloat16")
    said = capsys.readouterr().err
    assert ("dtype bfloat16 on Some CPU" in said and "--model.dtype float32" in said) == warned
    load_model_and_tokenizer("embedded", dtype="float32")
    assert "bfloat16" not in capsys.readouterr().err


def test_embedded_loads_frozen_in_eval_mode_for_left_padded_generation(loaded):
    model, tokenizer = loaded
    assert not model.training
    assert not any(p.requires_grad for p in model.parameters())
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert tokenizer.padding_side == "left"
    assert tokenizer.pad_token == "<|endoftext|>"


def test_bfloat16_is_honoured():
    model, _ = load_model_and_tokenizer("embedded", dtype="bfloat16")
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())


def test_unknown_dtype_is_refused_with_the_choices():
    with pytest.raises(ValueError, match=r"'fp8'.*float32, bfloat16, float16"):
        load_model_and_tokenizer("embedded", dtype="fp8")


@pytest.mark.parametrize("value", ["/no/such/checkpoint", "no-such-org/no-such-model"])
def test_unavailable_model_error_names_the_value_and_the_remedy(value: str):
    with pytest.raises(FileNotFoundError) as err:
        load_model_and_tokenizer(value)
    assert repr(value) in str(err.value)
    assert "not in the local Hugging Face cache" in str(err.value)
    assert "model: embedded" in str(err.value)


class ForceEosOnRow0(LogitsProcessor):
    def __init__(self, at_len: int, eos: int):
        self.at_len, self.eos = at_len, eos

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if input_ids.shape[1] == self.at_len:
            scores[0] = -float("inf")
            scores[0, self.eos] = 0.0
        return scores


def test_generate_stops_a_row_at_eos_and_pads_it(loaded):
    model, tokenizer = loaded
    prompts = [render_chat(tokenizer, MESSAGES), render_chat(tokenizer, MESSAGES[1:])]
    batch = tokenizer(prompts, return_tensors="pt", padding=True)
    width = batch["input_ids"].shape[1]
    assert batch["attention_mask"][1, 0] == 0  # the shorter prompt is padded on the left
    force = LogitsProcessorList([ForceEosOnRow0(width + 2, tokenizer.eos_token_id)])
    out = model.generate(**batch, max_new_tokens=6, do_sample=False, logits_processor=force)
    new = out[:, width:]
    assert new.shape == (2, 6)
    assert new[0, 2] == tokenizer.eos_token_id
    assert (new[0, 3:] == tokenizer.pad_token_id).all()
    assert tokenizer.decode(new[0], skip_special_tokens=True) == tokenizer.decode(new[0, :2])


def test_render_chat_ends_with_the_assistant_turn(loaded):
    _, tokenizer = loaded
    assert render_chat(tokenizer, MESSAGES) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nSum two ints.<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_render_chat_falls_back_to_plain_turns_without_a_template():
    assert render_chat(SimpleNamespace(chat_template=None), MESSAGES) == (
        "System: Be brief.\nUser: Sum two ints.\nAssistant:"
    )


def test_local_directory_without_pad_token_loads_with_eos_as_pad(embedded_dir: Path, tmp_path: Path):
    checkpoint = tmp_path / "ckpt"
    shutil.copytree(embedded_dir, checkpoint)
    config_path = checkpoint / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    del config["pad_token"]
    config_path.write_text(json.dumps(config))
    _, tokenizer = load_model_and_tokenizer(str(checkpoint))
    assert tokenizer.pad_token == tokenizer.eos_token == "<|im_end|>"


def test_hub_id_loads_from_the_local_cache_only(
    embedded_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # the layout huggingface_hub leaves behind after a download
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "models--acme--tiny"
    shutil.copytree(embedded_dir, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))

    model, _ = load_model_and_tokenizer("acme/tiny")
    assert model.config.model_type == "qwen3"
    assert model_id("acme/tiny") == f"acme/tiny@{commit}"


def test_model_id_of_embedded_is_stable_and_tracks_the_recipe(monkeypatch: pytest.MonkeyPatch):
    first = model_id("embedded")
    assert model_id("embedded") == first
    monkeypatch.setattr(embedded, "RECIPE_VERSION", embedded.RECIPE_VERSION + 1)
    assert model_id("embedded") != first


def test_the_distinct_openings_twin_is_its_own_build_and_its_templates_open_per_mode():
    from pgrpo.model.load import hack_openings, resolve_model_path

    assert model_id("embedded-distinct") != model_id("embedded")
    twin = resolve_model_path("embedded-distinct")
    assert twin != resolve_model_path("embedded")
    assert json.loads((twin / embedded.MARKER).read_text())["openings"] == "distinct"
    assert [hack_openings(m) for m in ("embedded", "embedded-distinct", "/tmp")] == ["shared", "distinct", "shared"]


def test_model_id_of_directory_is_stable_and_tracks_its_weights(embedded_dir: Path, tmp_path: Path):
    checkpoint = tmp_path / "ckpt"
    shutil.copytree(embedded_dir, checkpoint)
    first = model_id(str(checkpoint))
    assert first.startswith("ckpt@")
    assert model_id(str(checkpoint)) == first
    weights = checkpoint / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))  # other weights written in place
    assert model_id(str(checkpoint)) != first


def test_a_checkpoint_copied_elsewhere_at_another_time_keeps_its_model_id(embedded_dir: Path, tmp_path: Path):
    # a copy to another machine or path sets new modification times: its V bases, pools and kept cells must still
    # be found under the same id
    checkpoint = tmp_path / "ckpt"
    shutil.copytree(embedded_dir, checkpoint)
    first = model_id(str(checkpoint))
    elsewhere = tmp_path / "elsewhere" / "ckpt"
    shutil.copytree(checkpoint, elsewhere)
    weights = elsewhere / "model.safetensors"
    os.utime(weights, ns=(0, weights.stat().st_mtime_ns + 10**9))
    assert model_id(str(elsewhere)) == first
