"""`pgrpo export`: a run's deployed model as a Hugging Face checkpoint that loads without pgrpo."""

import shutil

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from pgrpo.model.adapter import quarantine_zeroed
from pgrpo.model.checkpoint import load_run_checkpoint
from pgrpo.cli import main
from pgrpo.commands.export import model_card
from pgrpo.interventions import Erase
from pgrpo.model.load import resolve_model_path


def test_the_export_loads_without_pgrpo_and_gives_the_deployed_logits(route_ckpt, tmp_path):
    out = tmp_path / "deployed"
    main(["export", str(route_ckpt), "--out", str(out)])
    exported = AutoModelForCausalLM.from_pretrained(out, local_files_only=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(out, local_files_only=True)
    run = load_run_checkpoint(route_ckpt)
    assert max(float(m.delta_s_hack.abs().max()) for m in run.adapter.values()) > 0
    ids = tokenizer(["class Solution:\n    def twoSum(self, nums, target):"], return_tensors="pt").input_ids
    with torch.no_grad():
        kept = run.policy(ids).logits
        with quarantine_zeroed(run.adapter):
            deployed = run.policy(ids).logits
        got = exported(ids).logits
    torch.testing.assert_close(got, deployed, atol=1e-5, rtol=1e-5)
    assert (got - kept).abs().max() > 1e-6  # the quarantine is dropped, not folded in
    card = (out / "README.md").read_text()
    assert "arm `route`, step 2" in card and "pgrpo_config.yaml" in card
    assert "route" in (out / "pgrpo_config.yaml").read_text()


def test_export_refuses_a_directory_that_holds_something(route_ckpt, tmp_path):
    (tmp_path / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not an empty directory"):
        main(["export", str(route_ckpt), "--out", str(tmp_path)])
    assert (tmp_path / "keep.txt").read_text() == "mine"


def test_a_checkpoint_trained_on_another_base_is_refused_by_name(route_ckpt, tmp_path):
    ckpt = torch.load(route_ckpt, weights_only=True)
    ckpt["pgrpo_basis"]["meta"]["model_id"] = "embedded-0000000000000000"
    other = tmp_path / "other.ckpt"
    torch.save(ckpt, other)
    with pytest.raises(ValueError, match="trained on base 'embedded-0000000000000000'"):
        load_run_checkpoint(other)


@pytest.mark.parametrize("edited", [False, True])
def test_a_base_rebuilt_from_another_recipe_loads_only_if_its_cached_build_is_identical(route_ckpt, tmp_path,
                                                                                       monkeypatch, edited):
    # a refactor of the sources the recipe hashes gives the embedded base a new id, not new bytes
    current = resolve_model_path("embedded")
    cache = tmp_path / "cache"
    shutil.copytree(current, cache / current.name)
    recorded = shutil.copytree(current, cache / "embedded-1111111111111111")
    if edited:
        with open(recorded / "tokenizer_config.json", "a") as f:
            f.write("\n")
    monkeypatch.setenv("PGRPO_CACHE", str(cache))
    ckpt = torch.load(route_ckpt, weights_only=True)
    ckpt["pgrpo_basis"]["meta"]["model_id"] = recorded.name
    torch.save(ckpt, tmp_path / "rebuilt.ckpt")
    if edited:
        with pytest.raises(ValueError, match="trained on base 'embedded-1111111111111111'"):
            load_run_checkpoint(tmp_path / "rebuilt.ckpt")
    else:
        assert load_run_checkpoint(tmp_path / "rebuilt.ckpt").step == ckpt["global_step"]


def test_a_missing_or_foreign_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file"):
        load_run_checkpoint(tmp_path / "none.ckpt")
    torch.save({"state_dict": {}}, tmp_path / "foreign.ckpt")
    with pytest.raises(ValueError, match="not a pgrpo run checkpoint"):
        load_run_checkpoint(tmp_path / "foreign.ckpt")


def test_a_placebos_model_card_names_it_a_placebo_not_its_method(tmp_path):
    hparams = {"intervention": Erase(v="random").config(), "model": "embedded", "dtype": "float32",
               "target_modules": ["q_proj"]}
    card = model_card(hparams, 100, tmp_path / "last.ckpt", None, 0.0)
    assert "# pgrpo export: arm `erase placebo (v: random)`, step 100" in card
