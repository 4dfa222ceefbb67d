"""Task inference from demonstrations: divergences and the robust dual objectives."""

from rbfm.inference.divergences import DIVERGENCES, Divergence, get_divergence
from rbfm.inference.duals import (
    heavy_critic_loss,
    heavy_policy_loss,
    heavy_residual,
    light_dual,
    light_objective,
    light_worst_case,
)

__all__ = [
    "DIVERGENCES",
    "Divergence",
    "get_divergence",
    "heavy_critic_loss",
    "heavy_policy_loss",
    "heavy_residual",
    "light_dual",
    "light_objective",
    "light_worst_case",
]
