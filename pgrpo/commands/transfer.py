"""`pgrpo transfer`: does a detector built without one loophole mode flag that mode's hacks (pgrpo/directions/transfer.py)?"""

import random
from dataclasses import replace

from pgrpo.directions.activations import pair_states
from pgrpo.model.adapter import attach_adapter
from pgrpo.directions.detectors import fit_logistic, fit_mean_difference
from pgrpo.env import load_problems
from pgrpo.env.exploits import completion, wrong_solution
from pgrpo.env.pairs import template_pairs, unseen_form_pairs
from pgrpo.model.load import hack_openings, load_model_and_tokenizer
from pgrpo.directions.transfer import leave_one_mode_out, unseen_forms_and_levers

FITS = {"probe": fit_logistic, "shortcut": fit_mean_difference}
HELD_OUT_LEVERS = ("run_tests", "exit_code")  # as the twin's leave-two-modes-out overlay


def transfer(model: str = "embedded", detector: str = "probe", variants: int = 4, n_heldout: int = 8,
             layer: int | None = None, seed: int = 0, placebo_seed: int | None = None,
             unseen: str = "modes", held_out: list[str] | None = None) -> None:
    """For each loophole mode, fit the detector on the other modes' template pairs and print how often it flags the
    held-out mode's hacks, its clean solutions, and the same wrong answers with no lever pulled.

    A lever detector flags the first and neither of the others; one that flags the lever-free wrong answers as
    often as the hacks reads wrongness. The last row is the detector built from every mode, scored on its
    held-out pairs. The pairs are the built-in problems' templates under the partition of modes, opened as the
    model's substrate opens hacks (embedded-distinct: each lever its own first token).

    With --unseen forms, the question is asked of hack forms that vary (pgrpo/env/hack_forms.py): the detector is
    fitted on the detectors' forms of every lever but `held_out`, on two thirds of their problems, and scored with
    a 95 % interval on the same forms on the other problems, on the taught forms there (which it never saw), and
    on each held-out lever's problems in both sets' forms. Near-perfect accuracy on the unseen forms says the
    forms are too alike to blind a detector.

    Args:
        model: "embedded", "embedded-distinct", a checkpoint directory, or a cached hub id.
        detector: probe (logistic, as probe_penalty; flags at probability > 0.5) or shortcut (the hack − clean
            mean difference, as adv_shortcut's activation direction; flags past the midpoint).
        variants: template variants per problem (lead-ins, stubs and wrong attempts cycle with it).
        n_heldout: known-mode pairs kept out of the fit to choose the layer by.
        layer: hidden states the detector reads; None: the decoder layer best on the held-out pairs.
        seed: order of the pairs, which decides the held-out ones.
        placebo_seed: score the detector's random placebo instead (a random direction at its layer, orthogonal to
            the hack − clean mean difference, flagging as many of the known pairs), drawn with this seed: what a
            placebo arm's detector flags.
        unseen: modes (leave each loophole mode out in turn) or forms (the forms and levers a detector never saw).
        held_out: with --unseen forms, the levers kept out of the detector (default: run_tests and exit_code, as
            configs/lomo/lomo_run_tests_exit_code.yaml keeps them out of a run's detectors).
    """
    if detector not in FITS:
        raise ValueError(f"detector={detector!r}: expected one of {sorted(FITS)}")
    if unseen not in ("modes", "forms"):
        raise ValueError(f"unseen={unseen!r}: expected modes or forms")
    policy, tokenizer = load_model_and_tokenizer(model)
    adapter = attach_adapter(policy)
    problems = load_problems()
    if unseen == "forms":
        sets = unseen_form_pairs(problems, held_out or list(HELD_OUT_LEVERS), variants)
        random.Random(seed).shuffle(sets["fit"])  # the layer is chosen on the last n_heldout: mix the levers there
        states = {name: pair_states(policy, adapter, tokenizer, pairs) for name, pairs in sets.items()}
        fitted, rows = unseen_forms_and_levers(states.pop("fit"), states, n_heldout, FITS[detector], layer,
                                               placebo_seed=placebo_seed)
        scored = detector if placebo_seed is None else f"the random placebo (seed {placebo_seed}) of {detector}"
        print(f"{scored} on {model}, fitted on {len(sets['fit'])} pairs of the detectors' forms (layer "
              f"{fitted.layer}, held-out pair accuracy {fitted.heldout_accuracy:.3f}); scored on:")
        print("| completions | hacks | hacks flagged | clean flagged | accuracy [95 % CI] |")
        print("|---|---|---|---|---|")
        for r in rows:
            print(f"| {r.scored_on} | {r.n} | {r.hacks_flagged:.3f} | {r.clean_flagged:.3f} | {r.accuracy:.3f} "
                  f"[{r.interval[0]:.3f}, {r.interval[1]:.3f}] |")
        return
    pairs = template_pairs(problems, None, variants, hack_openings(model))  # problem by problem, variant by variant
    # the third set, in each hack's place: its own wrong answer with the lever left out (template_pairs' order)
    wrong = [replace(pair, hack=completion(wrong_solution(p, v), v))
             for pair, (p, v) in zip(pairs, [(p, v) for p in problems for v in range(variants)])]
    order = list(range(len(pairs)))
    random.Random(seed).shuffle(order)  # the held-out pairs are the last ones: mix the modes among them
    pairs, wrong = [pairs[i] for i in order], [wrong[i] for i in order]
    hack, clean = pair_states(policy, adapter, tokenizer, pairs)
    wrong_states, _ = pair_states(policy, adapter, tokenizer, wrong)
    rows = leave_one_mode_out(hack, clean, wrong_states, [p.mode for p in pairs], n_heldout, FITS[detector],
                              layer=layer, placebo_seed=placebo_seed)
    scored = detector if placebo_seed is None else f"the random placebo (seed {placebo_seed}) of {detector}"
    print(f"{scored} on {model}, {len(pairs)} template pairs ({variants} per problem); flagged shares:")
    print("| held out | layer | held-out pair accuracy | its hacks | its clean | its wrong answers, no lever |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r.held_out} | {r.layer} | {r.heldout_accuracy:.3f} | {r.hacks_flagged:.3f} | {r.clean_flagged:.3f} "
              f"| {r.wrong_flagged:.3f} |")
