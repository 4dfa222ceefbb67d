"""`make_env`: dm_env environments with flat float32 observations, optionally perturbed."""

from __future__ import annotations

from typing import Any

import dm_env
import mujoco
import numpy as np
from dm_control import mujoco as dm_mujoco
from dm_control.rl.control import PhysicsError
from dm_env import specs

from rbfm.envs.domains import RewardTask, get_domain, make_control_env
from rbfm.envs.dynamics import Dynamics, apply_dynamics, check_dynamics
from rbfm.envs.perturbations import check_pair
from rbfm.errors import ConfigError


class PhysicsStep:
    """One control step of a (model, data) as dm_control's `Physics.step` takes it, with
    its divergence check; `PhysicsStep(model, data, n)(action)`.

    Sets the control; the legacy step (mj_step2, mj_step for the other sub-steps, then
    mj_step1, so that positions, velocities and sensors describe the new state; RK4:
    mj_step then mj_step1); PhysicsError when a MuJoCo warning counter grew (they only
    grow, so comparing their bytes is the check, at a fraction of an array comparison's
    cost: evaluation makes this call ~10^9 times in the paper's grid).
    """

    __slots__ = ("ctrl", "data", "model", "n", "rk4", "warnings")

    def __init__(self, model: mujoco.MjModel, data: mujoco.MjData, n_sub_steps: int) -> None:
        self.model, self.data, self.n = model, data, n_sub_steps
        self.ctrl, self.warnings = data.ctrl, data.warning.number  # live views
        self.rk4 = model.opt.integrator == mujoco.mjtIntegrator.mjINT_RK4

    def __call__(self, action: np.ndarray) -> None:
        m, d, n = self.model, self.data, self.n
        self.ctrl[:] = action
        before = self.warnings.tobytes()
        if self.rk4:
            mujoco.mj_step(m, d, n)
        else:
            mujoco.mj_step2(m, d)
            if n > 1:
                mujoco.mj_step(m, d, n - 1)
        mujoco.mj_step1(m, d)
        if self.warnings.tobytes() != before:
            grew = self.warnings > np.frombuffer(before, self.warnings.dtype)
            names = ", ".join(np.compress(grew, list(mujoco.mjtWarning.__members__)))
            raise PhysicsError(f"Physics state is invalid. Warning(s) raised: {names}")


def flatten_observation(observation: dict[str, Any]) -> np.ndarray:
    """Concatenates a dm_control observation dict in its own key order, as float32."""
    return np.concatenate([np.ravel(v) for v in observation.values()], dtype=np.float32)


class RbfmEnv(dm_env.Environment):  # type: ignore[misc]
    """One task of one domain, 1000 steps per episode, action repeat 1: `domain`/`task`
    under `perturbation` at `level` (paper units), or under several families' levels at
    once (`dynamics`, {family: level}); none of them: nominal dynamics. It reports which
    through the attributes of those names.

    >>> env = make_env("cheetah", "run", "joint_friction", 25.0, seed=1)
    >>> env.reset().observation.shape
    (17,)
    """

    def __init__(
        self,
        domain: str,
        task: str,
        perturbation: str | None = None,
        level: float | None = None,
        seed: int = 0,
        dynamics: Dynamics | None = None,
    ) -> None:
        spec = get_domain(domain)
        spec.reward_fn(task)  # validates the task name before building anything
        check_pair(domain, perturbation, level)
        if dynamics is not None and perturbation is not None:
            raise ConfigError("give a perturbation family and level, or dynamics, not both")
        # One family at one level is the dynamics {family: level}.
        single = {} if perturbation is None or level is None else {perturbation: level}
        self.dynamics = check_dynamics(domain, dynamics or single)
        level = None if level is None else float(level)
        physics = spec.build_physics()
        apply_dynamics(physics.model.ptr, physics.data.ptr, domain, self.dynamics)
        self.domain, self.task, self.perturbation, self.level = domain, task, perturbation, level
        self.spec = spec
        self._env = make_control_env(spec, task, physics, seed)
        self._obs_spec = specs.Array((spec.obs_dim,), np.float32, "observation")
        model, self._data = physics.model.ptr, physics.data.ptr
        self._read_obs = spec.observation_reader(model)
        self._read_features = spec.feature_reader(model)
        self._step = PhysicsStep(model, self._data, self.n_sub_steps)

    @property
    def physics(self) -> dm_mujoco.Physics:
        return self._env.physics

    def describe(self) -> str:
        levels = ", ".join(f"{f}={v:g}" for f, v in self.dynamics.items())
        return f"{self.domain}/{self.task} ({levels or 'nominal'})"

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

    @property
    def n_sub_steps(self) -> int:
        """Physics steps per control step."""
        return int(self._env._n_sub_steps)

    @property
    def step_limit(self) -> int:
        """Control steps per episode."""
        return int(self._env._step_limit)

    def advance(self, action: np.ndarray) -> bool:
        """`step` without dm_control's Python layers; True at the episode's last step.

        `PhysicsStep`, then the time limit, as dm_control's `control.Environment.step`
        does for rbfm's tasks (no termination, no reward colours). Read the new state with
        `observation` and `features`: the same values as `step`'s, bitwise (tested).
        It is the rollout engine's step (`rbfm.evaluation.rollout`, which steps bare
        MjData with `PhysicsStep`) for one environment, and its test against `step` is
        what vouches for the engine's episodes: for cheetah dm_control's layers cost more
        than the physics.
        """
        env = self._env
        env._reset_next_step = True  # until the step is known to have succeeded
        self._step(action)
        env._step_count += 1
        last: bool = env._step_count >= env._step_limit
        env._reset_next_step = last
        return last

    def observation(self, data: mujoco.MjData | None = None) -> np.ndarray:
        """The current flat observation (float64; `step` returns it as float32), of this
        env's physics or of another MjData on its model."""
        return self._read_obs(self._data if data is None else data)

    def features(self, data: mujoco.MjData | None = None) -> np.ndarray:
        """The current reward features (`spec.feature_names`): rewards of any task; of
        this env's physics or of another MjData on its model."""
        return self._read_features(self._data if data is None else data)

    def observation_spec(self) -> specs.Array:
        return self._obs_spec

    def action_spec(self) -> specs.BoundedArray:
        return self._env.action_spec()


# What the documentation builds environments with: the class under a verb's name, so
# that there is one signature and one set of checks.
make_env = RbfmEnv
