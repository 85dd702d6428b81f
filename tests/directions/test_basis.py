"""The V a run uses: which problems, which logprobs and which prompt tokens it is extracted from, how it is
cached under concurrency, and that every rank of a distributed run gets the same one."""

import multiprocessing
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from tokenizers import processors

import pgrpo.directions.basis as basis_file
import pgrpo.hosts.lightning.module as module_file
from pgrpo.model.adapter import attach_adapter
from pgrpo.directions.basis import ExtractionConfig, completion_grads, contrastive_pairs, load_or_extract_basis
from pgrpo.hosts.lightning.data import GRPODataModule
from pgrpo.env import load_problems
from pgrpo.env.exploits import CHOICE
from pgrpo.env.prompts import build_messages
from pgrpo.directions.extraction import HackBasis
from pgrpo.records.cache import cache_dir
from pgrpo.chat import render_chat
from pgrpo.cli import main
from pgrpo.model.load import load_model_and_tokenizer, model_id
from pgrpo.step.generation import GenerationConfig
from pgrpo.hosts.lightning.module import ProjectedGRPO
from pgrpo.step.rollout import SamplingConfig, encode_prompts, sample

def some_basis(seed: int = 0) -> HackBasis:
    return HackBasis({"m": torch.randn(2, 4, generator=torch.Generator().manual_seed(seed))}, {"m": torch.ones(2)})


class Spy:
    """Stands in for load_or_extract_basis: records every call, returns a fixed V."""

    def __init__(self, result: HackBasis):
        self.result, self.calls = result, []

    def __call__(self, model, adapter, tokenizer, problems, **kwargs):
        self.calls.append({"adapter": adapter, "problems": problems, **kwargs})
        return self.result


@pytest.fixture
def grpo_with(monkeypatch):
    """A ProjectedGRPO on a stand-in trainer, with load_or_extract_basis replaced by a Spy."""

    def make(datamodule=None, world_size: int = 1, rank: int = 0, broadcast=None, **kwargs):
        module = ProjectedGRPO(**kwargs)
        module.configure_model()
        strategy = SimpleNamespace(broadcast=broadcast or (lambda obj, src: obj))
        module._trainer = SimpleNamespace(datamodule=datamodule, world_size=world_size, global_rank=rank,
                                          strategy=strategy)
        spy = Spy(some_basis())
        monkeypatch.setattr(module_file, "load_or_extract_basis", spy)
        return module, spy

    return make


def test_v_is_never_extracted_from_the_held_out_evaluation_problems(grpo_with):
    data = GRPODataModule(mix_ratio=0.0, n_eval_prompts=6)
    data.setup("fit")
    module, spy = grpo_with(datamodule=data)
    module.on_fit_start()
    (call,) = spy.calls
    held_out = {p.id for p in data.eval_problems}
    assert len(held_out) == 6
    assert not held_out & {p.id for p in call["problems"]}
    assert len(call["problems"]) == len(data.problems) - 6


def test_v_of_the_distinct_openings_twin_comes_from_pairs_whose_hacks_open_as_its_base_learnt(grpo_with):
    data = GRPODataModule(model="embedded-distinct", mix_ratio=0.0)
    data.setup("fit")
    module, spy = grpo_with(datamodule=data, model="embedded-distinct")
    module.on_fit_start()
    (call,) = spy.calls
    assert call["openings"] == "distinct"
    hacks = [pair.hack for pair in module.extraction_pairs()]
    assert hacks and not any(CHOICE in hack for hack in hacks)


def test_v_follows_the_base_dtype_and_the_sampling_temperature(grpo_with):
    module, spy = grpo_with(dtype="bfloat16", generation=GenerationConfig(temperature=0.7))
    module.extract_basis(load_problems(None)[:4])
    (call,) = spy.calls
    assert basis_file.adapter_key(call["adapter"])["dtype"] == "torch.bfloat16"  # part of the cache key
    assert call["temperature"] == 0.7


def test_the_cache_key_changes_with_the_adapters_modules_rank_and_dtype_and_the_temperature():
    problems = load_problems(None)[:12]
    cfg = ExtractionConfig(n_heldout=2)

    def path(targets=("q_proj",), max_rank=None, dtype="float32", temperature=1.0):
        model, tokenizer = load_model_and_tokenizer("embedded", dtype)
        return basis_file.cached_basis_path(attach_adapter(model, targets, max_rank), tokenizer, problems, cfg,
                                            model_id="m", cache=Path("c"), temperature=temperature)

    paths = {path(), path(("q_proj", "v_proj")), path(max_rank=4), path(dtype="bfloat16"), path(temperature=0.7)}
    assert len(paths) == 5


def test_pgrpo_extract_builds_the_v_a_run_with_its_own_adapter_layout_reads():
    run = ProjectedGRPO(target_modules=["q_proj"], max_rank=7)
    run.configure_model()
    path = basis_file.cached_basis_path(run.adapter, run.tokenizer, load_problems(None), ExtractionConfig(),
                                        model_id=model_id("embedded"), cache=cache_dir() / "bases")
    assert not path.exists()
    main(["extract", "--model", "embedded", "--target_modules", "[q_proj]", "--max_rank", "7"])
    assert path.is_file()


def test_every_rank_gets_rank_zeros_v_and_only_rank_zero_extracts(grpo_with):
    rank_zero_v = some_basis(seed=7)
    sent = []

    def broadcast(obj, src):
        sent.append(obj)
        return rank_zero_v  # what rank 0 sent

    module, spy = grpo_with(world_size=2, rank=1, broadcast=broadcast)
    got = module.extract_basis(load_problems(None)[:4])
    assert spy.calls == [] and sent == [None]  # rank 1 neither extracts nor reads the cache
    assert torch.equal(got.V["m"], rank_zero_v.V["m"])
    module, spy = grpo_with(world_size=2, rank=0)
    module.extract_basis(load_problems(None)[:4])
    assert len(spy.calls) == 1


def bos_adding(tokenizer):
    """The embedded tokenizer changed to put a BOS token before every text, as Llama's tokenizers do."""
    bos = tokenizer.eos_token  # any special token will do as the BOS here
    tokenizer._tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", special_tokens=[(bos, tokenizer.convert_tokens_to_ids(bos))])
    return tokenizer


def test_extraction_sees_the_prompt_tokens_that_generation_sees(monkeypatch):
    model, tokenizer = load_model_and_tokenizer("embedded")
    tokenizer = bos_adding(tokenizer)
    tokenizer.chat_template = None  # plain-text prompts: the tokenizer's BOS is theirs to add
    prompt = render_chat(tokenizer, build_messages(load_problems(None)[0]))
    generated_prompt_ids, _, _ = sample(model, tokenizer, [prompt], 1, SamplingConfig(2))
    assert generated_prompt_ids[0][0] == tokenizer.eos_token_id  # the tokenizer does add a BOS

    seen = {}

    def spy(model, adapter, input_ids, attention_mask, completion_mask, *args, **kwargs):
        seen["ids"] = input_ids[0, attention_mask[0].bool()].tolist()
        return {}

    monkeypatch.setattr(basis_file, "nll_grads", spy)
    completion_grads(model, {}, tokenizer, [prompt], ["x = 1"], ExtractionConfig())
    assert seen["ids"][: len(generated_prompt_ids[0])] == generated_prompt_ids[0]


def extract_on_cold_cache(cache: str, out: str, barrier) -> None:
    """One of two processes extracting the same V into one empty cache; both write it at the same moment."""
    save = HackBasis.save

    def save_then_wait(self, path):
        save(self, path)
        barrier.wait(timeout=120)  # the other process has written its temporary file too

    HackBasis.save = save_then_wait
    torch.set_num_threads(1)
    model, tokenizer = load_model_and_tokenizer("embedded")
    adapter = attach_adapter(model, ("q_proj",))
    basis = load_or_extract_basis(model, adapter, tokenizer, load_problems(None)[:12], ExtractionConfig(n_heldout=2),
                                  model_id=model_id("embedded"), cache=Path(cache))
    torch.save(basis.V, out)


@pytest.mark.slow  # test_ddp_basis[ddp] has two ranks on a cold cache by default
def test_two_processes_on_a_cold_cache_get_the_same_v_bit_for_bit(tmp_path):
    load_model_and_tokenizer("embedded")  # built once here, not raced for by the two processes
    spawn = multiprocessing.get_context("spawn")
    barrier = spawn.Barrier(2)
    procs = [spawn.Process(target=extract_on_cold_cache, args=(str(tmp_path / "bases"), str(tmp_path / f"v{i}.pt"),
                                                               barrier)) for i in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    assert [p.exitcode for p in procs] == [0, 0]
    first, second = torch.load(tmp_path / "v0.pt"), torch.load(tmp_path / "v1.pt")
    assert first.keys() == second.keys() and all(torch.equal(first[n], second[n]) for n in first)
    (cached,) = (tmp_path / "bases").iterdir()  # the V, and no temporary file left behind
    assert cached.suffix == ".safetensors"


def test_a_cache_write_racing_another_in_the_same_process_keeps_both(tmp_path, monkeypatch):
    barrier = threading.Barrier(2)
    save = HackBasis.save

    def save_then_wait(self, path):
        save(self, path)
        barrier.wait(timeout=30)

    monkeypatch.setattr(HackBasis, "save", save_then_wait)
    target = tmp_path / "key.safetensors"
    errors = []

    def write(seed):
        try:
            basis_file.save_atomically(some_basis(seed), target)
        except Exception as e:  # noqa: BLE001 — the test reports what a writer raised
            errors.append(e)

    threads = [threading.Thread(target=write, args=(seed,)) for seed in (0, 0)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and [p.name for p in tmp_path.iterdir()] == ["key.safetensors"]
    assert torch.equal(HackBasis.load(target).V["m"], some_basis(0).V["m"])


def test_a_chat_template_that_writes_the_bos_is_not_given_a_second_one():
    _, tokenizer = load_model_and_tokenizer("embedded")
    tokenizer = bos_adding(tokenizer)
    bos = tokenizer.eos_token
    tokenizer.chat_template = bos + "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    prompt = render_chat(tokenizer, [{"role": "user", "content": "hi"}])
    (ids,) = encode_prompts(tokenizer, [prompt])
    assert ids.count(tokenizer.eos_token_id) == 1 and ids[0] == tokenizer.eos_token_id


def test_template_openings_set_how_the_pairs_hacks_open_whatever_the_model_and_a_bad_value_names_the_key():
    """On a model whose hacks share the teacher rows' opening line, `template_openings: distinct` asks whether V is
    the hack or that line: the pairs' hacks lose it, their clean sides stay as they were."""
    problems = load_problems()[:6]
    as_the_model = contrastive_pairs(problems, ExtractionConfig(n_heldout=1), openings="shared")
    distinct = contrastive_pairs(problems, ExtractionConfig(n_heldout=1, template_openings="distinct"),
                                 openings="shared")
    assert all(CHOICE in pair.hack for pair in as_the_model)
    assert not any(CHOICE in pair.hack for pair in distinct)
    assert [pair.clean for pair in distinct] == [pair.clean for pair in as_the_model]
    with pytest.raises(ValueError, match="extraction.template_openings='shard'"):
        ExtractionConfig(template_openings="shard")


def test_pairs_from_a_pool_directory_are_mined_and_the_run_pool_keyword_needs_a_run(tmp_path):
    from pgrpo.env.pool import build_pool

    problems = load_problems()[:6]
    pool_dir = build_pool(problems, tmp_path / "pool", hack_variants=1, clean_variants=1)
    pairs = contrastive_pairs(problems, ExtractionConfig(pairs=str(pool_dir), n_heldout=1))
    assert sorted(p.problem_id for p in pairs) == sorted(p.id for p in problems)  # one mined pair per problem
    with pytest.raises(ValueError, match="pgrpo fit resolves it"):
        contrastive_pairs(problems, ExtractionConfig(pairs="pool"))


def test_a_v_build_speaks_of_the_model_in_hand(tmp_path, capfd):
    model, tokenizer = load_model_and_tokenizer("embedded")
    adapter = attach_adapter(model, ("q_proj",))
    problems, cfg = load_problems(None)[:6], ExtractionConfig(n_heldout=2, batch_size=4)
    capfd.readouterr()  # not the base's own build
    load_or_extract_basis(model, adapter, tokenizer, problems, cfg, model_id="some-real-model@abc", cache=tmp_path)
    said = capfd.readouterr().err
    assert "gradients of 12 completions of some-real-model@abc" in said and "embedded" not in said
    assert "V gradients, batch 4/4" in said  # the time it takes, announced as it goes
    load_or_extract_basis(model, adapter, tokenizer, problems, cfg, model_id=model_id("embedded"), cache=tmp_path)
    assert "for the embedded model on 2 cores" in capfd.readouterr().err


def test_the_cache_key_holds_the_thread_count_and_the_machine_v_is_extracted_on(monkeypatch):
    # V's last bits depend on both: a V another machine (or 1 thread against 2) extracted is another V
    model, tokenizer = load_model_and_tokenizer("embedded")
    adapter = attach_adapter(model, ("q_proj",))

    def path(threads: int) -> Path:
        torch.set_num_threads(threads)
        return basis_file.cached_basis_path(adapter, tokenizer, load_problems(None)[:12], ExtractionConfig(n_heldout=2),
                                            model_id="m", cache=Path("c"))

    before = torch.get_num_threads()
    try:
        one, two = path(1), path(2)
        monkeypatch.setattr(basis_file, "cpu_kind", lambda: "Intel Xeon (torch AVX512)")
        elsewhere = path(1)
    finally:
        torch.set_num_threads(before)
    assert len({one, two, elsewhere}) == 3
    assert len({p.stem.split("-")[0] for p in (one, two, elsewhere)}) == 1  # what it is extracted from: the same


def test_a_kept_v_is_restored_where_its_key_matches_and_extracted_where_its_numbers_are_not_the_kept_ones(
        tmp_path, monkeypatch, capfd):
    import shutil
    from functools import partial

    model, tokenizer = load_model_and_tokenizer("embedded")
    adapter = attach_adapter(model, ("q_proj",))
    extract = partial(load_or_extract_basis, model, adapter, tokenizer, load_problems(None)[:6],
                      ExtractionConfig(n_heldout=2, batch_size=4), model_id="m")
    extracted = extract(cache=tmp_path / "here")
    (cached,) = (tmp_path / "here").iterdir()
    assert extracted.meta | basis_file.extracted_where(adapter) == extracted.meta  # its threads and machine
    assert extracted.meta["cache_key"] == cached.stem and extracted.meta["inputs_key"] == cached.stem.split("-")[0]
    assert extracted.meta["digest_as_extracted"] == extracted.digest()
    monkeypatch.setattr(basis_file, "KEPT_BUILDS", tmp_path / "bases")
    kept = tmp_path / "bases" / f"v-{extracted.digest()[:16]}.safetensors"  # as a sweep keeps it
    kept.parent.mkdir()
    shutil.copyfile(cached, kept)
    grads = basis_file.completion_grads
    monkeypatch.setattr(basis_file, "completion_grads", lambda *a, **k: pytest.fail("extracted, not restored"))
    capfd.readouterr()
    assert extract(cache=tmp_path / "there").digest() == extracted.digest()
    assert f"restored from {kept} (sha256 of its numbers checked)" in capfd.readouterr().err
    HackBasis(some_basis().V, some_basis().sigma, extracted.meta).save(kept)  # other numbers, the same record
    monkeypatch.setattr(basis_file, "completion_grads", grads)
    assert extract(cache=tmp_path / "elsewhere").digest() == extracted.digest()
    said = capfd.readouterr().err
    assert f"the kept {kept} is not used (its numbers' sha256 is {some_basis().digest()[:16]}, kept as " in said
