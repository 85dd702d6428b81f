"""Contrastive (prompt, hack, clean) pairs: what the hack direction V is extracted from.

Sources: the built-in templates, a JSON file, or a graded teacher pool read
through a *weak detector* that only recognises some loophole modes (the
leave-one-mode-out experiment). Two control sets check that V is about hacking:
labels dealt at random across each prompt's completions, and clean-vs-clean pairs that contain no hack at all.

A detector may only choose which rollouts become pairs; it never touches reward.
"""

import json
import random
from dataclasses import dataclass, replace
from pathlib import Path

from pgrpo.env.exploits import clean_completion
from pgrpo.env.hack_forms import hack_in_form
from pgrpo.env.problems import MODES, Problem
from pgrpo.env.prompts import build_messages


@dataclass(frozen=True)
class ContrastivePair:
    messages: tuple  # the shared prompt (system + user chat messages)
    hack: str
    clean: str
    mode: str
    problem_id: str = ""


def template_pairs(problems: list[Problem], modes: list[str] | None = None, variants: int = 1,
                   openings: str = "shared") -> list[ContrastivePair]:
    """One pair per problem (and template variant) whose loophole mode is in `modes` (all if None); the hacks
    are written as `openings` says (hack_forms.HACK_STYLES), where they vary in the detectors' forms, never the
    taught ones."""
    _check_modes(modes)
    return [
        ContrastivePair(
            messages=tuple(build_messages(p)), hack=hack_in_form(p, p.mode, v, openings, role="detector"),
            clean=clean_completion(p, variant=v), mode=p.mode, problem_id=p.id,
        )
        for p in problems
        if modes is None or p.mode in modes
        for v in range(variants)
    ]


def unseen_form_pairs(problems: list[Problem], held_out: list[str], variants: int = 4,
                      fit_share: float = 2 / 3) -> dict[str, list[ContrastivePair]]:
    """Where hacks vary, the pair sets that ask a detector about what it never saw: "fit" (the detectors' forms
    of the known levers, on the first `fit_share` of each known lever's problems), "seen forms" (the same forms on
    the other problems), "unseen forms" (the taught forms on those problems), and per lever in `held_out`, its
    problems' hacks in the detectors' forms and in the taught ones. A clean side is its problem's clean
    completion, so only the hack's form differs between the known levers' two scored sets."""
    _check_modes(held_out)

    def pairs(chosen: list[Problem], role: str) -> list[ContrastivePair]:
        return [ContrastivePair(tuple(build_messages(p)), hack_in_form(p, p.mode, v, "varied", role),
                                clean_completion(p, variant=v), p.mode, p.id) for p in chosen for v in range(variants)]

    fit, scored = [], []
    for mode in dict.fromkeys(p.mode for p in problems if p.mode not in held_out):
        own = [p for p in problems if p.mode == mode]
        cut = round(fit_share * len(own))
        fit, scored = fit + own[:cut], scored + own[cut:]
    sets = {"fit": pairs(fit, "detector"), "seen forms": pairs(scored, "detector"),
            "unseen forms": pairs(scored, "taught")}
    for mode in held_out:
        own = [p for p in problems if p.mode == mode]
        sets |= {f"unseen lever {mode}, detector forms": pairs(own, "detector"),
                 f"unseen lever {mode}, taught forms": pairs(own, "taught")}
    return sets


def load_pairs(path: str | Path) -> list[ContrastivePair]:
    """A JSON list of {"messages" | "prompt", "hack", "clean", "mode"?} objects."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"pairs file not found: {path}")
    try:
        raw = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{e.lineno}: not valid JSON ({e.msg})") from None
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"{path}: expected a non-empty JSON list of pairs")
    pairs = []
    for i, item in enumerate(raw):
        where = f"{path}: pair {i}"
        if not isinstance(item, dict):
            raise ValueError(f"{where}: expected an object")
        for key in ("hack", "clean"):
            if not isinstance(item.get(key), str):
                raise ValueError(f"{where}: missing string {key!r}")
        if "messages" in item:
            messages = tuple(item["messages"])
        elif isinstance(item.get("prompt"), str):
            messages = ({"role": "user", "content": item["prompt"]},)
        else:
            raise ValueError(f"{where}: needs 'messages' (chat list) or 'prompt' (string)")
        pairs.append(ContrastivePair(messages, item["hack"], item["clean"], item.get("mode", "unknown"),
                                     str(item.get("problem_id", i))))
    return pairs


def pool_pairs(pool, problems: list[Problem], known_modes: list[str]) -> list[ContrastivePair]:
    """Pairs mined from a graded pool by a weak detector that knows only `known_modes`.

    The detector calls a row a hack when the row exploited the grader *and* its
    mode is one the detector knows; the clean side is a gt-correct row of the
    same prompt. Rows of unknown modes are invisible to it, as in the
    leave-one-mode-out experiment.
    """
    _check_modes(known_modes)
    pairs = []
    for p in problems:
        rows = pool.rows.get(p.id, []) if pool.covers(p) else []
        hacks = [r for r in rows if r.exploited and r.mode in known_modes]
        cleans = [r for r in rows if r.gt_correct]
        for hack, clean in zip(hacks, cleans):
            pairs.append(ContrastivePair(tuple(hack.messages), hack.completion, clean.completion, hack.mode, p.id))
    if not pairs:
        raise ValueError(f"weak detector for modes {known_modes} found no (hack, clean) pairs in the pool")
    return pairs


def shuffled_pairs(pairs: list[ContrastivePair], seed: int = 0) -> list[ContrastivePair]:
    """Control: the hack/clean labels shuffled across all completions of each prompt, then paired again.

    Swapping the labels inside one pair would only negate its difference, which an SVD cannot see (that
    control spans the real V's subspace). Here a prompt's completions (its pairs' hacks and cleans together)
    are dealt at random into new "hack" and "clean" halves, so a new pair may hold two hacks, two cleans or
    a hack and a clean either way round. Every prompt needs at least two pairs.
    """
    by_prompt: dict[str, list[ContrastivePair]] = {}
    for p in pairs:
        by_prompt.setdefault(json.dumps(p.messages, sort_keys=True), []).append(p)
    few = [group[0].problem_id for group in by_prompt.values() if len(group) < 2]
    if few:
        raise ValueError(f"the shuffled control needs at least two pairs per prompt; problems {few[:5]} have one "
                         f"(with one pair, shuffling can only swap its two labels)")
    rng = random.Random(seed)
    shuffled = []
    for group in by_prompt.values():
        completions = [p.hack for p in group] + [p.clean for p in group]
        rng.shuffle(completions)
        half = len(group)
        shuffled += [replace(p, hack=h, clean=c) for p, h, c in zip(group, completions[:half], completions[half:])]
    return shuffled


def nonhack_pairs(problems: list[Problem], modes: list[str] | None = None) -> list[ContrastivePair]:
    """Control: clean vs clean (two clean template variants), so no pair contains a hack."""
    _check_modes(modes)
    return [
        ContrastivePair(tuple(build_messages(p)), clean_completion(p, variant=0), clean_completion(p, variant=1),
                        p.mode, p.id)
        for p in problems
        if modes is None or p.mode in modes
    ]


def _check_modes(modes: list[str] | None) -> None:
    unknown = set(modes or ()) - set(MODES)
    if unknown:
        raise ValueError(f"unknown loophole modes {sorted(unknown)}; expected some of {MODES}")
