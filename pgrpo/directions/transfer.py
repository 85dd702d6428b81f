"""Does an activation detector built without one loophole mode flag that mode's hacks? The weak-detector test, read
off the detector itself rather than off a training run.

Under leave-one-mode-out a run can hold the held-out mode at zero without its detector ever flagging that mode's
hacks: penalising the known modes' hacks (the teacher's too) may keep the policy from hacking at all. This asks
the detector directly. Per held-out mode it is fitted on the other modes' pairs and scored on three sets of
completions to the held-out mode's prompts: its hacks (what a lever detector should flag), its clean solutions
(should not), and the very same wrong answers its hacks are built on with no lever pulled (exploits.wrong_solution:
a detector that flags these reads wrongness, not the lever).
"""

from dataclasses import dataclass, replace

from torch import Tensor

from pgrpo.directions.detectors import Fit, accuracy, fit_detector, random_placebo


@dataclass(frozen=True)
class Transfer:
    held_out: str  # the mode left out of the detector's pairs ("none": built from every mode)
    layer: int
    heldout_accuracy: float  # on the known modes' last n_heldout pairs (how the layer was chosen)
    hacks_flagged: float  # of the held-out mode's hacks (with held_out "none": of the held-out pairs' hacks)
    clean_flagged: float  # of its clean solutions
    wrong_flagged: float  # of its wrong answers with no lever


def leave_one_mode_out(hack: Tensor, clean: Tensor, wrong: Tensor, modes: list[str], n_heldout: int, fit: Fit,
                       cut: float = 0.0, layer: int | None = None, placebo_seed: int | None = None) -> list[Transfer]:
    """One Transfer per mode in `modes`' order of first appearance, then one for the detector built from all.

    hack, clean, wrong: pooled states (n, L+1, d) of pair i's hack, clean and lever-free wrong completion (row i
    of each), modes[i] its loophole mode. A completion is flagged where its score exceeds `cut`. With
    `placebo_seed`, each fitted detector is replaced by its random placebo (detectors.random_placebo, fitted on the
    same known pairs): what the interventions' placebo arms flag.
    """
    if not len(hack) == len(clean) == len(wrong) == len(modes):
        raise ValueError(f"{len(hack)} hack, {len(clean)} clean, {len(wrong)} wrong states and {len(modes)} modes: "
                         f"one of each per pair")
    results = []
    for held in [*dict.fromkeys(modes), "none"]:
        known = [i for i, m in enumerate(modes) if m != held]
        # built from every mode, it is scored on the pairs it was not fitted on (the last n_heldout)
        out = [i for i, m in enumerate(modes) if m == held] if held != "none" else known[-n_heldout:]
        detector = fit_detector(hack[known], clean[known], n_heldout, fit, layer)
        if placebo_seed is not None:  # its accuracy on the pairs the real one chose its layer by
            detector = random_placebo(detector, hack[known], clean[known], placebo_seed, cut)
            tuning = known[-n_heldout:]
            detector = replace(detector, heldout_accuracy=accuracy(detector, hack[tuning], clean[tuning]))

        def flagged(states: Tensor) -> float:
            return float((detector.scores(states[out]) > cut).float().mean())

        results.append(Transfer(held, detector.layer, detector.heldout_accuracy, flagged(hack), flagged(clean),
                                flagged(wrong)))
    return results
