"""What an intervention that reads the policy's activations shares: a linear detector on one layer's mean-pooled
hidden states, built at train start from the contrastive pairs V is extracted from (so a leave-one-mode-out
overlay, `model.extraction.modes`, restricts it too), fixed while training runs, or its random placebo.

The placebo is the same detector with a random direction at the same layer and weight norm, orthogonal to the
hack − clean mean difference, flagging as many of the base policy's own rollouts as the real one
(pgrpo/directions/calibration.py, pgrpo/directions/detectors.py): if the real detector does not beat it, the intervention's effect is
the penalty's size, not its aim.
"""

from abc import ABC, abstractmethod
from typing import ClassVar, Literal

from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor

from pgrpo.directions.activations import pair_states, policy_states
from pgrpo.model.adapter import knobs_zeroed
from pgrpo.directions.calibration import base_completions
from pgrpo.directions.detectors import LinearDetector, accuracy, fit_detector, random_placebo
from pgrpo.interventions.base import Intervention, RunView, run_seed
from pgrpo.interventions.yoke import yoke_of
from pgrpo.step.rollout import Packed

Detector = Literal["real", "random"]


class ReadsActivations(Intervention, ABC):
    """An intervention that scores each rollout with a linear detector on the policy's pooled hidden states."""

    placebo_knob: ClassVar[str] = "detector"

    @property
    def cut(self) -> float:
        """The score above which the detector flags a completion (the placebo matches the real one's rate there)."""
        return 0.0

    def __init__(self, layer: int | None = None, detector: Detector = "real", detector_seed: int | None = None,
                 yoked_to: str | None = None):
        """
        Args:
            layer: hidden states read (0: the embeddings, -1: the last layer); None: the decoder layer whose
                detector classifies the held-out pairs (model.extraction.n_heldout) best.
            detector: real (fitted on the hack/clean pairs) or random (the placebo: a random direction at the same
                layer and weight norm, flagging as many of the base policy's own rollouts at train start).
            detector_seed: seed of the random placebo (None: the run's seed_everything).
            yoked_to: a placebo's method run at the same seed, on as many of whose student and teacher rows it acts
                step by step (pgrpo/interventions/yoke.py); None: matched at train start.
        """
        if detector not in ("real", "random"):
            raise ValueError(f"detector={detector!r}: expected real or random")
        self.layer = layer
        self.detector = detector
        self.detector_seed = detector_seed
        self.yoked_to = yoked_to
        self.yoke = yoke_of(self, yoked_to)
        self.fitted: LinearDetector | None = None


    @abstractmethod
    def fit(self, hack: Tensor, clean: Tensor) -> tuple[Tensor, float]:
        """(weight, bias) from standardised hack and clean features (n, d) each."""

    def prepare(self, module: RunView) -> None:
        if self.yoke is not None:
            self.yoke.scalars()
        hack, clean = pair_states(module.policy, module.adapter, module.tokenizer, module.extraction_pairs())
        fitted = fit_detector(hack, clean, module.extraction.n_heldout, self.fit, self.layer)
        rank_zero_info(f"{self.arm()}: detector at hidden state {fitted.layer} of {hack.shape[1] - 1}, held-out "
                       f"pair accuracy {fitted.heldout_accuracy:.3f} ({len(hack)} pairs)")
        stats = {"detector/layer": float(fitted.layer), "detector/heldout_accuracy": fitted.heldout_accuracy}
        # the base policy's own rollouts (never graded): the placebo flags as many of them as the real detector
        with knobs_zeroed(module.adapter):
            base_states = policy_states(module.policy, module.adapter, base_completions(module)).cpu()
        if self.detector == "random":
            fitted = random_placebo(fitted, hack, clean, run_seed(self.detector_seed), self.cut, base_states)
            held = slice(-module.extraction.n_heldout, None)
            stats["detector/placebo_heldout_accuracy"] = accuracy(fitted, hack[held], clean[held])
            rank_zero_info(f"{self.arm()}: the placebo reads a random direction there, orthogonal to the hack − clean "
                           f"mean difference: held-out pair accuracy {stats['detector/placebo_heldout_accuracy']:.3f}")
        self.fitted = fitted
        stats["intervention/start_rate"] = float((fitted.scores(base_states) > self.cut).float().mean())
        module.log_at_start(stats)

    def scores(self, module: RunView, packed: Packed) -> Tensor:
        """(B,) detector scores of the batch's rows under the policy as it is now."""
        assert self.fitted is not None, "scores before prepare"
        return self.fitted.scores(policy_states(module.policy, module.adapter, packed))

