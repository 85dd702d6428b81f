"""What an intervention that reads V shares: which V it reads, the real one or a negative control.

A negative control is the same intervention reading a V that should carry no hack signal, matched to the real
V's k in every module (docs/design.md#negative-controls): random orthonormal rows, a V from the same problems'
completions with the hack/clean labels dealt at random (shuffled), or from clean-vs-clean pairs (nonhack). If
the real V does not beat its control, the intervention's effect is regularisation, not hack removal. Any
intervention built on ReadsV gets these placebos for free (erase, route, adv_gate: configs/placebos/random_v.yaml,
configs/placebos/adv_gate_random_v.yaml).
"""

from typing import ClassVar, Literal, cast

from lightning.pytorch.utilities import rank_zero_info

from pgrpo.directions.controls import Control, control_basis, is_control
from pgrpo.directions.extraction import HackBasis, basis_overlap
from pgrpo.interventions.base import Intervention, RunView, run_seed
from pgrpo.interventions.yoke import yoke_of

Source = Literal["real", "random", "shuffled", "nonhack"]


class ReadsV(Intervention):
    """An intervention that reads the hack directions V (or, for a negative control, a placebo V)."""

    placebo_knob: ClassVar[str] = "v"

    def __init__(self, v: Source = "real", v_seed: int | None = None, yoked_to: str | None = None):
        """
        Args:
            v: the V it reads: real (extracted from hack/clean pairs), or a negative control matched to it in k
                per module: random | shuffled | nonhack.
            v_seed: seed of the random control's rows (None: the run's seed_everything, so each seed of a sweep
                draws its own).
            yoked_to: a placebo's method run at the same seed (its directory), which it matches in strength step
                by step (pgrpo/interventions/yoke.py); None: matched at train start.
        """
        if v not in ("real", "random", "shuffled", "nonhack"):
            raise ValueError(f"v={v!r}: expected real, random, shuffled or nonhack")
        self.v = v
        self.v_seed = v_seed
        self.yoked_to = yoked_to
        self.yoke = yoke_of(self, yoked_to)

    def basis(self, module: RunView, real: HackBasis) -> HackBasis:
        if self.yoke is not None:
            self.yoke.scalars()
        # a resumed run restored its control V from the checkpoint: never swapped twice
        if self.v == "real" or is_control(real):
            return real
        control = self.control(module, real)
        # how much of the real V's span the control still holds (1 = the same subspace, ~√(k/r) = unrelated)
        overlap, _ = basis_overlap(real, control)
        control.meta["overlap_with_real"] = f"{overlap:.6g}"
        module.log_at_start({"basis/control_overlap": overlap})
        rank_zero_info(f"negative control: {self.v} V, {control.k_total} axes over {len(control.V)} modules "
                       f"(the real V: {real.k_total}), principal-angle overlap with the real V {overlap:.3f}")
        return control

    def refresh(self, module: RunView, old: HackBasis) -> HackBasis:
        """A control V re-extracted from its own control pairs and matched to the old k again; a random one
        tracks nothing and is kept."""
        if self.v == "real":
            return super().refresh(module, old)
        if self.v == "random":
            return old
        problems = module.extraction_problems
        return control_basis(cast(Control, self.v), old, module.extraction,
                             lambda control, cfg: module.extract_basis(problems, control, cfg, cached=False))

    def control(self, module: RunView, real: HackBasis) -> HackBasis:
        """The placebo V, matched to the real one in k per module (an intervention that can match its placebo in
        strength instead overrides this: Erase)."""
        problems = module.extraction_problems
        return control_basis(cast(Control, self.v), real, module.extraction,
                             lambda control, cfg: module.extract_basis(problems, control, cfg), run_seed(self.v_seed))
