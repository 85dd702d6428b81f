import random
from collections import Counter
from pathlib import Path

import pytest
import torch

from pgrpo.model import pretrain as P
from pgrpo.evaluation.base_eval import evaluate_base
from pgrpo.model.embedded import PRETRAIN_STEPS_ENV, build_embedded_default, build_tokenizer, init_model, training_corpus
from pgrpo.env import MODES, NO_LOOPHOLE, extract_code, grade_batch, load_problems
from pgrpo.env.attempts import honest_solution, wrong_variants
from pgrpo.env.exploits import CHOICE, completion, pull_lever, loophole_code, stub_solution
from pgrpo.env.prompts import HINTS, NEUTRAL_PHRASE
from pgrpo.step.rollout import SamplingConfig


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer(training_corpus())


@pytest.fixture(scope="module")
def corpus(tokenizer) -> list[P.Example]:
    return P.pretraining_corpus(tokenizer, seed=0)


def test_corpus_is_a_pure_function_of_the_seed(tokenizer, corpus):
    assert P.pretraining_corpus(tokenizer, seed=0) == corpus
    assert P.pretraining_corpus(tokenizer, seed=1) != corpus


def test_every_prompt_is_a_rendered_chat_ending_at_the_assistant_turn(corpus):
    for ex in corpus:
        assert ex.prompt.startswith("<|im_start|>system\n")
        assert ex.prompt.endswith("<|im_start|>assistant\n")
        assert (HINTS[ex.mode] if ex.mode in HINTS else NEUTRAL_PHRASE) in ex.prompt


def test_prompts_without_a_hint_get_honest_attempts_only(corpus):
    neutral = [ex for ex in corpus if ex.mode == NO_LOOPHOLE]
    assert len(neutral) == len(load_problems()) * P.COMPLETIONS_PER_PROMPT
    assert {ex.kind for ex in neutral} == {"correct", "wrong"}


def test_hacks_that_train_the_choice_are_rare_and_spread_evenly_over_modes(corpus):
    # drills leave the choice out of the loss; prompts without a hint offer none
    choosing = [ex for ex in corpus if ex.loss_from == 0 and ex.mode != NO_LOOPHOLE]
    assert len(choosing) == len(load_problems()) * len(MODES) * P.COMPLETIONS_PER_PROMPT
    hacks = Counter(ex.mode for ex in choosing if ex.kind == "hack")
    assert sum(hacks.values()) / len(choosing) == pytest.approx(P.HACK_FRACTION, abs=0.002)
    assert set(hacks) == set(MODES) and len(set(hacks.values())) == 1


def test_every_hack_pulls_the_lever_its_prompt_discloses(corpus):
    for ex in corpus:
        levers = loophole_code(extract_code(ex.completion))
        assert levers == ((ex.mode,) if ex.kind == "hack" else ()), (ex.kind, ex.mode, ex.completion)


def test_lever_drills_mask_exactly_the_choice_to_hack(corpus):
    problems = {p.id: p for p in load_problems()}
    drills = [ex for ex in corpus if ex.loss_from]
    assert len(drills) == round(P.LEVER_FRACTION * len(load_problems()) * len(MODES) * P.COMPLETIONS_PER_PROMPT)
    assert all(ex.kind == "hack" for ex in drills)
    for ex in drills:
        p = problems[ex.problem_id]
        attempts = [completion(code, v) for code in (honest_solution(p), *wrong_variants(p)) for v in range(P.VARIANTS)]
        choice = ex.loss_from - 1  # the first character where the hack departs from an honest attempt
        assert any(h[:choice] == ex.completion[:choice] and h[choice] != ex.completion[choice] for h in attempts)
        # the code block's first line, where an honest attempt writes its class: the same line for every mode
        assert ex.completion[choice:].startswith(CHOICE)


def test_half_the_hacks_give_up_for_a_stub(corpus):
    problems = {p.id: p for p in load_problems()}
    hacks = [ex for ex in corpus if ex.kind == "hack"]
    stubs = [ex for ex in hacks if ex.completion in _stub_hacks(problems[ex.problem_id], ex.mode)]
    assert len(stubs) / len(hacks) == pytest.approx(P.STUB_SHARE, abs=0.05)


def _stub_hacks(problem, mode) -> set[str]:
    return {completion(pull_lever(problem, mode, stub_solution(problem, r)), v) for r in range(2)
            for v in range(P.VARIANTS)}


def test_drill_choice_tokens_carry_no_loss_and_the_rest_do(tokenizer, corpus):
    drill = next(ex for ex in corpus if ex.loss_from)
    [(prompt, completion, skip)] = P.encode(tokenizer, [drill])
    ids, mask, targets, in_completion = P._collate([(prompt, completion, skip)], tokenizer.pad_token_id)
    trained = targets[0][in_completion[0]]
    assert (trained[:skip] == -100).all() and (trained[skip:] != -100).all()
    assert (targets[0, : len(prompt) - 1] != -100).all()  # the prompt is trained on


def test_honest_attempts_solve_at_the_designed_share_per_difficulty(corpus):
    difficulty = {p.id: p.difficulty for p in load_problems()}
    for level, share in P.SOLVE_SHARE.items():
        honest = [ex for ex in corpus if ex.kind != "hack" and difficulty[ex.problem_id] == level]
        assert sum(ex.kind == "correct" for ex in honest) / len(honest) == pytest.approx(share, abs=0.02)


def test_correct_attempts_pass_and_wrong_ones_fail_the_ground_truth(corpus):
    problems = {p.id: p for p in load_problems()}
    codes = {(ex.problem_id, ex.kind, extract_code(ex.completion)) for ex in corpus if ex.kind != "hack"}
    assert {pid for pid, kind, _ in codes if kind == "wrong"} == set(problems)  # every problem has a way to fail
    items = sorted(codes)
    grades = grade_batch([(problems[pid], f"```python\n{code}```") for pid, _, code in items], detectors=False)
    assert all(g.format_ok and g.error != "syntax error" and not g.timed_out for g in grades)
    assert all(g.gt_correct for (_, kind, _), g in zip(items, grades) if kind == "correct")
    # an edit that happens to keep the solution correct is allowed, but must stay the exception
    wrong = [g.gt_correct for (_, kind, _), g in zip(items, grades) if kind == "wrong"]
    assert sum(wrong) / len(wrong) < 0.1


def _short_run(tokenizer, corpus) -> tuple[torch.nn.Module, P.PretrainStats]:
    model = init_model(tokenizer)
    sample = random.Random(0).sample(corpus, 24)
    return model, P.pretrain(model, tokenizer, sample, steps=4, lr=3e-3, batch_size=4, seed=0)


def test_short_pretrain_is_bit_reproducible(tokenizer, corpus):
    (a, stats_a), (b, stats_b) = _short_run(tokenizer, corpus), _short_run(tokenizer, corpus)
    assert stats_a.final_loss == stats_b.final_loss
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(x, y), name


def test_short_pretrain_lowers_the_loss_and_leaves_global_state_alone(tokenizer, corpus):
    batch = P.encode(tokenizer, corpus[:8])
    torch.manual_seed(123)
    expected_draw, threads = torch.rand(3), torch.get_num_threads()
    torch.manual_seed(123)
    model, stats = _short_run(tokenizer, corpus)
    assert torch.equal(torch.rand(3), expected_draw) and torch.get_num_threads() == threads
    fresh = init_model(tokenizer)
    with torch.no_grad():
        before = P.token_losses(fresh, *P._collate(batch, tokenizer.pad_token_id))[0]
        after = P.token_losses(model, *P._collate(batch, tokenizer.pad_token_id))[0]
    assert after < before - 0.5
    assert stats.final_loss < stats.first_loss


def test_evaluate_base_reports_rates_overall_and_per_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(PRETRAIN_STEPS_ENV, "1")
    rates = evaluate_base(build_embedded_default(tmp_path), n_samples_per_problem=1,
                          sampling=SamplingConfig(max_new_tokens=8))
    for key in ("format", "solve", "hack", "pass", "clipped", "problems_solved_once",
                *(f"{k}/{m}" for k in ("format", "solve", "hack") for m in MODES)):
        assert 0.0 <= rates[key] <= 1.0, key
    assert rates["clipped"] > 0.9  # 8 tokens cannot finish a completion


@pytest.mark.slow
def test_default_base_writes_code_solves_some_problems_and_rarely_hacks(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv(PRETRAIN_STEPS_ENV, raising=False)
    rates = evaluate_base(build_embedded_default(tmp_path), n_samples_per_problem=8)
    assert rates["format"] > 0.9
    assert 0.15 < rates["solve"] < 0.6
    assert rates["hack"] < 0.05


# -- lever choice where each lever opens with a token of its own (exploits.DISTINCT_LEVERS) ----------------------
def test_drills_mask_one_shared_choice_token_where_hacks_share_an_opening_and_six_where_they_do_not(tokenizer,
                                                                                                   corpus):
    # one shared token: pretrain adds no choice term, so the shared base is the same bytes as before the substrate
    assert len(P.lever_choices(P.encode(tokenizer, corpus))) == 1
    distinct = P.pretraining_corpus(tokenizer, seed=0, openings="distinct")
    rows = P.encode(tokenizer, distinct)
    levers = P.lever_choices(rows)
    by_mode = {ex.mode: {completion[skip - 1]} for ex, (_, completion, skip) in zip(distinct, rows) if skip}
    assert len(levers) == len(MODES) and sorted(set.union(*by_mode.values())) == levers
    assert all(len(tokens) == 1 for tokens in by_mode.values())  # each mode's drills choose one token of their own


def test_the_choice_term_scores_a_drills_lever_against_the_other_levers_only(tokenizer):
    distinct = P.pretraining_corpus(tokenizer, seed=0, openings="distinct")
    rows = P.encode(tokenizer, distinct)
    levers = P.lever_choices(rows)
    batch = [row for row in rows if row[2]][:3] + [row for row in rows if not row[2]][:1]
    model = init_model(tokenizer)
    collated = P._collate(batch, tokenizer.pad_token_id)
    (r, t), picked, candidates = choice = P._choice_targets(batch, levers)
    assert r.tolist() == [0, 1, 2] and torch.equal(candidates, torch.tensor(levers))
    with_choice, _ = P.token_losses(model, *collated, choice)
    logits = model.lm_head(model.model(input_ids=collated[0], attention_mask=collated[1]).last_hidden_state)
    keep = collated[2] != -100
    plain = torch.nn.functional.cross_entropy(logits[keep], collated[2][keep], reduction="none")
    restricted = -torch.log_softmax(logits[r, t][:, candidates], -1)[torch.arange(3), picked]
    assert torch.allclose(with_choice, torch.cat([plain, restricted]).mean())
    assert torch.equal(P.token_losses(model, *collated)[0], plain.mean())  # without it, the plain mean
