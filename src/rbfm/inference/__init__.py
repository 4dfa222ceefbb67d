"""Task inference from demonstrations: FB-IL, RBFM-Light, RBFM-Heavy (their duals:
`rbfm.robust`), and the imitation reductions that read no actions: reward-based (`er`)
and feature matching through F (`fm`); the goal-based reduction, a z per step, is
`rbfm.inference.goal`.

Every method has the same interface, `infer(model, demos, config, seed) -> result`,
and is registered in METHODS with its config class. Two named settings choose the
configs (`method_config`): "default", what converges (each config class's defaults),
and "paper", Tables 5-7 as the paper runs them (docs/inference.md compares them).
"""

from collections.abc import Callable
from typing import Any

from rbfm.checks import known_fields
from rbfm.data.demos import Demos, load_demos, save_demos
from rbfm.errors import ConfigError, unknown
from rbfm.fb.model import FBModel
from rbfm.inference import er, fbil, fm, rbfm_heavy, rbfm_light
from rbfm.inference.common import InferenceResult
from rbfm.inference.expert_demos import generate_demos, warm_start

METHODS: dict[str, tuple[Callable[..., InferenceResult], type]] = {
    "fbil": (fbil.infer, fbil.FBILConfig),
    "rbfm-light": (rbfm_light.infer, rbfm_light.LightConfig),
    "rbfm-heavy": (rbfm_heavy.infer, rbfm_heavy.HeavyConfig),
    "er": (er.infer, er.ERConfig),
    "fm": (fm.infer, fm.FMConfig),
}

# Per settings name, per method: the fields that differ from the config's defaults.
SETTINGS: dict[str, dict[str, dict[str, Any]]] = {
    "default": {m: {} for m in METHODS},
    "paper": {
        "fbil": fbil.PAPER,
        "rbfm-light": rbfm_light.PAPER,
        "rbfm-heavy": rbfm_heavy.PAPER,
        # Not in the paper: its settings are the defaults.
        "er": {},
        "fm": {},
    },
}


def method_config(method: str, settings: str = "default", **overrides: Any) -> Any:
    """`method`'s config under the named settings, with `overrides` (e.g. eps=0.5) on top."""
    if method not in METHODS:
        raise unknown("inference method", method, METHODS)
    if settings not in SETTINGS:
        raise unknown("inference settings", settings, SETTINGS)
    if settings != "default" and not SETTINGS[settings][method]:
        # A name that changes nothing is refused, as the CLI, specs and rbfm.imitate do.
        readers = ", ".join(m for m, fields in SETTINGS[settings].items() if fields)
        raise ConfigError(
            f"settings {settings!r} does nothing for {method} ({method} takes no settings; "
            f"{settings!r} is for {readers})"
        )
    known_fields(METHODS[method][1], overrides, method)
    return METHODS[method][1](**(SETTINGS[settings][method] | overrides))


def infer(
    model: FBModel,
    demos: Demos,
    method: str,
    seed: int = 0,
    progress: bool = False,
    settings: str = "default",
    **overrides: Any,
) -> InferenceResult:
    """Runs `method` under the named settings, optionally overridden (e.g. eps=0.5)."""
    cfg = method_config(method, settings, **overrides)
    return METHODS[method][0](model, demos, cfg, seed, progress)


__all__ = [
    "METHODS",
    "SETTINGS",
    "Demos",
    "InferenceResult",
    "generate_demos",
    "infer",
    "load_demos",
    "method_config",
    "save_demos",
    "warm_start",
]
