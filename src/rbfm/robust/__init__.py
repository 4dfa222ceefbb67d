"""The robust objectives as pure functions of tensors: f-divergences, RBFM-Light's
TV-ball dual and RBFM-Heavy's f-ball dual. Shared by the FB inference methods
(`rbfm.inference`) and the robust baselines (`rbfm.baselines`)."""

from rbfm.robust.divergences import DIVERGENCES, Divergence, get_divergence
from rbfm.robust.duals import (
    InactiveBallWarning,
    ball_inactive,
    check_heavy,
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
    "InactiveBallWarning",
    "ball_inactive",
    "check_heavy",
    "get_divergence",
    "heavy_critic_loss",
    "heavy_policy_loss",
    "heavy_residual",
    "light_dual",
    "light_objective",
    "light_worst_case",
]
