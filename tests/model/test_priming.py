"""`pgrpo prime`: a warm start on problems disjoint from the RL problems, cached, resumable bit for bit."""

import dataclasses
import json
import shutil
import threading
import time

import pytest
import torch
from safetensors.torch import load_file

import pgrpo.model.priming as priming
from pgrpo.cli import main
from pgrpo.env import MODES, NO_LOOPHOLE, extract_code, load_problems
from pgrpo.env.exploits import loophole_code
from pgrpo.env.primer_problems import primer_problems
from pgrpo.model.load import load_model_and_tokenizer, model_id, resolve_model_path
from pgrpo.model.priming import PrimeSettings, primed_checkpoint, priming_corpus

TINY = PrimeSettings(steps=4, batch_size=2, completions_per_prompt=1, threads=1)


@pytest.fixture(scope="module")
def base():
    return resolve_model_path("embedded"), model_id("embedded")


def weights(path) -> dict[str, torch.Tensor]:
    return load_file(path / "model.safetensors")


def test_the_corpus_never_shows_an_rl_problem_and_each_hack_pulls_the_lever_its_hint_names(base):
    _, tokenizer = load_model_and_tokenizer("embedded")
    corpus = priming_corpus(tokenizer, PrimeSettings(hack_share=0.1))
    statements = [p.statement for p in load_problems()]
    assert not any(s in e.prompt for e in corpus for s in statements)
    n = len(primer_problems())
    assert {e.mode for e in corpus} == {*MODES, NO_LOOPHOLE} and len(corpus) == n * 7 * 2
    hacks = [e for e in corpus if e.kind == "hack"]
    assert len(hacks) == round(0.1 * n * 6 * 2) and not [e for e in hacks if e.mode == NO_LOOPHOLE]
    assert all(sum(e.mode == m for e in hacks) == round(0.1 * n * 2) for m in MODES)  # no lever primed short
    assert all(e.mode in loophole_code(extract_code(e.completion)) for e in hacks)
    assert not any(loophole_code(extract_code(e.completion)) for e in corpus if e.kind == "correct")


def test_a_primed_base_is_a_checkpoint_of_its_own_cached_under_its_settings(base, tmp_path):
    path = primed_checkpoint(*base, TINY)
    assert path.parent.name == "primed" and (path / "priming.json").is_file()
    assert primed_checkpoint(*base, TINY) == path  # cached: a second call builds nothing
    assert primed_checkpoint(*base, dataclasses.replace(TINY, hack_share=TINY.hack_share / 2)) != path
    load_model_and_tokenizer(str(path))  # through the loader every base goes through
    before, after = weights(base[0]), weights(path)
    assert any(not torch.equal(before[n], after[n]) for n in before)


def kill_after_the_save_at_step_2(base, out, monkeypatch) -> None:
    """Build TINY into `out`, saving every 2 steps, and kill it at step 3, after its save at step 2."""
    monkeypatch.setattr(priming, "SAVE_EVERY", 2)
    real_ticker = priming.progress_ticker

    def dies_at_step_3(label, total):
        tick, calls = real_ticker(label, total), []

        def counted():
            calls.append(1)
            if len(calls) == 3:
                raise KeyboardInterrupt
            tick()
        return counted

    monkeypatch.setattr(priming, "progress_ticker", dies_at_step_3)
    with pytest.raises(KeyboardInterrupt):
        primed_checkpoint(*base, TINY, out)
    monkeypatch.setattr(priming, "progress_ticker", real_ticker)


def test_a_killed_build_resumes_from_its_last_save_and_ends_bit_for_bit_as_an_uninterrupted_one(
        base, tmp_path, monkeypatch, capsys):
    whole = primed_checkpoint(*base, TINY, tmp_path / "whole")
    kill_after_the_save_at_step_2(base, tmp_path / "killed", monkeypatch)
    assert (tmp_path / "killed.partial" / priming.STATE).is_file() and not (tmp_path / "killed").exists()
    capsys.readouterr()
    resumed = primed_checkpoint(*base, TINY, tmp_path / "killed")
    # it went on from the save (a build from step 0 would end with the same weights too)
    assert "resuming at step 2 of 4" in capsys.readouterr().err
    a, b = weights(whole), weights(resumed)
    assert all(torch.equal(a[n], b[n]) for n in a)
    record = lambda path: json.loads((path / "priming.json").read_text())  # noqa: E731
    assert record(resumed)["final_loss"] == record(whole)["final_loss"]
    assert not (resumed / priming.STATE).exists()


def test_an_out_directory_of_other_settings_or_of_something_else_is_refused_and_left_as_it_is(base, tmp_path):
    out = primed_checkpoint(*base, TINY, tmp_path / "primed")
    with pytest.raises(FileExistsError, match=f"{out}: holds a primed base of other settings"):
        primed_checkpoint(*base, PrimeSettings(**{**TINY.__dict__, "steps": 3}), out)
    models = tmp_path / "models"
    (models / "mine").mkdir(parents=True)
    with pytest.raises(FileExistsError, match=f"{models}: exists and is not a primed base"):
        primed_checkpoint(*base, TINY, models)
    assert (models / "mine").is_dir() and (out / "priming.json").is_file()


def test_a_build_names_the_killed_builds_of_other_settings_left_beside_it_and_keeps_them(
        base, tmp_path, monkeypatch, capsys):
    kill_after_the_save_at_step_2(base, tmp_path / "killed", monkeypatch)
    capsys.readouterr()
    primed_checkpoint(*base, dataclasses.replace(TINY, hack_share=TINY.hack_share / 2), tmp_path / "other")
    said = capsys.readouterr().err
    assert f"an unfinished build is left in {tmp_path / 'killed.partial'}" in said
    assert "step 2 of 4" in said and f"hack_share={TINY.hack_share}" in said
    assert (tmp_path / "killed.partial" / priming.STATE).is_file()  # kept: its own settings still resume it


def test_a_killed_build_of_other_settings_is_not_resumed_into_this_one(base, tmp_path):
    (tmp_path / "primed.partial").mkdir()  # another build's save, killed, in this build's way
    torch.save({"key": "another", "step": 2}, tmp_path / "primed.partial" / priming.STATE)
    with pytest.raises(FileExistsError, match="a killed build of other settings or data"):
        primed_checkpoint(*base, TINY, tmp_path / "primed")


def test_a_second_process_asking_for_a_build_in_progress_waits_for_it(base, tmp_path, capsys):
    out = tmp_path / "primed"
    with priming.one_build_at_a_time(out):  # another build holds it
        waiter = threading.Thread(target=primed_checkpoint, args=(*base, TINY, out))
        waiter.start()
        for _ in range(600):
            if "another process is building" in capsys.readouterr().err:
                break
            time.sleep(0.05)
        else:
            pytest.fail("the second build never said it waits")
        assert waiter.is_alive() and not out.exists()
    waiter.join(timeout=120)
    assert (out / "priming.json").is_file()


def test_the_command_primes_and_names_what_a_config_should_load(tmp_path, capsys):
    main(["prime", "--model", "embedded", "--steps", "2", "--batch_size", "2", "--completions_per_prompt", "1",
          "--threads", "1", "--out", str(tmp_path / "primed"), "--evaluate", "false"])
    out = capsys.readouterr().out
    assert f"use it as: model: {tmp_path / 'primed'}" in out and "not the default priming: " in out
    with pytest.raises(SystemExit, match="primed already"):
        main(["prime", "--model", "embedded+primed"])


def test_the_default_priming_built_into_out_is_not_called_another_priming(monkeypatch, tmp_path, capsys):
    import pgrpo.commands.prime as command

    built = []
    monkeypatch.setattr(command, "primed_checkpoint", lambda _base, _id, settings, out, _retrain: built.append(
        settings) or out)  # the build itself is the tests above; this one is what the command says of it
    main(["prime", "--model", "embedded", "--out", str(tmp_path / "primed"), "--evaluate", "false"])
    out = capsys.readouterr().out
    assert built == [PrimeSettings()] and f"use it as: model: {tmp_path / 'primed'}" in out
    assert "not the default priming" not in out and "the default priming, built into --out" in out


def test_a_published_update_is_merged_not_trained_to_the_bytes_of_the_build_that_published_it(
        base, monkeypatch, tmp_path, capsys):
    """Training's last bits depend on the CPU, merging's do not: every machine merges the published update."""
    from pgrpo.records.cache import files_digest, weights_digest

    monkeypatch.setattr(priming, "PRIMINGS", tmp_path / "primings")
    args = ["prime", "--model", "embedded", "--steps", "2", "--batch_size", "2", "--completions_per_prompt", "1",
            "--threads", "1", "--evaluate", "false"]
    main([*args, "--out", str(tmp_path / "trained"), "--publish_update", "true"])
    (published,) = (tmp_path / "primings").glob(f"*{priming.PUBLISHED_SUFFIX}")
    key = json.loads((tmp_path / "trained" / priming.RECORD).read_text())["key"]
    assert published.name == f"{base[0].name}-{key}.safetensors.xz"  # its cache name, though built into --out
    assert priming.publication_record(published).is_file() and f"published: {published}" in capsys.readouterr().out
    trained_in = []
    real_fine_tune = priming.fine_tune
    monkeypatch.setattr(priming, "fine_tune", lambda *a, **k: trained_in.append(a[4]) or real_fine_tune(*a, **k))
    main([*args, "--out", str(tmp_path / "retrained"), "--retrain", "true"])  # to check the published one
    assert trained_in == [tmp_path / "retrained.partial"]

    def trains(*_, **__):
        raise AssertionError("trained, with the update published")

    monkeypatch.setattr(priming, "fine_tune", trains)
    killed = tmp_path / "merged.partial"  # a killed training's save of the same settings, left beside it
    killed.mkdir()
    (killed / priming.STATE).write_bytes(b"a save")
    main([*args, "--out", str(tmp_path / "merged")])
    digest = files_digest(tmp_path / "trained", besides=(priming.RECORD,))
    assert files_digest(tmp_path / "merged", besides=(priming.RECORD,)) == digest  # nothing of the save in it
    record = json.loads((tmp_path / "merged" / priming.RECORD).read_text())
    assert record["weights_sha256"] == weights_digest(tmp_path / "trained") and "merged_on" in record
    assert any(not torch.equal(w, weights(base[0])[n]) for n, w in weights(tmp_path / "merged").items())


def test_a_published_update_merges_under_another_transformers_version_whose_files_differ_not_its_weights(
        base, monkeypatch, tmp_path):
    """A machine with its own transformers (a GPU machine's 5.17 against the pinned 5.24) writes its version into
    config.json: its merge is the publisher's weights, and is accepted as such."""
    import transformers.configuration_utils
    import transformers.generation.configuration_utils

    from pgrpo.records.cache import files_digest, weights_digest

    monkeypatch.setattr(priming, "PRIMINGS", tmp_path / "primings")
    args = ["prime", "--model", "embedded", "--steps", "2", "--batch_size", "2", "--completions_per_prompt", "1",
            "--threads", "1", "--evaluate", "false"]
    main([*args, "--out", str(tmp_path / "trained"), "--publish_update", "true"])
    for module in (transformers.configuration_utils, transformers.generation.configuration_utils):
        monkeypatch.setattr(module, "__version__", "4.0.0-another")
    main([*args, "--out", str(tmp_path / "merged")])
    assert "4.0.0-another" in (tmp_path / "merged" / "config.json").read_text()
    assert files_digest(tmp_path / "merged", besides=(priming.RECORD,)) != files_digest(
        tmp_path / "trained", besides=(priming.RECORD,))
    assert weights_digest(tmp_path / "merged") == weights_digest(tmp_path / "trained")


def test_a_published_update_that_does_not_merge_to_its_publishers_bytes_is_refused_naming_it(
        base, monkeypatch, tmp_path):
    monkeypatch.setattr(priming, "PRIMINGS", tmp_path / "primings")
    args = ["prime", "--model", "embedded", "--steps", "2", "--batch_size", "2", "--completions_per_prompt", "1",
            "--threads", "1", "--evaluate", "false"]
    main([*args, "--out", str(tmp_path / "trained"), "--publish_update", "true"])
    (published,) = (tmp_path / "primings").glob(f"*{priming.PUBLISHED_SUFFIX}")
    record = priming.publication_record(published)
    key = json.loads(record.read_text())["key"]

    def refused(why: str, out: str) -> None:
        with pytest.raises(ValueError, match=why):
            main([*args, "--out", str(tmp_path / out)])
        assert not (tmp_path / out).exists()

    kept = record.read_text()
    record.write_text(json.dumps({**json.loads(kept), "weights_sha256": "ab" * 32}))  # another machine's merge
    refused(f"{published}: merged here into weights sha256 [0-9a-f]{{16}}, but its publisher's merge was abab", "other")
    record.write_text(json.dumps({k: v for k, v in json.loads(kept).items() if k != "weights_sha256"}))
    refused(f"{record}: records no weights_sha256 to check a merge against; publish it again", "unchecked")
    record.write_text(json.dumps({**json.loads(kept), "key": "0" * 16}))
    refused(f"{record}: records key 0{{16}}, but its update's name says {key}", "rekeyed")
    record.write_text(kept)
    published.write_bytes(published.read_bytes()[:100])  # cut short
    refused(f"{published}: not an update of {base[0].name}'s layers", "cut")


def test_a_config_names_the_default_priming_of_a_model_by_its_name_and_plus_primed(base, monkeypatch):
    monkeypatch.setitem(priming.NAMED_PRIMINGS, "+primed", TINY)  # the default's 200 steps, shortened
    assert resolve_model_path("embedded+primed") == primed_checkpoint(*base, TINY)
    assert model_id("embedded+primed").startswith("embedded+primed@embedded-")
    model, tokenizer = load_model_and_tokenizer("embedded+primed")
    assert tokenizer.padding_side == "left" and not any(p.requires_grad for p in model.parameters())


def test_naming_a_primed_base_or_checking_a_sweeps_cells_against_it_builds_nothing(base, monkeypatch, tmp_path):
    """A sweep checks its kept cells' bases before any cell runs: building a primed base there held 5.8 GB in the
    sweep's own process for the rest of the sweep, beside every cell's."""
    import pgrpo.model.load as models
    from pgrpo.commands.sweep import refuse_another_cached_base

    unbuilt = dataclasses.replace(TINY, seed=TINY.seed + 7)  # settings no other test builds
    monkeypatch.setitem(priming.NAMED_PRIMINGS, "+primed", unbuilt)
    target, _ = priming.primed_target(*base, unbuilt)
    named = model_id("embedded+primed")
    assert named == f"embedded+primed@{target.name}" and models.cached_digest("embedded+primed") is None
    cell = tmp_path / "results" / "demo" / "vanilla" / "seed0"
    cell.mkdir(parents=True)
    (cell / "base.json").write_text(json.dumps({"model": "embedded+primed", "model_id": named, "digest": "aa" * 32}))
    refuse_another_cached_base(cell.parent.parent)  # not in the cache: nothing to compare, nothing built
    assert not target.exists()
    assert resolve_model_path("embedded+primed") == target and model_id("embedded+primed") == named


def test_a_sweep_warns_of_another_cpu_only_where_the_primed_base_is_trained_here_not_merged(
        base, monkeypatch, tmp_path, capsys):
    """Training a primed base depends on the CPU; merging the update the repository publishes for it does not."""
    from pgrpo.commands.sweep import refuse_another_cached_base

    unbuilt = dataclasses.replace(TINY, seed=TINY.seed + 8)  # settings no other test builds
    monkeypatch.setitem(priming.NAMED_PRIMINGS, "+primed", unbuilt)
    monkeypatch.setattr(priming, "PRIMINGS", tmp_path / "primings")
    cell = tmp_path / "results" / "demo" / "vanilla" / "seed0"
    cell.mkdir(parents=True)
    (cell / "base.json").write_text(json.dumps({"model": "embedded+primed", "model_id": model_id("embedded+primed"),
                                                "digest": "aa" * 32, "built_on": "another CPU"}))
    refuse_another_cached_base(cell.parent.parent)
    assert "trained on base 'embedded+primed' as built on another CPU" in capsys.readouterr().err

    _, key = priming.primed_target(*base, unbuilt)
    published = priming.publication(base[0], key)
    published.parent.mkdir()
    published.write_bytes(b"")
    priming.publication_record(published).write_text(json.dumps({"key": key}))
    refuse_another_cached_base(cell.parent.parent)
    assert "built on" not in capsys.readouterr().err


def test_a_primed_base_and_every_run_on_it_record_the_cpu_that_built_it(base, monkeypatch):
    """Its bytes depend on the CPU's kind (pgrpo.model.substrate): a sweep can then say why a machine built other ones."""
    import pgrpo.model.load as models
    from pgrpo.model.substrate import cpu_kind

    monkeypatch.setitem(priming.NAMED_PRIMINGS, "+primed", TINY)
    path = resolve_model_path("embedded+primed")
    assert json.loads((path / priming.RECORD).read_text())["built_on"] == cpu_kind()
    assert models.base_record("embedded+primed")["built_on"] == cpu_kind()
    assert "built_on" not in models.base_record("embedded")  # pinned kernels: the same bytes on any x86-64 CPU


def test_a_run_on_a_primed_base_records_the_sha256_of_its_files_so_other_bytes_are_told_apart(
        base, monkeypatch, tmp_path):
    """A primed base is made on each machine (merged from its published update, or trained where none is): a run
    records its files' digest, not its key, and a sweep refuses to pool other bytes under one name."""
    import pgrpo.model.load as models
    from pgrpo.records.cache import files_digest
    from pgrpo.commands.sweep import refuse_another_cached_base

    monkeypatch.setitem(priming.NAMED_PRIMINGS, "+primed", TINY)
    path = resolve_model_path("embedded+primed")  # built first: a run records the base it loaded
    record = models.base_record("embedded+primed")
    assert record["digest"] == files_digest(path, besides=(priming.RECORD,)) != record["model_id"]
    copy = tmp_path / "copy"
    shutil.copytree(path, copy)
    (copy / priming.RECORD).write_text(json.dumps({"key": "re-keyed"}))  # the record holds the key, not the bytes
    assert files_digest(copy, besides=(priming.RECORD,)) == record["digest"]
    (copy / "model.safetensors").write_bytes((copy / "model.safetensors").read_bytes()[:-1] + b"\0")
    assert files_digest(copy, besides=(priming.RECORD,)) != record["digest"]

    cell = tmp_path / "results" / "demo" / "vanilla" / "seed0"  # kept by a machine that built it otherwise
    cell.mkdir(parents=True)
    (cell / "base.json").write_text(json.dumps({**record, "digest": "aa" * 32}))
    with pytest.raises(SystemExit, match="the cache holds base embedded\\+primed@.* trained on aaaa"):
        refuse_another_cached_base(cell.parent.parent)
    (cell / "base.json").write_text(json.dumps(record))
    refuse_another_cached_base(cell.parent.parent)


def test_the_repositorys_published_updates_are_xz_compressed_bf16_factors_with_their_records():
    """The published update is 7.0 MB as xz, 9.8 MB as plain safetensors: what the repository's size allows."""
    import lzma

    from safetensors.torch import load

    published = sorted(priming.PRIMINGS.glob(f"*{priming.PUBLISHED_SUFFIX}"))
    assert published and not list(priming.PRIMINGS.glob("*.safetensors")), "an update published uncompressed"
    for path in published:
        factors = load(lzma.decompress(path.read_bytes()))
        assert factors and all(t.dtype == torch.bfloat16 for t in factors.values())
        record = json.loads(priming.publication_record(path).read_text())
        assert path.name.removesuffix(priming.PUBLISHED_SUFFIX).endswith(record["key"])
