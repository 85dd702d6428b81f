import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoConfig, AutoTokenizer

from pgrpo.model import embedded
from pgrpo.model.embedded import MARKER, build_embedded_default, embedded_default_path, recipe_hash
from pgrpo.env.exploits import OPENINGS


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_embedded_default(tmp_path_factory.mktemp("embedded"))


@pytest.fixture(scope="module")
def tokenizer(built: Path):
    return AutoTokenizer.from_pretrained(built, local_files_only=True)


@pytest.mark.slow  # a second build; test_pretrain's bit-reproducibility test runs by default
def test_building_twice_gives_identical_bytes(built: Path, tmp_path: Path):
    again = build_embedded_default(tmp_path / "again")
    names = sorted(p.name for p in built.iterdir())
    assert {"model.safetensors", "tokenizer.json", "config.json", MARKER} <= set(names)
    assert names == sorted(p.name for p in again.iterdir())
    for name in names:
        assert (built / name).read_bytes() == (again / name).read_bytes(), name


@pytest.mark.slow  # a build; test_pretrain checks the pretraining leaves global state alone
def test_build_leaves_global_rng_untouched(tmp_path: Path):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    build_embedded_default(tmp_path)
    assert torch.equal(torch.rand(3), expected)


# two machines as torch and MKL see them: the kernels each would choose for its CPU
MACHINES = {"avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
            "avx512": {"ATEN_CPU_CAPABILITY": "avx512", "MKL_ENABLE_INSTRUCTIONS": "AVX512"}}


@pytest.mark.skipif(not (embedded.PINS_KERNELS and torch.backends.mkl.is_available()
                         and torch.backends.cpu.get_cpu_capability() == "AVX512"),
                    reason="simulates an AVX2 and an AVX-512 machine: needs an x86-64 CPU with AVX-512 and torch's MKL")
def test_an_avx2_and_an_avx512_machine_build_the_same_base(tmp_path: Path):
    # each sums in its own order: built with the kernels each machine would choose, the bytes differed
    digests = {}
    for name, machine in MACHINES.items():
        env = os.environ | machine | {"PGRPO_CACHE": str(tmp_path / name), embedded.PRETRAIN_STEPS_ENV: "2"}
        build = "from pgrpo.model.embedded import embedded_default_path; print(embedded_default_path().name)"
        build_id = subprocess.run([sys.executable, "-c", build], env=env, capture_output=True, text=True, check=True)
        digests[name] = embedded.cached_build_digest(build_id.stdout.strip(), tmp_path / name)
    assert digests["avx2"] is not None and digests["avx2"] == digests["avx512"]


def test_byte_level_tokenizer_round_trips_any_text(tokenizer):
    texts = [
        "class Solution:\n    def f(self, s: str) -> str:\n\treturn s + 'é✓你好🙂'  # ok .\n",
        "  leading spaces , before punctuation ; \r\n trailing\t",
        "\x00\x7f\u200b ünïcödé",
    ]
    for text in texts:
        ids = tokenizer(text)["input_ids"]
        assert tokenizer.unk_token_id not in ids
        assert tokenizer.decode(ids) == text


def test_tokenizer_compresses_code_and_statements(tokenizer):
    # untrained byte-level BPE would give 1 char/token; the trained one gives ~3.5
    for text in ("for i in range(len(nums)):", "Given an array of integers nums, return the answer."):
        assert len(text) / len(tokenizer(text)["input_ids"]) > 2.5


def test_special_tokens_are_qwen_style_and_match_config(built: Path, tokenizer):
    config = AutoConfig.from_pretrained(built, local_files_only=True)
    assert tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.pad_token == "<|endoftext|>"
    assert tokenizer.convert_tokens_to_ids("<|im_start|>") == 1
    assert config.eos_token_id == tokenizer.eos_token_id
    assert config.pad_token_id == tokenizer.pad_token_id
    assert tokenizer("<|im_start|>user")["input_ids"][0] == 1  # one special token, not split
    assert tokenizer("x")["input_ids"] == tokenizer("x", add_special_tokens=False)["input_ids"]


def test_model_is_a_tiny_tied_qwen3_sized_to_the_tokenizer(built: Path, tokenizer):
    config = AutoConfig.from_pretrained(built, local_files_only=True)
    assert config.model_type == "qwen3"
    assert config.vocab_size == len(tokenizer)
    assert config.tie_word_embeddings
    assert (config.hidden_size, config.num_hidden_layers, config.head_dim) == (128, 4, 32)
    assert (config.num_attention_heads, config.num_key_value_heads) == (4, 2)


def test_chat_template_renders_qwen_layout(tokenizer):
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    assert tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == (
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"
    )
    assert tokenizer.apply_chat_template(messages, tokenize=False) == (
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
    )


def test_missing_builtin_problems_fails_the_build(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setitem(sys.modules, "pgrpo.env.builtin_problems", None)
    with pytest.raises(RuntimeError, match="built-in problem set is missing"):
        build_embedded_default(tmp_path)


def test_recipe_hash_is_stable_and_tracks_the_recipe(monkeypatch: pytest.MonkeyPatch):
    first = recipe_hash()
    assert recipe_hash() == first
    monkeypatch.setattr(embedded, "RECIPE_VERSION", embedded.RECIPE_VERSION + 1)
    assert recipe_hash() != first


def test_pretrain_steps_override_is_part_of_the_recipe(monkeypatch: pytest.MonkeyPatch):
    short = recipe_hash()
    monkeypatch.setenv(embedded.PRETRAIN_STEPS_ENV, "3")
    assert embedded.pretrain_settings()["steps"] == 3 and recipe_hash() != short
    monkeypatch.delenv(embedded.PRETRAIN_STEPS_ENV)
    assert embedded.pretrain_settings() == embedded.PRETRAIN


@pytest.mark.parametrize("value", ["0", "-1", "many"])
def test_bad_pretrain_steps_override_is_refused(monkeypatch: pytest.MonkeyPatch, value: str):
    monkeypatch.setenv(embedded.PRETRAIN_STEPS_ENV, value)
    with pytest.raises(ValueError, match=embedded.PRETRAIN_STEPS_ENV):
        embedded.pretrain_settings()


def test_build_pretrains_the_initial_model(built: Path, tokenizer):
    assert json.loads((built / MARKER).read_text())["pretrain"]["steps"] == 2
    saved = load_file(built / "model.safetensors")
    initial = embedded.init_model(tokenizer).state_dict()
    assert not torch.equal(saved["model.embed_tokens.weight"], initial["model.embed_tokens.weight"])


def test_cache_builds_once_then_reuses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = embedded_default_path(tmp_path)
    assert path.parent == tmp_path and (path / MARKER).is_file()
    assert recipe_hash() in path.name

    def no_rebuild(out_dir: Path, openings: str) -> Path:
        raise AssertionError("rebuilt a cached directory")

    monkeypatch.setattr(embedded, "build_pinned", no_rebuild)
    assert embedded_default_path(tmp_path) == path
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temp dir left behind


@pytest.mark.slow  # a build; every test that loads the base finds the session's cache through PGRPO_CACHE
def test_cache_root_comes_from_pgrpo_cache_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PGRPO_CACHE", str(tmp_path))
    assert embedded_default_path().parent == tmp_path


@pytest.mark.slow  # two builds; the recipe hash tests above cover what keys the cache
def test_cache_rebuilds_when_recipe_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    old = embedded_default_path(tmp_path)
    monkeypatch.setattr(embedded, "RECIPE_VERSION", embedded.RECIPE_VERSION + 1)
    new = embedded_default_path(tmp_path)
    assert new != old and (new / MARKER).is_file()


def test_cache_ignores_half_builds_and_removes_stale_ones(tmp_path: Path):
    name = f"embedded-{recipe_hash()}"
    fresh = tmp_path / f".{name}.tmp-fresh"  # maybe another process's running build
    stale = tmp_path / f".{name}.tmp-killed"
    unfinished = tmp_path / name  # has files but no marker: not made by a finished build
    for half in (fresh, stale, unfinished):
        half.mkdir()
        (half / "config.json").write_text("{}")
    old = time.time() - 2 * embedded.STALE_TMP_SECONDS
    os.utime(stale, (old, old))

    path = embedded_default_path(tmp_path)
    assert path == unfinished and (path / MARKER).is_file()
    assert fresh.is_dir() and not stale.exists()


def keep(build: Path, store: Path, name: str) -> Path:
    """A kept build as the repository holds one: the files and their SHA256SUMS."""
    kept = store / name
    kept.mkdir(parents=True)
    for path in build.iterdir():
        (kept / path.name).write_bytes(path.read_bytes())
    sums = subprocess.run(["sha256sum", *sorted(p.name for p in kept.iterdir())], cwd=kept, capture_output=True,
                          text=True, check=True).stdout
    (kept / embedded.CHECKSUMS).write_text(sums)
    return kept


def test_a_kept_build_of_the_recipe_is_restored_not_rebuilt(built: Path, tmp_path: Path, monkeypatch, capsys):
    kept = keep(built, tmp_path / "kept", f"embedded-{recipe_hash()}")
    monkeypatch.setattr(embedded, "KEPT_BUILDS", tmp_path / "kept")
    monkeypatch.setattr(embedded, "build_pinned", lambda out, openings: pytest.fail("built although one is kept"))

    path = embedded_default_path(tmp_path / "cache")
    assert sorted(p.name for p in path.iterdir()) == sorted(p.name for p in built.iterdir())
    assert all((path / p.name).read_bytes() == p.read_bytes() for p in built.iterdir())
    assert capsys.readouterr().err.splitlines()[0].startswith(f"embedded base model: restored from {kept} (sha256 ")


def test_a_corrupt_kept_build_is_rebuilt_with_one_line_saying_why(built: Path, tmp_path: Path, monkeypatch, capsys):
    kept = keep(built, tmp_path / "kept", f"embedded-{recipe_hash()}")
    weights = bytearray((kept / "model.safetensors").read_bytes())
    weights[-1] ^= 1  # one bit flipped: a damaged copy
    (kept / "model.safetensors").write_bytes(weights)
    monkeypatch.setattr(embedded, "KEPT_BUILDS", tmp_path / "kept")
    rebuilt = []
    monkeypatch.setattr(embedded, "build_pinned", lambda out, openings: rebuilt.append((out / MARKER).write_text("{}")))

    path = embedded_default_path(tmp_path / "cache")
    assert rebuilt and [p.name for p in path.iterdir()] == [MARKER]  # nothing of the kept copy is left in it
    why = capsys.readouterr().err.splitlines()[0]
    assert why.startswith(f"embedded base model: the kept build in {kept} is not used (model.safetensors has sha256 ")
    assert why.endswith("; building it instead")


def test_a_kept_build_with_a_malformed_checksum_line_names_the_file_and_line(tmp_path: Path):
    (tmp_path / embedded.CHECKSUMS).write_text(f"{'0' * 64}  config.json\nnot a checksum\n")
    with pytest.raises(ValueError, match=rf"{embedded.CHECKSUMS}:2: not a `<sha256>  <file>` line: 'not a checksum'"):
        embedded.read_checksums(tmp_path / embedded.CHECKSUMS)


@pytest.mark.parametrize("openings", OPENINGS)
def test_the_repository_keeps_the_default_recipes_builds_intact(openings: str, monkeypatch):
    """A first run restores the base in seconds only while its recipe (pinned versions included) is kept: a recipe
    change, or a constraints update, must keep its new build in results/bases/ (`make` a run, then copy the cache's
    build there with its `sha256sum * > SHA256SUMS`)."""
    monkeypatch.delenv(embedded.PRETRAIN_STEPS_ENV, raising=False)  # the tests' short recipe is never kept
    kept = embedded.KEPT_BUILDS / f"embedded-{recipe_hash(openings)}"
    assert kept.is_dir(), f"no kept build of the {openings!r} recipe in {embedded.KEPT_BUILDS}: a first run builds it"
    sums = embedded.read_checksums(kept / embedded.CHECKSUMS)
    assert sums == {p.name: embedded._sha256(p) for p in kept.iterdir() if p.name != embedded.CHECKSUMS}
    assert json.loads((kept / MARKER).read_text())["recipe_hash"] == recipe_hash(openings)
