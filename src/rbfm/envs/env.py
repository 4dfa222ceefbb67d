"""`make_env`: dm_env environments with flat float32 observations, optionally perturbed."""

from __future__ import annotations

from typing import Any

import dm_env
import numpy as np
from dm_control import mujoco as dm_mujoco
from dm_env import specs

from rbfm.envs.domains import RewardTask, get_domain, make_control_env
from rbfm.envs.perturbations import get_perturbation
from rbfm.errors import ConfigError


def flatten_observation(observation: dict[str, Any]) -> np.ndarray:
    """Concatenates a dm_control observation dict in its own key order, as float32."""
    return np.concatenate([np.ravel(v) for v in observation.values()], dtype=np.float32)


class RbfmEnv(dm_env.Environment):  # type: ignore[misc]
    """One task of one domain, 1000 steps per episode, action repeat 1.

    Reports the perturbation it runs under through `perturbation` and `level`
    (both None for nominal dynamics).
    """

    def __init__(
        self,
        domain: str,
        task: str,
        perturbation: str | None = None,
        level: float | None = None,
        seed: int = 0,
    ) -> None:
        spec = get_domain(domain)
        spec.reward_fn(task)  # validates the task name before building anything
        if (perturbation is None) != (level is None):
            raise ConfigError("give both a perturbation family and a level, or neither")
        physics = spec.build_physics()
        if perturbation is not None and level is not None:
            pert = get_perturbation(domain, perturbation)
            pert.apply(physics.model.ptr, physics.data.ptr, level)
            level = float(level)
        self.domain, self.task, self.perturbation, self.level = domain, task, perturbation, level
        self.spec = spec
        self._env = make_control_env(spec, task, physics, seed)
        self._obs_spec = specs.Array((spec.obs_dim,), np.float32, "observation")

    @property
    def physics(self) -> dm_mujoco.Physics:
        return self._env.physics

    def describe(self) -> str:
        dynamics = "nominal" if self.perturbation is None else f"{self.perturbation}={self.level:g}"
        return f"{self.domain}/{self.task} ({dynamics})"

    def reseed(self, seed: int | np.random.SeedSequence) -> None:
        """Reseeds the initial-state sampler; the next reset draws from the new seed."""
        task = self._env.task
        assert isinstance(task, RewardTask)
        task.reseed(np.random.RandomState(np.random.MT19937(seed)))

    def reset(self) -> dm_env.TimeStep:
        ts = self._env.reset()
        return ts._replace(observation=flatten_observation(ts.observation))

    def step(self, action: np.ndarray) -> dm_env.TimeStep:
        ts = self._env.step(action)
        return ts._replace(observation=flatten_observation(ts.observation))

    def observation_spec(self) -> specs.Array:
        return self._obs_spec

    def action_spec(self) -> specs.BoundedArray:
        return self._env.action_spec()


def make_env(
    domain: str,
    task: str,
    perturbation: str | None = None,
    level: float | None = None,
    seed: int = 0,
) -> RbfmEnv:
    """Builds `domain`/`task`, under `perturbation` at `level` (paper units) if given.

    >>> env = make_env("cheetah", "run", "joint_friction", 25.0, seed=1)
    >>> env.reset().observation.shape
    (17,)
    """
    return RbfmEnv(domain, task, perturbation, level, seed)
