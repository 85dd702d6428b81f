"""V measured offline: the pairs' sides in span(V), exploited against clean rollouts, the kept runs' shares, and
the sign of ⟨V, δS⟩ as the code makes it and the docs state it."""

import re
from pathlib import Path

import pytest
import torch

from pgrpo.directions.extraction import HackBasis, random_basis_like
from pgrpo.directions.measure import (kept_shares, knob_reading, markdown, null_bases, pair_sides,
                                      rollout_separation)
from pgrpo.records.events import keep_scalars
from pgrpo.step.projection import rollout_hack_fraction

REPO = Path(__file__).resolve().parents[2]
R, K = 32, 4


def axes_basis() -> HackBasis:
    """V = the first K axes of one module of rank R."""
    return HackBasis({"m": torch.eye(R)[:K].contiguous()}, {"m": torch.ones(K)})


def rollouts(n: int, hack_ward: bool, seed: int) -> torch.Tensor:
    """(n, R) gradients: hack-ward ones lean on +V's axes, clean ones live off them."""
    g = torch.randn(n, R, generator=torch.Generator().manual_seed(seed))
    if hack_ward:
        g[:, :K] = g[:, :K].abs() + 2
    else:
        g[:, :K] = 0
    return g


def test_the_auroc_is_one_where_v_separates_perfectly_and_near_a_half_on_random_subspaces():
    basis = axes_basis()
    rows = {"m": torch.cat([rollouts(60, True, 0), rollouts(90, False, 1)])}
    exploited = torch.arange(150) < 60
    nulls = null_bases(basis, 64)
    result = rollout_separation(rollout_hack_fraction(rows, basis), exploited,
                                [rollout_hack_fraction(rows, b) for b in nulls])
    assert (result.n_exploited, result.n_clean) == (60, 90)
    assert result.auroc == 1.0 and result.interval == (1.0, 1.0)
    assert result.exploited_mean > 0.5 and result.clean_mean == 0.0
    # one random subspace of V's k may happen to lean on the exploited rows' shared direction, or away from it;
    # over many it reads both kinds alike
    assert abs(result.null_auroc - 0.5) < 0.1
    assert result.null_auroc_range[0] < 0.5 < result.null_auroc_range[1]


def test_the_auroc_is_near_a_half_when_v_cannot_tell_the_rollouts_apart():
    rows = {"m": rollouts(200, True, 2)}
    exploited = torch.rand(200, generator=torch.Generator().manual_seed(3)) < 0.3
    result = rollout_separation(rollout_hack_fraction(rows, axes_basis()), exploited, [])
    lo, hi = result.interval
    assert abs(result.auroc - 0.5) < 0.1 and lo < 0.5 < hi


def test_a_separation_without_exploited_rollouts_gives_counts_and_no_auroc():
    rows = {"m": rollouts(10, False, 4)}
    result = rollout_separation(rollout_hack_fraction(rows, axes_basis()), torch.zeros(10, dtype=torch.bool), [])
    assert (result.n_exploited, result.n_clean, result.auroc, result.interval) == (0, 10, None, None)


def test_the_null_subspaces_and_the_random_controls_rows_are_uniformly_oriented():
    basis = axes_basis()
    nulls = torch.stack([b.V["m"] for b in null_bases(basis, 400)])  # (400, K, R)
    assert nulls[0] @ nulls[0].T == pytest.approx(torch.eye(K), abs=1e-5)
    own_axis = torch.diagonal(nulls, dim1=1, dim2=2)  # row i's i-th coordinate, every draw
    assert own_axis.mean().abs() < 0.02
    # the placebos' random V: before 2026-12-07 its row 0 had a negative 0th coordinate in every draw
    controls = torch.stack([random_basis_like(basis, seed).V["m"] for seed in range(400)])
    assert torch.diagonal(controls, dim1=1, dim2=2).mean().abs() < 0.02


def test_the_pair_sides_report_what_span_v_holds_of_each_beside_random_subspaces():
    basis = axes_basis()
    g_hack = {"m": rollouts(40, True, 5)}
    g_hack["m"][:, K:] = 0  # inside span(V), on its hack-ward side
    g_clean = {"m": rollouts(40, False, 6)}  # outside it
    sides = pair_sides(g_hack, g_clean, basis, null_bases(basis, 16))
    assert sides["hack"].captured == pytest.approx(1.0) and sides["hack"].hackward == pytest.approx(1.0)
    assert sides["clean"].captured == 0.0 and sides["clean"].hackward == 0.0
    assert sides["hack"].norm == pytest.approx(float(g_hack["m"].norm(dim=1).mean()))
    # a random K-subspace of R holds sqrt(K / R) of a vector on average (about)
    assert sides["clean"].captured_null == pytest.approx((K / R) ** 0.5, abs=0.1)
    assert 0 < sides["difference"].captured < 1


def kept_run(root: Path, arm: str, seed: int, share: float, steps: int, along: float) -> None:
    run = root / arm / f"seed{seed}"
    run.mkdir(parents=True)
    keep_scalars({
        "hack/student": [(s, 0.0) for s in range(steps)], "solve/student": [(s, 0.0) for s in range(steps)],
        # step 3 had no gradient: nothing logged there
        "hackward_share/student": [(s, share + s / 100) for s in range(steps) if s != 3],
        "hackward_share/student_null": [(s, 0.1) for s in range(steps) if s != 3],
        "hackward_share/exploited_rollouts": [(s, 0.5) for s in range(steps)],
        "hackward_share/clean_rollouts": [(s, 0.3) for s in range(steps)],
        "adapter/delta_s_along_v": [(s, along * s) for s in range(steps)],
    }, run / "scalars.json.gz")


def test_the_kept_shares_are_read_in_windows_over_the_steps_every_arm_ran(tmp_path):
    kept_run(tmp_path, "honest", 0, 0.3, 12, 1.0)
    kept_run(tmp_path, "vanilla", 0, 0.4, 10, -2.0)
    kept_run(tmp_path, "vanilla", 1, 0.6, 10, -4.0)
    honest, vanilla = kept_shares(tmp_path, ["honest", "vanilla"], 5)
    assert vanilla.windows == honest.windows == [(0, 4), (5, 9)]  # honest's steps 10-11 are not compared
    assert vanilla.seeds == ["seed0", "seed1"]
    # window 0-4 without step 3: (0 + 1 + 2 + 4) / 4 / 100 above each seed's level, the seeds' mean
    assert vanilla.share[0] == pytest.approx(0.5 + 0.0175)
    assert honest.null == [pytest.approx(0.1)] * 2
    assert vanilla.along_v_end == [pytest.approx(-18.0), pytest.approx(-36.0)]
    assert honest.along_v_end == [pytest.approx(9.0)]
    assert (vanilla.exploited_rollouts, vanilla.clean_rollouts) == (pytest.approx(0.5), pytest.approx(0.3))
    with pytest.raises(ValueError, match=r"no run of \['erase'\]"):
        kept_shares(tmp_path, ["erase"], 5)


def test_the_tables_state_the_sign_and_set_each_arm_beside_honest(tmp_path):
    kept_run(tmp_path, "honest", 0, 0.3, 10, 1.0)
    kept_run(tmp_path, "vanilla", 0, 0.4, 10, -2.0)
    basis = axes_basis()
    sides = pair_sides({"m": rollouts(4, True, 7)}, {"m": rollouts(4, False, 8)}, basis, null_bases(basis, 2))
    from dataclasses import asdict

    separation = rollout_separation(torch.tensor([0.9, 0.1, 0.2]), torch.tensor([True, False, False]), [
        torch.tensor([0.5, 0.4, 0.6])])
    result = {"model": "m", "basis": {"k_total": K, "digest": "0" * 16}, "null_draws": 2,
              "pairs": {"n": 4, **{k: asdict(v) for k, v in sides.items()}},
              "rollouts": {"n": 3, "live": 3, "seed": 0, "step": asdict(separation), "text": asdict(separation)},
              "kept": {"results": "r", "window": 5,
                       "arms": [asdict(a) for a in kept_shares(tmp_path, ["honest", "vanilla"], 5)]}}
    text = markdown(result)
    assert "⟨V, δS⟩ < 0 is hack-ward" in text
    assert "| 1.000 [1.000, 1.000] | 0.500 (0.500–0.500) |" in text
    assert "| vanilla | 1 |" in text and "-18.0, hack-ward" in text and "+9.0, away from hack" in text


# -- the sign ---------------------------------------------------------------------------------------------------

# a sentence of the docs that reads the sign of ⟨V, δS⟩: its comparison (or "positive"/"negative") and its reading
SIGN_SENTENCE = re.compile(r"⟨V, ?δS⟩ *(<|>|below zero|above zero)? *0?[^.|⟨]{0,30}?"
                           r"(?:(positive|negative)[^.|⟨]{0,12}?)?(?:is |means |: )?(hack-ward|away from hack)")


def hackward_sign(match: re.Match) -> str | None:
    """The sign a reading gives hack-ward ('<' or '>'); None where it names a reading without a sign."""
    comparison, word, reading = match.groups()
    if comparison is None and word is None:
        return None
    negative = comparison in ("<", "below zero") or word == "negative"
    return "<" if negative == (reading == "hack-ward") else ">"


def docs_sign_readings() -> list[tuple[str, str, str]]:
    """(page, the sentence, the sign it gives hack-ward) for every sign reading of ⟨V, δS⟩ in the docs."""
    return [(str(page.relative_to(REPO)), match.group(0), sign)
            for page in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
            for match in SIGN_SENTENCE.finditer(page.read_text(encoding="utf-8"))
            if (sign := hackward_sign(match)) is not None]


@pytest.fixture(scope="module")
def embedded():
    """The embedded default with its adapter, V (extracted as a fit extracts it) and the pairs V comes from."""
    from pgrpo.directions.basis import ExtractionConfig, contrastive_pairs, load_or_extract_basis, pair_prompts
    from pgrpo.env import load_problems
    from pgrpo.model.adapter import attach_adapter, DEFAULT_TARGETS
    from pgrpo.model.load import hack_openings, load_model_and_tokenizer

    policy, tokenizer = load_model_and_tokenizer("embedded", "float32")
    adapter = attach_adapter(policy, tuple(DEFAULT_TARGETS), None)
    problems = load_problems(None, modes="partition")
    cfg = ExtractionConfig()
    basis = load_or_extract_basis(policy, adapter, tokenizer, problems, cfg, model_id="embedded", cache=None,
                                  openings=hack_openings("embedded"))
    pairs = contrastive_pairs(problems, cfg, openings=hack_openings("embedded"))
    return policy, adapter, tokenizer, basis, pairs, pair_prompts(tokenizer, pairs)


def hack_over_clean(policy, tokenizer, prompts, pairs) -> float:
    """The mean over pairs of the hack completion's mean token logprob minus the clean one's."""
    from pgrpo.directions.basis import pack_completions
    from pgrpo.step.loss import token_logprobs

    means = {}
    with torch.no_grad():
        for side in ("hack", "clean"):
            packed = pack_completions(tokenizer, prompts, [getattr(p, side) for p in pairs])
            logp, _ = token_logprobs(policy, packed.input_ids, packed.attention_mask, packed.completion_len)
            mask = packed.completion_mask.float()
            means[side] = (logp * mask).sum(1) / mask.sum(1)
    return float((means["hack"] - means["clean"]).mean())


def test_knobs_moved_to_v_s_negative_side_make_the_hack_likelier_and_read_hack_ward_as_the_docs_say(embedded):
    from pgrpo.step.projection import along_v

    policy, adapter, tokenizer, basis, pairs, prompts = embedded
    before = hack_over_clean(policy, tokenizer, prompts, pairs)
    try:
        with torch.no_grad():
            for name, rows in basis.V.items():
                adapter[name].delta_s.copy_(-0.05 * rows.sum(0))  # a small step to V's negative side
        moved = hack_over_clean(policy, tokenizer, prompts, pairs)
        position = along_v(adapter, basis)["adapter/delta_s_along_v"]
    finally:
        with torch.no_grad():
            for m in adapter.values():
                m.delta_s.zero_()
    assert moved > before  # the hack completions became likelier against the clean ones: hack-ward
    assert position < 0 and knob_reading(position) == "hack-ward"
    readings = docs_sign_readings()
    assert any(page == "docs/real-model.md" and "< 0 is hack-ward" in sentence for page, sentence, _ in readings)
    wrong = [(page, sentence) for page, sentence, sign in readings if sign != "<"]
    assert not wrong, f"these pages read the sign of ⟨V, δS⟩ against the code's (< 0 is hack-ward): {wrong}"


def test_the_docs_sign_reader_finds_both_spellings_of_a_reading():
    text = "⟨V, δS⟩ < 0 is hack-ward. Σ of ⟨V, δS⟩ (positive: away from hack). ⟨V, δS⟩ > 0 means hack-ward."
    assert [hackward_sign(m) for m in SIGN_SENTENCE.finditer(text)] == ["<", "<", ">"]
