"""Evaluation: the batched rollout engine and aggregate statistics."""

from rbfm.evaluation.rollout import EnvSpec, Policy, RolloutEngine, RolloutResult
from rbfm.evaluation.stats import iqm, mean_ci

__all__ = ["EnvSpec", "Policy", "RolloutEngine", "RolloutResult", "iqm", "mean_ci"]
