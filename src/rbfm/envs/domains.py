"""The three DeepMind Control domains and their twelve tasks.

Each domain has exactly one physics model, so one reward-free dataset serves all
four of its tasks. Task rewards are written as vectorised functions of a small
per-state feature vector (heights, velocities, angular momentum...). The live
environment and the offline relabeller both call the same functions, which is
what makes relabelled rewards equal the collected ones.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import mujoco
import numpy as np
from absl import logging as absl_logging
from dm_control import mujoco as dm_mujoco
from dm_control.rl import control
from dm_control.suite import base, cheetah, common, quadruped, walker

from rbfm.errors import ConfigError, unknown

Features = Mapping[str, np.ndarray]
RewardFn = Callable[[Features], np.ndarray]
FeatureReader = Callable[[mujoco.MjData], np.ndarray]
# The flat observation, read straight from MjData's arrays: the values dm_control's
# get_observation returns, in its key order (float64; cast to float32 by the caller).
ObservationReader = Callable[[mujoco.MjData], np.ndarray]


def _sensor_indices(model: mujoco.MjModel, ids: np.ndarray) -> np.ndarray:
    """sensordata indices of the given sensors, in the order given."""
    adr, dim = model.sensor_adr, model.sensor_dim
    return np.concatenate([np.arange(adr[i], adr[i] + dim[i]) for i in ids]).astype(np.int64)


def _tolerance(
    x: np.ndarray, low: float, margin: float, value_at_margin: float, sigmoid: str
) -> np.ndarray:
    """dm_control's `rewards.tolerance` with bounds (low, inf), for arrays or scalars.

    The same floating-point operations as dm_control's (so results are bitwise equal),
    without its per-call checks, which cost more than a cheetah physics step.
    """
    d = np.maximum(low - x, 0.0) / margin
    if sigmoid == "linear":
        return np.maximum(1 - d * (1 - value_at_margin), 0.0)
    scale = np.sqrt(-2 * np.log(value_at_margin))
    return np.exp(-0.5 * (d * scale) ** 2)


def _tol_linear(x: np.ndarray, low: float, margin: float, value_at_margin: float) -> np.ndarray:
    return _tolerance(x, low, margin, value_at_margin, "linear")


# ----------------------------------------------------------------------------- walker
# Constants from dm_control.suite.walker and URLB's walker flip task.
_WALKER_STAND_HEIGHT = 1.2
_WALKER_SPIN_SPEED = 5.0


def _walker_stand(f: Features) -> np.ndarray:
    # dm_control's default gaussian sigmoid with value 0.1 at the margin.
    standing = _tolerance(
        f["torso_height"], _WALKER_STAND_HEIGHT, _WALKER_STAND_HEIGHT / 2, 0.1, "gaussian"
    )
    upright = (1 + f["torso_upright"]) / 2
    return (3 * standing + upright) / 4


def _walker_move(speed: float) -> RewardFn:
    def reward(f: Features) -> np.ndarray:
        move = _tol_linear(f["horizontal_velocity"], speed, speed / 2, 0.5)
        return _walker_stand(f) * (5 * move + 1) / 6

    return reward


def _walker_flip(f: Features) -> np.ndarray:
    spin = _tol_linear(f["angmom"], _WALKER_SPIN_SPEED, _WALKER_SPIN_SPEED, 0.0)
    return _walker_stand(f) * (1 + 5 * spin) / 6


def _walker_features(model: mujoco.MjModel) -> FeatureReader:
    torso = model.body("torso").id
    vel = model.sensor_adr[model.sensor("torso_subtreelinvel").id]

    def read(data: mujoco.MjData) -> np.ndarray:
        return np.array(
            [
                data.xpos[torso, 2],
                data.xmat[torso, 8],
                data.sensordata[vel],
                data.subtree_angmom[torso, 1],
            ]
        )

    return read


def _walker_observation(model: mujoco.MjModel) -> ObservationReader:
    # orientations (xx, xz of every body's frame but the world's), torso height, qvel.
    torso = model.body("torso").id

    def read(data: mujoco.MjData) -> np.ndarray:
        return np.concatenate(
            (data.xmat[1:, [0, 2]].ravel(), data.xpos[torso, 2:3], data.qvel), dtype=np.float64
        )

    return read


# -------------------------------------------------------------------------- quadruped
# URLB generates the quadruped XML with the floor size of each task; the largest
# (run: 20 s * 5 m/s = 100 m) serves all four tasks so one dataset fits them all.
_QUADRUPED_FLOOR = 100.0
_QUADRUPED_JUMP_HEIGHT = 1.0


def _quadruped_upright(f: Features) -> np.ndarray:
    # dm_control's _upright_reward with deviation_angle=0.
    return _tol_linear(f["torso_upright"], 1.0, 2.0, 0.0)


def _quadruped_move(speed: float) -> RewardFn:
    def reward(f: Features) -> np.ndarray:
        move = _tol_linear(f["torso_velocity_x"], speed, speed, 0.5)
        return _quadruped_upright(f) * move

    return reward


def _quadruped_jump(f: Features) -> np.ndarray:
    height = _tol_linear(f["com_height"], _QUADRUPED_JUMP_HEIGHT, _QUADRUPED_JUMP_HEIGHT, 0.5)
    return np.asarray(_quadruped_upright(f) * height)


def _quadruped_features(model: mujoco.MjModel) -> FeatureReader:
    torso = model.body("torso").id
    vel = model.sensor_adr[model.sensor("velocimeter").id]
    com = model.sensor_adr[model.sensor("center_of_mass").id]

    def read(data: mujoco.MjData) -> np.ndarray:
        return np.array([data.xmat[torso, 8], data.sensordata[vel], data.sensordata[com + 2]])

    return read


def _quadruped_observation(model: mujoco.MjModel) -> ObservationReader:
    # egocentric_state (hinge qpos, hinge qvel, act), torso_velocity, torso_upright, imu,
    # force_torque (arcsinh), with the sensors in model order as dm_control selects them.
    hinges = np.flatnonzero(model.jnt_type == mujoco.mjtJoint.mjJNT_HINGE)
    qpos, qvel = model.jnt_qposadr[hinges], model.jnt_dofadr[hinges]
    types = mujoco.mjtSensor
    velocimeter = _sensor_indices(model, np.array([model.sensor("velocimeter").id]))
    imu = _sensor_indices(
        model,
        np.flatnonzero(np.isin(model.sensor_type, [types.mjSENS_GYRO, types.mjSENS_ACCELEROMETER])),
    )
    force_torque = _sensor_indices(
        model, np.flatnonzero(np.isin(model.sensor_type, [types.mjSENS_FORCE, types.mjSENS_TORQUE]))
    )
    torso = model.body("torso").id

    def read(data: mujoco.MjData) -> np.ndarray:
        sensors = data.sensordata
        return np.concatenate(
            (
                data.qpos[qpos],
                data.qvel[qvel],
                data.act,
                sensors[velocimeter],
                data.xmat[torso, 8:9],
                sensors[imu],
                np.arcsinh(sensors[force_torque]),
            ),
            dtype=np.float64,
        )

    return read


def _quadruped_xml() -> tuple[str, Mapping[str, bytes]]:
    return quadruped.make_model(floor_size=_QUADRUPED_FLOOR), common.ASSETS


# ---------------------------------------------------------------------------- cheetah


def _cheetah_move(speed: float, direction: float) -> RewardFn:
    def reward(f: Features) -> np.ndarray:
        return _tol_linear(direction * f["speed"], speed, speed, 0.0)

    return reward


def _cheetah_features(model: mujoco.MjModel) -> FeatureReader:
    vel = model.sensor_adr[model.sensor("torso_subtreelinvel").id]

    def read(data: mujoco.MjData) -> np.ndarray:
        return np.array([data.sensordata[vel]])

    return read


def _cheetah_observation(model: mujoco.MjModel) -> ObservationReader:
    # position without the horizontal coordinate, velocity.
    def read(data: mujoco.MjData) -> np.ndarray:
        return np.concatenate((data.qpos[1:], data.qvel), dtype=np.float64)

    return read


# ----------------------------------------------------------------------------- specs

_PROTOTYPES: dict[str, dm_mujoco.Physics] = {}


def _nominal_physics(name: str, load: Callable[[], dm_mujoco.Physics]) -> dm_mujoco.Physics:
    """The domain's physics as loaded, never stepped: the prototype `build_physics` copies
    (dm_control's XML deprecation warnings silenced)."""
    if name not in _PROTOTYPES:
        previous = absl_logging.get_verbosity()
        absl_logging.set_verbosity(absl_logging.ERROR)
        try:
            _PROTOTYPES[name] = load()
        finally:
            absl_logging.set_verbosity(previous)
    return _PROTOTYPES[name]


@dataclass(frozen=True)
class DomainSpec:
    """Everything rbfm needs to know about one domain."""

    name: str
    obs_dim: int
    # dm_control's observation dict in its own key order, each entry's size: the flat
    # observation's layout (docs/demonstrations.md; tests check it against the task's).
    observation_layout: tuple[tuple[str, int], ...]
    action_dim: int
    physics_dim: int  # length of physics.get_state(): qpos, qvel, act
    time_limit: float  # seconds; with control_timestep this gives 1000 steps
    control_timestep: float
    # The MJCF and its assets: the environment's physics and the planner's model.
    model_xml: Callable[[], tuple[str, Mapping[str, bytes]]]
    physics_class: type[dm_mujoco.Physics]
    make_task: Callable[[np.random.RandomState], base.Task]  # initialisation and observations
    feature_names: tuple[str, ...]
    feature_reader: Callable[[mujoco.MjModel], FeatureReader]
    rewards: Mapping[str, RewardFn]
    observation_reader: Callable[[mujoco.MjModel], ObservationReader]

    @property
    def episode_length(self) -> int:
        """Control steps per episode (1000 in all three domains)."""
        return round(self.time_limit / self.control_timestep)

    @property
    def tasks(self) -> tuple[str, ...]:
        return tuple(self.rewards)

    def build_physics(self) -> dm_mujoco.Physics:
        """A fresh nominal physics: a copy (model and data) of one loaded per process.

        Loading parses and compiles the XML (~100 ms); a copy takes ~10 ms. An evaluation
        grid builds one environment per episode, so loading each one cost more than the
        episode's 1000 cheetah steps (~70 ms).
        """
        return _nominal_physics(self.name, self.load_physics).copy(share_model=False)

    def load_physics(self) -> dm_mujoco.Physics:
        """The domain's physics, parsed and compiled from its MJCF."""
        return self.physics_class.from_xml_string(*self.model_xml())

    def features(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        """Names the columns of an (N, n_features) array of feature rows."""
        return {name: rows[..., i] for i, name in enumerate(self.feature_names)}

    def reward_fn(self, task: str) -> RewardFn:
        if not isinstance(task, str) or task not in self.rewards:
            raise unknown(f"{self.name} task", task, self.tasks)
        return self.rewards[task]


DOMAINS: dict[str, DomainSpec] = {
    "walker": DomainSpec(
        name="walker",
        obs_dim=24,
        observation_layout=(("orientations", 14), ("height", 1), ("velocity", 9)),
        action_dim=6,
        physics_dim=18,
        time_limit=25.0,
        control_timestep=0.025,
        model_xml=walker.get_model_and_assets,
        physics_class=walker.Physics,
        make_task=lambda rng: walker.PlanarWalker(move_speed=0, random=rng),
        feature_names=("torso_height", "torso_upright", "horizontal_velocity", "angmom"),
        feature_reader=_walker_features,
        rewards={
            "stand": _walker_stand,
            "walk": _walker_move(1.0),
            "run": _walker_move(8.0),
            "flip": _walker_flip,
        },
        observation_reader=_walker_observation,
    ),
    "quadruped": DomainSpec(
        name="quadruped",
        obs_dim=78,
        observation_layout=(
            ("egocentric_state", 44),
            ("torso_velocity", 3),
            ("torso_upright", 1),
            ("imu", 6),
            ("force_torque", 24),
        ),
        action_dim=12,
        physics_dim=57,
        time_limit=20.0,
        control_timestep=0.02,
        model_xml=_quadruped_xml,
        physics_class=quadruped.Physics,
        make_task=lambda rng: quadruped.Move(desired_speed=0.5, random=rng),
        feature_names=("torso_upright", "torso_velocity_x", "com_height"),
        feature_reader=_quadruped_features,
        rewards={
            "stand": _quadruped_upright,
            "walk": _quadruped_move(0.5),
            "run": _quadruped_move(5.0),
            "jump": _quadruped_jump,
        },
        observation_reader=_quadruped_observation,
    ),
    "cheetah": DomainSpec(
        name="cheetah",
        obs_dim=17,
        observation_layout=(("position", 8), ("velocity", 9)),
        action_dim=6,
        physics_dim=18,
        time_limit=10.0,
        control_timestep=0.01,  # the physics timestep: action repeat 1
        model_xml=cheetah.get_model_and_assets,
        physics_class=cheetah.Physics,
        make_task=lambda rng: cheetah.Cheetah(random=rng),
        feature_names=("speed",),
        feature_reader=_cheetah_features,
        rewards={
            "walk": _cheetah_move(2.0, 1.0),
            "run": _cheetah_move(10.0, 1.0),
            "walk_backward": _cheetah_move(2.0, -1.0),
            "run_backward": _cheetah_move(10.0, -1.0),
        },
        observation_reader=_cheetah_observation,
    ),
}

TASKS: dict[str, tuple[str, ...]] = {name: spec.tasks for name, spec in DOMAINS.items()}


def get_domain(name: str) -> DomainSpec:
    """Returns the spec of a domain, or a clear error listing the valid ones."""
    if not isinstance(name, str) or name not in DOMAINS:  # a list would be unhashable
        raise unknown("domain", name, DOMAINS)
    return DOMAINS[name]


class RewardTask(base.Task):  # type: ignore[misc]
    """A dm_control task: the domain's own initialisation and observations, our reward."""

    def __init__(self, domain: DomainSpec, task: str, random: np.random.RandomState) -> None:
        self._inner = domain.make_task(random)
        super().__init__(random=self._inner.random)
        self._domain = domain
        self._reward = domain.reward_fn(task)
        self._read: FeatureReader | None = None

    def reseed(self, random: np.random.RandomState) -> None:
        """Replaces the random state that samples initial states (dm_control keeps it private)."""
        self._inner._random = random
        self._random = random

    def initialize_episode(self, physics: dm_mujoco.Physics) -> None:
        self._inner.initialize_episode(physics)

    def get_observation(self, physics: dm_mujoco.Physics) -> Mapping[str, np.ndarray]:
        return self._inner.get_observation(physics)  # type: ignore[no-any-return]

    def get_reward(self, physics: dm_mujoco.Physics) -> float:
        if self._read is None:
            self._read = self._domain.feature_reader(physics.model.ptr)
        # A one-row batch, not scalars: numpy's scalar `**` rounds differently from its
        # array `**` in the last bit, and evaluation computes rewards of many rows at once.
        features = self._domain.features(self._read(physics.data.ptr)[None])
        return float(self._reward(features)[0])


def make_control_env(
    domain: DomainSpec, task: str, physics: dm_mujoco.Physics, seed: int
) -> control.Environment:
    """The dm_control environment of one task on an already built (maybe perturbed) physics."""
    return control.Environment(
        physics,
        RewardTask(domain, task, np.random.RandomState(seed)),
        time_limit=domain.time_limit,
        control_timestep=domain.control_timestep,
    )


def checked_tasks(domain: str, tasks: list[str]) -> list[str]:
    """`tasks` if each is one of the domain's, else a ConfigError naming the valid ones."""
    for task in tasks:
        if task not in TASKS[domain]:
            raise ConfigError(
                f"task: unknown {domain} task {task!r}; valid: {', '.join(TASKS[domain])}"
            )
    return tasks
