"""MPPI on the true simulator: a demonstrator from outside the FB model.

Model-predictive path integral control (Williams et al., 2017) replans at every control
step: it samples action sequences around its current plan, rolls each one out in the
simulator with the task's own reward, and moves the plan to the return-weighted mean of
the samples; the plan's first action is executed and the rest is shifted one step.

Why MPPI and not CEM: one weighted mean per step, no elite set to size, and with
AR(1)-smoothed noise its gaits stay recognisable (CEM's elites of white noise chatter).

Rollouts go through `mujoco.rollout` (C, multi-threaded), never Python per simulated
step. The task reward is a function of the domain's reward features
(`rbfm.envs.domains`); the planner reads them from sensors added to the domain's model
(a torso frame position and axis, a subtree angular momentum), so that every sample's
reward of every step comes back with the rollout. Perturbations are applied to the
planner's model as to the environment's: a planner inside a perturbed simulator is what
a controller that knows the shifted physics reaches there (the ceiling).

The temperature is scaled to the spread of the sampled returns,
w_i ~ exp(k (R_i - max R) / (max R - min R)): a fixed temperature on these small
per-step rewards averages the noise away and the cheetah stands still.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

import mujoco
import mujoco.rollout
import numpy as np

from rbfm import checks
from rbfm.checks import in_range, known_fields
from rbfm.envs import RbfmEnv, get_domain
from rbfm.envs.dynamics import Dynamics, apply_dynamics, check_dynamics
from rbfm.errors import ConfigError, unknown


@dataclass(frozen=True)
class MPPIConfig:
    """One planner's settings: `samples` action sequences of `horizon` control steps."""

    samples: int
    horizon: int
    noise: float = 0.4  # std of the action perturbation, actions in [-1, 1]
    smoothing: float = 0.5  # AR(1) coefficient of the noise across the horizon
    temperature: float = 10.0  # k of the scaled weights
    threads: int = 2  # mujoco.rollout's worker threads

    def __post_init__(self) -> None:
        for name in ("samples", "horizon", "threads"):
            value = getattr(self, name)
            if isinstance(value, float) and value.is_integer():  # 16.0 (TOML, JSON) is 16
                object.__setattr__(self, name, int(value))
        # At 1024 samples of 250 steps (8x the largest preset's samples, a quarter of an
        # episode ahead) a walker episode takes hours and one step's rollouts near a GB.
        in_range("mpc", "samples", self.samples, 2, 1024, integer=True)
        in_range("mpc", "horizon", self.horizon, 1, 250, integer=True)
        in_range("mpc", "noise", self.noise, 0, 2, open_low=True)
        in_range("mpc", "smoothing", self.smoothing, 0, 1, open_high=True)
        in_range("mpc", "temperature", self.temperature, 0, 1e3, open_low=True)
        in_range("mpc", "threads", self.threads, 1, 256, integer=True)
        for name in ("noise", "smoothing", "temperature"):  # 1 and 1.0: one record, one key
            object.__setattr__(self, name, float(getattr(self, name)))

    def record(self) -> dict[str, Any]:
        return asdict(self)


# Fixed once per domain (not per task): each reaches an expert return on its domain's
# tasks at a cost of 15-180 s per episode on 2 cores (docs/demonstrations.md).
PRESETS: dict[str, MPPIConfig] = {
    "walker": MPPIConfig(samples=96, horizon=30),
    "quadruped": MPPIConfig(samples=64, horizon=25),
    "cheetah": MPPIConfig(samples=128, horizon=40),
}
# Tests: a few samples over a short horizon, still well above random actions.
TINY = MPPIConfig(samples=16, horizon=8)


def mpc_config(domain: str, overrides: Mapping[str, Any] | None = None) -> MPPIConfig:
    """The domain's preset with `overrides` ({field: value}) applied and checked."""
    if domain not in PRESETS:
        raise unknown("domain", domain, PRESETS)
    known_fields(MPPIConfig, overrides or {}, "mpc")
    return replace(PRESETS[domain], **(overrides or {}))  # each value checked in the config


# Sensors added to each domain's model, one per reward feature, in `feature_names` order:
# (type, object type, object name, component), or the name of a sensor the model has.
_O, _S = mujoco.mjtObj, mujoco.mjtSensor
_FEATURE_SENSORS: dict[str, tuple[tuple[Any, ...], ...]] = {
    "walker": (
        (_S.mjSENS_FRAMEPOS, _O.mjOBJ_XBODY, "torso", 2),  # torso height: xpos z
        (_S.mjSENS_FRAMEZAXIS, _O.mjOBJ_XBODY, "torso", 2),  # upright: xmat zz
        ("torso_subtreelinvel", 0),
        (_S.mjSENS_SUBTREEANGMOM, _O.mjOBJ_BODY, "torso", 1),
    ),
    "quadruped": (
        (_S.mjSENS_FRAMEZAXIS, _O.mjOBJ_XBODY, "torso", 2),
        ("velocimeter", 0),
        ("center_of_mass", 2),
    ),
    "cheetah": (("torso_subtreelinvel", 0),),
}


def planning_model(
    domain: str, dynamics: Dynamics | None = None
) -> tuple[mujoco.MjModel, np.ndarray]:
    """The domain's model with its reward sensors, under `dynamics`, and the sensordata
    index of each reward feature."""
    spec = get_domain(domain)
    xml, assets = spec.model_xml()
    mj = mujoco.MjSpec.from_string(xml, dict(assets))
    names: list[tuple[str, int]] = []
    for i, entry in enumerate(_FEATURE_SENSORS[domain]):
        if isinstance(entry[0], str):
            names.append((entry[0], entry[1]))
            continue
        kind, objtype, objname, component = entry
        name = f"rbfm_feature_{i}"
        mj.add_sensor(name=name, type=kind, objtype=objtype, objname=objname)
        names.append((name, component))
    with warnings.catch_warnings():
        # dm_control's cheetah.xml sets `<compiler settotalmass>`, which MjSpec's compiler
        # warns is deprecated; compiled as dm_control compiles it, the masses are the suite's.
        warnings.filterwarnings("ignore", "compiler attribute 'settotalmass'", UserWarning)
        model = mj.compile()
    apply_dynamics(model, mujoco.MjData(model), domain, check_dynamics(domain, dynamics or {}))
    index = np.array([model.sensor_adr[model.sensor(n).id] + c for n, c in names], np.int64)
    return model, index


class MPPIPlanner:
    """Plans `domain`/`task` under `dynamics`; `act(state)` returns the next action.

    `state` is `mj_getState(..., mjSTATE_FULLPHYSICS)` of the environment's MjData. The
    sampled noise comes from one generator seeded by `seed`: the same seed and states
    give the same actions.
    """

    def __init__(
        self,
        domain: str,
        task: str,
        config: MPPIConfig,
        dynamics: Dynamics | None = None,
        seed: int = 0,
    ) -> None:
        checks.seed("mpc", seed)
        spec = get_domain(domain)
        self.reward = spec.reward_fn(task)  # an unknown task is refused before planning
        self.spec, self.config = spec, config
        self.model, self.feature_index = planning_model(domain, dynamics)
        self.n_sub = round(spec.control_timestep / self.model.opt.timestep)
        self.datas = [mujoco.MjData(self.model) for _ in range(config.threads)]
        self.rng = np.random.default_rng(seed)
        self.plan = np.zeros((config.horizon, spec.action_dim))

    def reset(self) -> None:
        """A new episode: the plan starts from zero actions again."""
        self.plan[:] = 0.0

    def _noise(self) -> np.ndarray:
        c = self.config
        white = self.rng.standard_normal((c.samples, c.horizon, self.spec.action_dim))
        noise = np.empty_like(white)
        noise[:, 0] = white[:, 0]
        innovation = np.sqrt(1.0 - c.smoothing**2)
        for t in range(1, c.horizon):
            noise[:, t] = c.smoothing * noise[:, t - 1] + innovation * white[:, t]
        noise[0] = 0.0  # the current plan is always one of the samples
        return c.noise * noise

    def returns(self, state: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """The task return of each (horizon, action_dim) sequence of `actions` from `state`;
        a rollout that diverges returns -inf."""
        # mj_step computes the sensors of the state it starts from, so the state after
        # control step t is read at physics step (t + 1) n_sub: one step past the horizon.
        controls = np.repeat(actions, self.n_sub, axis=1)
        controls = np.concatenate((controls, controls[:, -1:]), axis=1)
        _, sensors = mujoco.rollout.rollout(
            self.model, self.datas, state[None], controls, persistent_pool=True
        )
        features = sensors[:, self.n_sub :: self.n_sub][..., self.feature_index]
        rewards = self.reward(self.spec.features(features))
        total = rewards.sum(axis=1)
        return np.where(np.isfinite(total), total, -np.inf)

    def act(self, state: np.ndarray) -> np.ndarray:
        c = self.config
        actions = np.clip(self.plan[None] + self._noise(), -1.0, 1.0)
        ret = self.returns(state, actions)
        finite = np.isfinite(ret)
        if not finite.any():
            raise ConfigError(
                f"mpc: every sampled rollout of {self.spec.name} diverged; lower the noise"
            )
        best, worst = ret[finite].max(), ret[finite].min()
        scaled = (ret - best) / max(best - worst, 1e-12)
        weights = np.where(finite, np.exp(c.temperature * np.where(finite, scaled, 0.0)), 0.0)
        plan = np.tensordot(weights / weights.sum(), actions, axes=1)
        action = plan[0].copy()
        self.plan[:-1], self.plan[-1] = plan[1:], plan[-1]
        return action


def physics_state(model: mujoco.MjModel, data: mujoco.MjData) -> np.ndarray:
    """The full physics state the planner starts its rollouts from."""
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    state = np.empty(mujoco.mj_stateSize(model, spec))
    mujoco.mj_getState(model, data, state, spec)
    return state


@dataclass(frozen=True)
class PlannedEpisode:
    """One episode in the environment with the planner's actions: T+1 observations and
    physics states, T actions and rewards."""

    observation: np.ndarray
    action: np.ndarray
    physics: np.ndarray
    reward: np.ndarray

    @property
    def total(self) -> float:
        return float(self.reward.sum())


def plan_episode(
    env: RbfmEnv, planner: MPPIPlanner, steps: int | None = None, progress: Any = None
) -> PlannedEpisode:
    """Resets `env` (its own seed draws the initial state) and acts with `planner` for
    `steps` control steps (the whole episode by default). `progress` is called with 1
    after each step (a tqdm bar's `update`)."""
    ts = env.reset()
    planner.reset()
    physics = env.physics
    model, data = physics.model.ptr, physics.data.ptr
    obs, acts, states, rewards = [ts.observation], [], [physics.get_state().copy()], []
    for _ in range(env.step_limit if steps is None else steps):
        action = planner.act(physics_state(model, data))
        ts = env.step(action)
        obs.append(ts.observation)
        acts.append(action)
        states.append(physics.get_state().copy())
        rewards.append(ts.reward)
        if progress is not None:
            progress(1)
        if ts.last():
            break
    return PlannedEpisode(
        np.asarray(obs, np.float32),
        np.asarray(acts, np.float32),
        np.asarray(states),
        np.asarray(rewards, np.float64),
    )
