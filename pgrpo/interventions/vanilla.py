"""Vanilla GRPO: no intervention. V is still measured (the gradient's hack-ward share, the knobs'
drift along it) like every arm's."""

from pgrpo.interventions.base import Intervention


class Vanilla(Intervention):
    """Vanilla GRPO: the gradient, the update and the advantages are left alone; V is only measured."""

    measures_only = True
