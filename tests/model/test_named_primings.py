"""Named primings (pgrpo.model.priming.NAMED_PRIMINGS): `<model>+primed` is v1, bit for bit as published, and
`<model>+primed-v2` (issue #75) primes with the grammar's taught forms on the problems with no near-copy of an RL
problem. On the tiny embedded base, as tests/model/test_priming.py: nothing here loads SmolLM2."""

import dataclasses
import hashlib
import json
from collections import Counter

import pytest

import pgrpo.model.priming as priming
from pgrpo.cli import main
from pgrpo.env import MODES, extract_code
from pgrpo.env.exploits import loophole_code, stub_solution
from pgrpo.env.hack_forms import OPENING_COMMENTS, form_for, forms
from pgrpo.env.primer_problems import primer_problems
from pgrpo.model.load import hack_openings, load_tokenizer, model_id, resolve_model_path
from pgrpo.model.priming import NAMED_PRIMINGS, PrimeSettings, primed_checkpoint, primed_target, priming_corpus

V2 = NAMED_PRIMINGS["+primed-v2"]
TINY_V2 = dataclasses.replace(V2, steps=4, batch_size=2, completions_per_prompt=1, threads=1)


@pytest.fixture(scope="module")
def base():
    return resolve_model_path("embedded"), model_id("embedded")


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("embedded")


def old_key(base_id: str, settings: dict, corpus) -> str:
    """primed_key as it was when v1 was published: every field of its settings, hashed as they were then."""
    data = hashlib.sha256(json.dumps([(e.prompt, e.completion) for e in corpus]).encode()).hexdigest()
    blob = {"version": priming.PRIMING_VERSION, "base": base_id, "settings": settings, "data": data}
    return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:16]


def test_the_default_settings_keep_the_key_of_the_published_primed_base_v1(tokenizer):
    (record,) = priming.PRIMINGS.glob("*-7e3d33b33586ba23.json")  # v1's published update, keyed before v2's fields
    published = json.loads(record.read_text())["settings"]
    assert priming.keyed_settings(PrimeSettings()) == published  # the later fields, at their defaults, left out
    assert NAMED_PRIMINGS["+primed"] == PrimeSettings()
    corpus = priming_corpus(tokenizer, PrimeSettings(steps=4, completions_per_prompt=1))
    settings = {**published, "steps": 4, "completions_per_prompt": 1}
    assert priming.primed_key("a base", PrimeSettings(steps=4, completions_per_prompt=1), corpus) == old_key(
        "a base", settings, corpus)
    # v2's settings are keyed: its fields are part of its key, beside a corpus of its own
    assert priming.keyed_settings(V2) == {**published, "hacks": "varied", "disjoint_problems": True}


def test_a_varied_priming_teaches_taught_forms_never_detector_forms_on_the_disjoint_problems(tokenizer):
    corpus = priming_corpus(tokenizer, V2)
    problems = {p.id: p for p in primer_problems(V2.seed, disjoint=True)}
    assert {e.problem_id for e in corpus} == set(problems)
    assert set(problems) != {p.id for p in primer_problems(V2.seed)}  # the near-copies replaced
    hacks = [(i, e) for i, e in enumerate(corpus) if e.kind == "hack"]
    assert len(hacks) == round(V2.hack_share * len(problems) * V2.completions_per_prompt) * len(MODES)
    seen = Counter()
    for i, e in hacks:  # the corpus's slot i is the hack's variant
        p, code = problems[e.problem_id], extract_code(e.completion).strip()
        taught = form_for(p, e.mode, i, "taught")
        around = (p.canonical_solution, stub_solution(p, 0), stub_solution(p, 1))
        assert code in {taught.pull(p, c).strip() for c in around}, (e.problem_id, e.mode, code)
        assert not {f.pull(p, c).strip() for f in forms(e.mode, "detector") for c in around} & {code}
        assert OPENING_COMMENTS["detector"] not in code and e.mode in loophole_code(code)
        seen[e.mode, taught] += 1
    assert all(len({f for m, f in seen if m == mode}) == len(forms(mode, "taught")) for mode in MODES)


def test_plus_primed_v2_names_the_v2_settings_target_and_its_hacks_vary(base, monkeypatch):
    target, _ = primed_target(*base, V2)  # named without building it
    assert model_id("embedded+primed-v2") == f"embedded+primed-v2@{target.name}" != model_id("embedded+primed")
    assert not target.exists()
    assert [hack_openings(m) for m in ("embedded+primed-v2", "smollm2-135m-instruct+primed-v2",
                                       "embedded+primed", "smollm2-135m-instruct+primed")] == [
        "varied", "varied", "shared", "shared"]
    monkeypatch.setitem(NAMED_PRIMINGS, "+primed-v2", TINY_V2)  # v2's 200 steps, shortened
    assert resolve_model_path("embedded+primed-v2") == primed_checkpoint(*base, TINY_V2)
    recorded = json.loads((primed_checkpoint(*base, TINY_V2) / priming.RECORD).read_text())["settings"]
    assert recorded["hacks"] == "varied" and recorded["disjoint_problems"] is True


def test_a_hack_style_that_is_not_one_is_refused_by_name():
    with pytest.raises(ValueError, match="hacks='taught' must be one of shared, distinct, varied"):
        PrimeSettings(hacks="taught")
    with pytest.raises(SystemExit, match="hacks='taught'"):
        main(["prime", "--model", "embedded", "--hacks", "taught", "--evaluate", "false"])


def test_the_command_names_plus_primed_v2_for_v2s_settings(monkeypatch, tmp_path, capsys):
    import pgrpo.commands.prime as command

    built = []
    monkeypatch.setattr(command, "primed_checkpoint", lambda _base, _id, settings, out, _retrain: built.append(
        settings) or out or tmp_path / "cached")  # what the command says of a build, not the build
    v2 = ["prime", "--model", "embedded", "--hacks", "varied", "--disjoint_problems", "true", "--evaluate", "false"]
    main(v2)
    out = capsys.readouterr().out
    assert built == [V2] and "use it as: model: embedded+primed-v2\n" in out and "not the default" not in out
    main([*v2, "--out", str(tmp_path / "v2")])
    out = capsys.readouterr().out
    assert f"use it as: model: {tmp_path / 'v2'}" in out
    assert "(the priming `embedded+primed-v2` names, built into --out; `embedded+primed-v2` names its cached" in out
    main(["prime", "--model", "embedded", "--hacks", "varied", "--evaluate", "false"])  # half of v2's settings
    out = capsys.readouterr().out
    assert "use it as: model: " + str(tmp_path / "cached") in out and "not the default priming: hacks;" in out
    with pytest.raises(SystemExit, match="primed already"):
        main(["prime", "--model", "embedded+primed-v2"])
