"""Task inference from demonstrations: FB-IL, RBFM-Light, RBFM-Heavy and their duals.

Every method has the same interface, `infer(model, demos, config, seed) -> result`,
and is registered in METHODS with its config class.
"""

from collections.abc import Callable
from typing import Any

from rbfm.errors import unknown
from rbfm.fb.model import FBModel
from rbfm.inference import fbil, rbfm_heavy, rbfm_light
from rbfm.inference.common import InferenceResult
from rbfm.inference.demos import Demos, generate_demos, load_demos, save_demos, warm_start
from rbfm.inference.divergences import DIVERGENCES, Divergence, get_divergence
from rbfm.inference.duals import (
    heavy_critic_loss,
    heavy_policy_loss,
    heavy_residual,
    light_dual,
    light_objective,
    light_worst_case,
)

METHODS: dict[str, tuple[Callable[..., InferenceResult], type]] = {
    "fbil": (fbil.infer, fbil.FBILConfig),
    "rbfm-light": (rbfm_light.infer, rbfm_light.LightConfig),
    "rbfm-heavy": (rbfm_heavy.infer, rbfm_heavy.HeavyConfig),
}


def infer(
    model: FBModel,
    demos: Demos,
    method: str,
    seed: int = 0,
    progress: bool = False,
    **overrides: Any,
) -> InferenceResult:
    """Runs `method` with its paper defaults, optionally overridden (e.g. eps=0.5)."""
    if method not in METHODS:
        raise unknown("inference method", method, METHODS)
    run, config = METHODS[method]
    return run(model, demos, config(**overrides), seed, progress)


__all__ = [
    "DIVERGENCES",
    "METHODS",
    "Demos",
    "Divergence",
    "InferenceResult",
    "generate_demos",
    "get_divergence",
    "heavy_critic_loss",
    "heavy_policy_loss",
    "heavy_residual",
    "infer",
    "light_dual",
    "light_objective",
    "light_worst_case",
    "load_demos",
    "save_demos",
    "warm_start",
]
