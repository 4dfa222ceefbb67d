"""Evaluation: the batched rollout engine and aggregate statistics."""

from rbfm.evaluation.aggregate import iqm, mean_ci
from rbfm.evaluation.fb_policy import fb_policy, noisy_policy
from rbfm.evaluation.rollout import EnvSpec, Policy, RolloutEngine, RolloutResult

__all__ = [
    "EnvSpec",
    "Policy",
    "RolloutEngine",
    "RolloutResult",
    "fb_policy",
    "iqm",
    "mean_ci",
    "noisy_policy",
]
