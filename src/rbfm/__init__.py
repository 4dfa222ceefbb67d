"""rbfm: robust offline imitation with forward-backward Behavior Foundation Models."""

import os

# dm_control picks an OpenGL backend at import time and warns when there is no display.
# rbfm never renders by default; users who want pixels set MUJOCO_GL themselves.
# `rbfm render` switches to EGL when the choice was rbfm's, not the user's.
# An empty MUJOCO_GL is no choice either (MuJoCo reads it as its default).
GL_DEFAULTED = not os.environ.get("MUJOCO_GL")
if GL_DEFAULTED:
    os.environ["MUJOCO_GL"] = "disable"

__version__ = "0.1.0"

# Seed of evaluation episodes' initial states wherever rbfm evaluates inferred policies
# (experiment runner, `rbfm evaluate`, quickstart): apart from the seeds demonstrations
# are rolled out with (0 by default), so no policy is scored on its own demos' states.
EVAL_SEED = 1000


def __getattr__(name: str) -> object:
    """The Python API (`rbfm.api`), imported on first use: `import rbfm` stays light for
    the command line and the worker processes."""
    import importlib

    if name not in _API:
        raise AttributeError(f"module 'rbfm' has no attribute {name!r}")
    module = importlib.import_module(_API[name])
    return getattr(module, name)


_API = {
    **{n: "rbfm.data.demos" for n in ("Demos", "save_demos", "load_demos")},
    **{
        n: "rbfm.api"
        for n in (
            "Model",
            "Imitation",
            "load_model",
            "list_models",
            "imitate",
            "adapt",
            "load_imitation",
            "evaluate",
        )
    },
}


__all__ = [
    "EVAL_SEED",
    "Demos",
    "Imitation",
    "Model",
    "adapt",
    "evaluate",
    "imitate",
    "list_models",
    "load_demos",
    "load_imitation",
    "load_model",
    "save_demos",
]
