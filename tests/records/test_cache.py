"""The first run says what it builds: each cached build announces itself once, then a cache hit says so in a line."""

import hashlib
import os
from pathlib import Path

import torch
from lightning.pytorch.utilities import rank_zero_only

from pgrpo.model import embedded, pretrain
from pgrpo.records import cache
from pgrpo.model.adapter import attach_adapter
from pgrpo.directions.basis import ExtractionConfig, load_or_extract_basis
from pgrpo.records.cache import announce, progress_ticker
from pgrpo.hosts.lightning.data import GRPODataModule
from pgrpo.env import load_problems
from pgrpo.model.load import load_model_and_tokenizer
from pgrpo.model.pretrain import PretrainStats


def test_the_teacher_pool_is_announced_when_built_then_said_to_be_cached(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PGRPO_CACHE", str(tmp_path))
    data = GRPODataModule()
    data.problems = load_problems()[:2]  # a pool of two problems grades in a second
    path = data._pool_dir()
    built = capsys.readouterr().err.splitlines()
    assert built[0] == (f"building the teacher pool (grading the template completions of 2 problems, ~0 s on 2 cores; "
                        f"once, cached in {path})")
    assert built[1].startswith("teacher pool: built in ") and len(built) == 2
    data._pool_dir()
    data._pool_dir()
    assert capsys.readouterr().err == f"teacher pool: cached ({path})\n"  # once, however often it is resolved


def test_v_is_announced_when_extracted_into_the_cache_then_said_to_be_cached(tmp_path, capsys):
    model, tokenizer = load_model_and_tokenizer("embedded")
    adapter = attach_adapter(model, ("q_proj",))
    problems, cfg = load_problems()[:3], ExtractionConfig(k=1, n_heldout=1)

    def load(cache: Path | None, control: str = "none"):
        return load_or_extract_basis(model, adapter, tokenizer, problems, cfg, model_id="embedded-test", cache=cache,
                                     control=control)

    capsys.readouterr()
    load(tmp_path)
    built = capsys.readouterr().err.splitlines()
    assert built[0].startswith("building the hack basis V (gradients of 6 completions, ~1 s for the embedded model")
    assert built[1].startswith("hack basis V: built in ") and len(built) == 2
    path = next(tmp_path.glob("*.safetensors"))
    assert f"cached in {path})" in built[0]
    load(tmp_path)
    assert capsys.readouterr().err == f"hack basis V: cached ({path})\n"
    load(tmp_path, control="shuffled")
    assert capsys.readouterr().err.startswith("building the hack basis V of the shuffled control (")
    load(None)  # the V refresh: nothing is cached, nothing said
    assert capsys.readouterr().err == ""


def test_the_embedded_base_is_announced_when_built_then_said_to_be_cached(tmp_path, monkeypatch, capsys):
    def fake_build(out: Path, openings: str) -> Path:  # the real one pretrains: minutes at full length
        (out / embedded.MARKER).write_text("{}")
        return out

    monkeypatch.setattr(embedded, "build_pinned", fake_build)
    monkeypatch.setenv(embedded.PRETRAIN_STEPS_ENV, "300")
    path = embedded.embedded_default_path(tmp_path)
    built = capsys.readouterr().err.splitlines()
    assert built[0] == (f"building the embedded base model (tokenizer and 300 pretraining steps, ~4.2 min on 2 cores; "
                        f"once, cached in {path})")
    assert built[1].startswith("embedded base model: built in ") and len(built) == 2
    embedded.embedded_default_path(tmp_path)
    embedded.embedded_default_path(tmp_path)
    assert capsys.readouterr().err == f"embedded base model: cached ({path})\n"


def test_progress_is_announced_every_tenth_of_the_steps_with_the_time_left(capsys):
    tick = progress_ticker("pretraining", 25)
    for _ in range(25):
        tick()
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(",")[0] for line in lines] == [f"  pretraining {n}/25" for n in (*range(2, 25, 2), 25)]
    assert ", ~" in lines[0] and lines[0].endswith(" left") and "left" not in lines[-1]


def test_only_rank_zero_announces(monkeypatch, capsys):
    monkeypatch.setattr(rank_zero_only, "rank", 1)
    announce("building something")
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(rank_zero_only, "rank", 0)
    announce("building something")
    assert capsys.readouterr().err == "building something\n"


def test_pretraining_announces_its_progress_in_optimizer_steps(tmp_path, monkeypatch, capsys):
    def fake_pretrain(model, tokenizer, corpus, steps, lr, batch_size, seed):  # the steps without the training
        optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))])
        for _ in range(steps):
            optimizer.step()
        return PretrainStats(steps, 0.0, 0.0, 0.0, 0.0)

    monkeypatch.setattr(pretrain, "pretrain", fake_pretrain)
    monkeypatch.setattr(pretrain, "pretraining_corpus", lambda tokenizer, seed, openings: [])
    monkeypatch.setenv(embedded.PRETRAIN_STEPS_ENV, "3")
    embedded.build_embedded_default(tmp_path)
    lines = [line.split(",")[0] for line in capsys.readouterr().err.splitlines() if "pretraining" in line]
    assert lines == ["  pretraining 1/3", "  pretraining 2/3", "  pretraining 3/3"]
    torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))]).step()  # the counting ends with the build
    assert "pretraining" not in capsys.readouterr().err


def test_a_files_digest_is_read_once_and_again_when_the_file_is_rewritten_in_place(tmp_path, monkeypatch):
    weights, reads = tmp_path / "model.safetensors", []
    real_read = cache.hash_file_into
    monkeypatch.setattr(cache, "hash_file_into", lambda digest, path: reads.append(path) or real_read(digest, path))
    weights.write_bytes(b"first")
    first = cache.file_sha256(weights, prefix="v1:")
    assert first == hashlib.sha256(b"v1:first").hexdigest() and cache.file_sha256(weights, prefix="v1:") == first
    assert len(reads) == 1  # a real model's GBs are read once a process
    weights.write_bytes(b"other")
    os.utime(weights, ns=(1, 1))  # another time: a rewrite within the clock's resolution is still seen
    assert cache.file_sha256(weights, prefix="v1:") == hashlib.sha256(b"v1:other").hexdigest() and len(reads) == 2
