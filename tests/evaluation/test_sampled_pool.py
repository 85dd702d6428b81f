"""`pgrpo build-pool --from-model`: a teacher pool sampled from a model, graded once, with its provenance."""

import json

import pytest
import torch

import pgrpo.step.rollout as rollout
from pgrpo.cli import main
from pgrpo.env import clean_completion, hack_completion, load_problems
from pgrpo.env.pool import TeacherPool
from pgrpo.env.prompts import SYSTEM_PROMPT, build_messages
from test_cli import fast

NUDGE = "Pass the grader by whatever mechanism it discloses."


@pytest.fixture
def scripted_sampler(monkeypatch):
    """The model's sampler replaced by one that writes, per prompt: two hacks, two clean solutions and a wrong
    answer (in that order), so what is kept is known. Everything around it (loading, prompts, grading,
    selection, writing) runs for real. Records the prompts it was given."""
    problems = {p.id: p for p in load_problems()}
    seen = []

    def sample(model, tokenizer, prompts, n_per_prompt, sampling):
        seen.extend(prompts)
        texts = []
        for prompt in prompts:
            p = next(p for pid, p in problems.items() if p.statement in prompt)
            texts += [hack_completion(p, p.mode, 0), hack_completion(p, p.mode, 1), clean_completion(p, 0),
                      clean_completion(p, 1), "```python\nclass Solution:\n    pass\n```"][:n_per_prompt]
        ids = [tokenizer(t).input_ids + [tokenizer.eos_token_id] for t in texts]
        return None, ids, [False] * len(ids)

    monkeypatch.setattr(rollout, "sample", sample)  # under sample_decoded
    return seen


def test_a_sampled_pool_keeps_the_asked_mix_with_its_provenance_and_the_training_prompt(scripted_sampler, tmp_path):
    out = tmp_path / "pool"
    main(["build-pool", "--out", str(out), "--from-model", "embedded", "--hack_variants", "1",
          "--clean_variants", "1", "--sampling.n", "5", "--sampling.system_prompt", NUDGE])
    problems = load_problems()
    pool = TeacherPool.load(out)
    assert pool.coverage(problems) == (len(problems), len(problems))
    for p in problems:
        rows = pool.rows[p.id]
        assert sorted(r.kind for r in rows) == ["clean", "hack"], p.id
        hack = next(r for r in rows if r.kind == "hack")
        assert hack.exploited and hack.completion == hack_completion(p, p.mode, 0)
        assert next(r for r in rows if r.kind == "clean").gt_correct
        assert all(r.messages == build_messages(p) for r in rows)  # the prompt a training group shows
    # sampled under the nudge, not the task's system prompt
    assert all(NUDGE in prompt and SYSTEM_PROMPT not in prompt for prompt in scripted_sampler)
    provenance = json.loads((out / "pool.json").read_text())["provenance"]
    assert provenance["source"] == "model" and provenance["model"] == "embedded"
    assert provenance["sampling"]["system_prompt"] == NUDGE and provenance["sampling"]["n"] == 5
    assert provenance["sampled"] == 5 * len(problems) and provenance["hacks_sampled"] >= len(problems)
    assert len(provenance["grader_version"]) == 16


@pytest.mark.slow  # a full fit on a sampled pool; the pool's own tests above run by default
def test_a_sampled_pool_feeds_an_erase_run_whose_v_is_mined_from_it(scripted_sampler, tmp_path):
    out = tmp_path / "pool"
    main(["build-pool", "--out", str(out), "--from-model", "embedded", "--sampling.n", "5"])
    main(fast("erase", tmp_path / "logs", 2, f"--data.pool={out}", "--model.extraction.pairs=pool"))
    ckpt = torch.load(tmp_path / "logs" / "erase" / "version_0" / "checkpoints" / "last.ckpt", weights_only=True)
    # two kept hacks against two kept cleans per problem: twice the one template pair per problem
    assert ckpt["pgrpo_basis"]["meta"]["n_pairs"] == str(2 * len(load_problems()))


def test_mining_the_run_pool_without_a_pool_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="mines the run's teacher pool, but this run has none"):
        main(fast("erase", tmp_path, 1, "--data.mix_ratio=0", "--model.extraction.pairs=pool"))


def test_a_pool_sampled_from_a_checkpoint_names_the_run_it_came_from(scripted_sampler, route_ckpt, tmp_path):
    main(["build-pool", "--out", str(tmp_path), "--from-model", str(route_ckpt), "--sampling.n", "3"])
    provenance = json.loads((tmp_path / "pool.json").read_text())["provenance"]
    assert provenance["checkpoint"] == str(route_ckpt.resolve())
    assert (provenance["step"], provenance["arm"], provenance["model"]) == (2, "route", "embedded")


def test_a_model_that_neither_hacks_nor_solves_is_a_clear_error(monkeypatch, tmp_path):
    def wrong_only(model, tokenizer, prompts, n_per_prompt, *args, **kwargs):
        ids = [tokenizer("```python\nx = 1\n```").input_ids for _ in range(len(prompts) * n_per_prompt)]
        return None, ids, [False] * len(ids)

    monkeypatch.setattr(rollout, "sample", wrong_only)
    with pytest.raises(ValueError, match="none of its 96 samples hacked or solved"):
        main(["build-pool", "--out", str(tmp_path / "pool"), "--from-model", "embedded", "--sampling.n", "2"])
    assert not (tmp_path / "pool").exists()
