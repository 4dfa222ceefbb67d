"""Planners on the true simulator: demonstrators from outside the FB model and the
ceiling a controller that knows the (shifted) physics reaches."""

from rbfm.planning.mppi import (
    PRESETS,
    TINY,
    MPPIConfig,
    MPPIPlanner,
    PlannedEpisode,
    mpc_config,
    plan_episode,
    planning_model,
)

__all__ = [
    "PRESETS",
    "TINY",
    "MPPIConfig",
    "MPPIPlanner",
    "PlannedEpisode",
    "mpc_config",
    "plan_episode",
    "planning_model",
]
