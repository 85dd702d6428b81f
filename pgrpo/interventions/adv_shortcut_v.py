"""adv_shortcut_v: adv_shortcut's penalty with V as the shortcut direction. A rollout's score is how hack-ward the
gradient is that would reinforce it: its own length-normalised NLL gradient wrt the knobs (the direction a
positive advantage pushes the loss's gradient; descending it makes the rollout likelier), projected on each
module's hack-ward rows of V and summed. V is oriented as hack pairs' NLL gradients minus clean ones', so a
hack-like rollout scores high. Z-scored over the batch, one-sided, subtracted
(× alpha) from the reward before group normalisation, as adv_shortcut does with the activations' direction.

Where adv_gate discounts a rollout's advantage by the hack-ward share of its gradient after the backward, this
acts on the reward before normalisation, so the rollout loses ground against its own group. It reads V, so the
negative controls of every V reader come with it (v: random | shuffled | nonhack).
"""

import torch
from torch import Tensor

from pgrpo.directions.extraction import HackBasis, nll_grads
from pgrpo.interventions.adv_shortcut import UNYOKED, one_sided_penalty
from pgrpo.interventions.base import RewardEdit, RunView
from pgrpo.interventions.reads_v import ReadsV, Source
from pgrpo.interventions.yoke import refuse_yoke
from pgrpo.step.rollout import Packed


class AdvShortcutV(ReadsV):
    """Each rollout's reward loses alpha · max(0, z), z its batch-z-scored NLL gradient along V."""

    def __init__(self, alpha: float = 2.0, v: Source = "real", v_seed: int | None = None,
                 yoked_to: str | None = None):
        """
        Args:
            alpha: the penalty per standard deviation above the batch's mean score (Wu & Tang: 2).
            v: the V it reads: real, or a negative control (random | shuffled | nonhack), matched in k.
            v_seed: seed of the random control (None: the run's seed_everything).
            yoked_to: refused (a ValueError says why): its placebo is matched at train start only.
        """
        refuse_yoke(self, yoked_to, UNYOKED)
        super().__init__(v, v_seed)
        if alpha < 0:
            raise ValueError(f"alpha={alpha}: must be >= 0 (the penalty is subtracted)")
        self.alpha = alpha

    def rewards(self, module: RunView, rewards: Tensor, packed: Packed, exploited) -> RewardEdit:
        grads = nll_grads(module.policy, module.adapter, packed.input_ids, packed.attention_mask,
                          packed.completion_mask, batch_size=module.micro_batch_size or len(
                              packed.input_ids), temperature=module.generation.temperature)
        return one_sided_penalty(rewards, v_scores(grads, module.basis).cpu(), self.alpha)


def v_scores(nll_grads_per_row: dict[str, Tensor], basis: HackBasis) -> Tensor:
    """(B,) each row's NLL gradient (rows (B, r) per module) along V's hack-ward rows, summed."""
    with torch.no_grad():
        return torch.stack([(nll_grads_per_row[name].float() @ rows.to(nll_grads_per_row[name]).float().T).sum(1)
                            for name, rows in basis.V.items()]).sum(0)
