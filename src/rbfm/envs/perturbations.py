"""The paper's nine physics-perturbation families (Appendix C.3), as a registry.

Each entry names the MuJoCo field it changes, its nominal value, the paper's range
in the paper's own units and six evenly spaced default sweep levels. Perturbations
are applied once to a freshly loaded (nominal) model; MuJoCo model fields survive
`reset()`, so the perturbation holds for every episode of the environment.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import mujoco
import numpy as np

from rbfm.errors import ConfigError, unknown

ApplyFn = Callable[[mujoco.MjModel, mujoco.MjData, float], None]

# The family name of unperturbed physics in plans, tables and task-vector records.
NOMINAL = "none"

_WALKER_LIMB_JOINTS = (
    "right_hip",
    "right_knee",
    "right_ankle",
    "left_hip",
    "left_knee",
    "left_ankle",
)
_CHEETAH_LIMB_JOINTS = ("bthigh", "bshin", "bfoot", "fthigh", "fshin", "ffoot")


@dataclass(frozen=True)
class Perturbation:
    """One perturbation family of one domain."""

    domain: str
    family: str
    field: str  # the MuJoCo model field written
    unit: str
    nominal: float  # the level at which the model is unchanged
    extreme: float  # the paper's far end of the range
    description: str
    apply_fn: ApplyFn

    @property
    def levels(self) -> tuple[float, ...]:
        """Default sweep: six evenly spaced levels from nominal to the extreme."""
        return tuple(float(x) for x in np.linspace(self.nominal, self.extreme, 6))

    @property
    def bounds(self) -> tuple[float, float]:
        return (min(self.nominal, self.extreme), max(self.nominal, self.extreme))

    def check(self, level: float) -> float:
        low, high = self.bounds
        if isinstance(level, np.floating | np.integer):
            level = float(level)
        if isinstance(level, bool) or not isinstance(level, int | float):
            raise ConfigError(
                f"level {level!r} of {self.domain}/{self.family} is not a number (valid: a "
                f"number in [{low:g}, {high:g}], {self.unit})"
            )
        if not np.isfinite(level) or not low <= level <= high:
            raise ConfigError(
                f"level {level} is outside the range of {self.domain}/{self.family} "
                f"[{low:g}, {high:g}] ({self.unit}); default levels: "
                + ", ".join(f"{x:g}" for x in self.levels)
            )
        return float(level)

    def apply(self, model: mujoco.MjModel, data: mujoco.MjData, level: float) -> None:
        """Writes the perturbation into a nominal model."""
        self.apply_fn(model, data, self.check(level))


def _dof_ids(model: mujoco.MjModel, joints: tuple[str, ...]) -> list[int]:
    return [int(model.jnt_dofadr[model.joint(name).id]) for name in joints]


def _gravity_scale(model: mujoco.MjModel, data: mujoco.MjData, percent: float) -> None:
    model.opt.gravity[2] *= 1 + percent / 100


def _body_mass_scale(model: mujoco.MjModel, data: mujoco.MjData, percent: float) -> None:
    model.body_mass[1:] *= 1 + percent / 100
    # Subtree masses (and so the speed sensors the rewards read) are derived at compile
    # time; without mj_setConst walker's speed rewards use stale masses.
    mujoco.mj_setConst(model, data)


def _friction(joints: tuple[str, ...]) -> ApplyFn:
    def apply(model: mujoco.MjModel, data: mujoco.MjData, newton_metres: float) -> None:
        model.dof_frictionloss[_dof_ids(model, joints)] = newton_metres

    return apply


def _tilted_gravity(model: mujoco.MjModel, data: mujoco.MjData, accel: float) -> None:
    model.opt.gravity[0] = accel


def _floor_timeconst(model: mujoco.MjModel, data: mujoco.MjData, timeconst: float) -> None:
    floor = model.geom("floor").id
    model.geom_solref[floor, 0] = timeconst
    # MuJoCo mixes the solref of the two geoms in contact; every quadruped geom has
    # timeconst 0.01, so without priority the floor's setting is diluted (0.25 -> ~0.13).
    model.geom_priority[floor] = int(model.geom_priority.max()) + 1


def _ctrlrange(model: mujoco.MjModel, data: mujoco.MjData, bound: float) -> None:
    # Clip the command channel to [-v, v] on top of each actuator's own limits: the
    # quadruped's extend actuators are nominally [-0.8, 0.8] and must not widen at v=1.
    model.actuator_ctrlrange[:, 0] = np.maximum(model.actuator_ctrlrange[:, 0], -bound)
    model.actuator_ctrlrange[:, 1] = np.minimum(model.actuator_ctrlrange[:, 1], bound)


def _gear_scale(model: mujoco.MjModel, data: mujoco.MjData, percent: float) -> None:
    model.actuator_gear[:, 0] *= 1 - percent / 100


def _range_of_motion(model: mujoco.MjModel, data: mujoco.MjData, percent: float) -> None:
    ids = [model.joint(name).id for name in _CHEETAH_LIMB_JOINTS]
    low, high = model.jnt_range[ids, 0], model.jnt_range[ids, 1]
    centre, half = (low + high) / 2, (high - low) / 2 * percent / 100
    model.jnt_range[ids, 0] = centre - half
    model.jnt_range[ids, 1] = centre + half


_ENTRIES = (
    Perturbation(
        domain="walker",
        family="gravity",
        field="opt.gravity[2]",
        unit="% increase",
        nominal=0.0,
        extreme=35.0,
        description="vertical gravity scaled by (1 + level/100)",
        apply_fn=_gravity_scale,
    ),
    Perturbation(
        domain="walker",
        family="body_mass",
        field="body_mass[1:]",
        unit="% increase",
        nominal=0.0,
        extreme=100.0,
        description="all non-world body masses scaled by (1 + level/100), then mj_setConst",
        apply_fn=_body_mass_scale,
    ),
    Perturbation(
        domain="walker",
        family="joint_friction",
        field="dof_frictionloss (6 limb joints)",
        unit="Nm",
        nominal=0.0,
        extreme=30.0,
        description="constant friction loss on hips, knees and ankles",
        apply_fn=_friction(_WALKER_LIMB_JOINTS),
    ),
    Perturbation(
        domain="quadruped",
        family="tilted_gravity",
        field="opt.gravity[0]",
        unit="m/s^2",
        nominal=0.0,
        extreme=7.5,
        description="lateral gravity along world x; the vertical component stays -9.81",
        apply_fn=_tilted_gravity,
    ),
    Perturbation(
        domain="quadruped",
        family="contact_stiffness",
        field="geom_solref[floor, 0]",
        unit="s",
        nominal=0.01,
        extreme=0.25,
        description="floor contact time constant, floor given geom priority",
        apply_fn=_floor_timeconst,
    ),
    Perturbation(
        domain="quadruped",
        family="actuator_ctrlrange",
        field="actuator_ctrlrange",
        unit="v",
        nominal=1.0,
        extreme=0.3,
        description="every actuator's control range clipped to [-v, v]",
        apply_fn=_ctrlrange,
    ),
    Perturbation(
        domain="cheetah",
        family="actuator_strength",
        field="actuator_gear[:, 0]",
        unit="% gear reduction",
        nominal=0.0,
        extreme=30.0,
        description="all six gear ratios scaled by (1 - level/100)",
        apply_fn=_gear_scale,
    ),
    Perturbation(
        domain="cheetah",
        family="joint_friction",
        field="dof_frictionloss (6 limb joints)",
        unit="Nm",
        nominal=0.0,
        extreme=25.0,
        description="constant friction loss on the six leg joints",
        apply_fn=_friction(_CHEETAH_LIMB_JOINTS),
    ),
    Perturbation(
        domain="cheetah",
        family="range_of_motion",
        field="jnt_range (6 limb joints)",
        unit="% retained",
        nominal=100.0,
        extreme=60.0,
        description="each leg joint's range shrunk about its centre to level% of its width",
        apply_fn=_range_of_motion,
    ),
)

PERTURBATIONS: dict[tuple[str, str], Perturbation] = {(p.domain, p.family): p for p in _ENTRIES}


def families(domain: str) -> tuple[str, ...]:
    """The perturbation families defined for a domain."""
    return tuple(family for (d, family) in PERTURBATIONS if d == domain)


def get_perturbation(domain: str, family: str) -> Perturbation:
    """Looks up a family, or raises an error naming the valid ones for this domain."""
    if (domain, family) not in PERTURBATIONS:
        others = [d for (d, f) in PERTURBATIONS if f == family]
        hint = f" ({family!r} exists for {', '.join(others)})" if others else ""
        err = unknown(f"perturbation family for {domain}", family, families(domain))
        raise ConfigError(str(err) + hint)
    return PERTURBATIONS[(domain, family)]


def check_pair(domain: str, family: str | None, level: float | None) -> None:
    """A family and a level go together (neither: nominal physics); the level in the
    family's range. The message names what is missing and what would do."""
    if family is not None and level is None:
        p = get_perturbation(domain, family)
        sweep = ", ".join(f"{x:g}" for x in p.levels)
        raise ConfigError(f"perturbation {family!r} needs a level ({p.unit}; its sweep: {sweep})")
    if family is None and level is not None:
        raise ConfigError(
            f"level {level:g} needs a perturbation family ({domain}: {', '.join(families(domain))})"
        )
    if family is not None and level is not None:
        get_perturbation(domain, family).check(level)


def listing() -> str:
    """Every domain with its tasks, and its perturbation families: unit, the physics
    field each scales or sets, and the sweep's six levels (`rbfm envs`)."""
    from rbfm.envs.domains import DOMAINS

    lines = []
    for name, spec in DOMAINS.items():
        lines.append(
            f"{name}: obs {spec.obs_dim} ("
            + ", ".join(f"{key} {size}" for key, size in spec.observation_layout)
            + f"), action {spec.action_dim}, "
            f"{spec.episode_length} steps; tasks: {', '.join(spec.tasks)}"
        )
        for (domain, family), p in PERTURBATIONS.items():
            if domain == name:
                levels = ", ".join(f"{x:g}" for x in p.levels)
                lines.append(f"  {family:<19} {p.unit:<17} {p.field:<34} levels: {levels}")
    return "\n".join(lines)
