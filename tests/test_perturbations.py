"""Perturbations set exactly the described MuJoCo fields, change dynamics and persist."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from rbfm.envs import PERTURBATIONS, families, make_env
from rbfm.errors import ConfigError

CHEETAH_GEAR = np.array([120.0, 90, 60, 90, 60, 30])
CHEETAH_LIMBS = ["bthigh", "bshin", "bfoot", "fthigh", "fshin", "ffoot"]


def test_registry_matches_the_paper() -> None:
    expected = {
        ("walker", "gravity"): (0, 35),
        ("walker", "body_mass"): (0, 100),
        ("walker", "joint_friction"): (0, 30),
        ("quadruped", "tilted_gravity"): (0, 7.5),
        ("quadruped", "contact_stiffness"): (0.01, 0.25),
        ("quadruped", "actuator_ctrlrange"): (1.0, 0.3),
        ("cheetah", "actuator_strength"): (0, 30),
        ("cheetah", "joint_friction"): (0, 25),
        ("cheetah", "range_of_motion"): (100, 60),
    }
    assert {k: (p.nominal, p.extreme) for k, p in PERTURBATIONS.items()} == expected
    for p in PERTURBATIONS.values():
        assert len(p.levels) == 6 and p.levels[0] == p.nominal and p.levels[-1] == p.extreme
        assert np.allclose(np.diff(p.levels), (p.extreme - p.nominal) / 5)


def _model(domain: str, family: str | None = None, level: float | None = None) -> mujoco.MjModel:
    task = {"walker": "walk", "quadruped": "walk", "cheetah": "run"}[domain]
    return make_env(domain, task, family, level).physics.model.ptr


def test_walker_gravity() -> None:
    np.testing.assert_allclose(_model("walker", "gravity", 35).opt.gravity, [0, 0, -9.81 * 1.35])


def test_walker_body_mass_and_derived_subtree_masses() -> None:
    nominal, heavy = _model("walker"), _model("walker", "body_mass", 100)
    np.testing.assert_allclose(heavy.body_mass[1:], 2 * nominal.body_mass[1:])
    assert heavy.body_mass[0] == nominal.body_mass[0] == 0
    # mj_setConst ran: the derived subtree masses doubled too.
    np.testing.assert_allclose(heavy.body_subtreemass, 2 * nominal.body_subtreemass)


@pytest.mark.parametrize(("domain", "level"), [("walker", 30.0), ("cheetah", 25.0)])
def test_joint_friction_on_limb_joints_only(domain: str, level: float) -> None:
    m = _model(domain, "joint_friction", level)
    np.testing.assert_array_equal(m.dof_frictionloss, [0, 0, 0] + [level] * 6)


def test_quadruped_tilted_gravity() -> None:
    np.testing.assert_allclose(
        _model("quadruped", "tilted_gravity", 7.5).opt.gravity, [7.5, 0, -9.81]
    )


def test_quadruped_contact_stiffness_uses_the_floor_setting() -> None:
    env = make_env("quadruped", "stand", "contact_stiffness", 0.25, seed=0)
    m = env.physics.model.ptr
    floor = m.geom("floor").id
    assert m.geom_solref[floor, 0] == 0.25
    assert (np.delete(m.geom_solref[:, 0], floor) == 0.01).all()
    assert m.geom_priority[floor] > np.delete(m.geom_priority, floor).max()
    env.reset()
    data = env.physics.data.ptr
    floor_contacts = []
    for _ in range(200):
        env.step(np.zeros(12))
        floor_contacts += [
            c.solref[0] for c in data.contact[: data.ncon] if floor in (c.geom1, c.geom2)
        ]
    # Without the priority MuJoCo would mix 0.25 with the body geoms' 0.01.
    assert floor_contacts and np.allclose(floor_contacts, 0.25)


def test_quadruped_ctrlrange_clips_and_shows_in_action_spec() -> None:
    env = make_env("quadruped", "walk", "actuator_ctrlrange", 0.3)
    np.testing.assert_array_equal(env.physics.model.ptr.actuator_ctrlrange, [[-0.3, 0.3]] * 12)
    assert env.action_spec().maximum.max() == pytest.approx(0.3)


def test_quadruped_ctrlrange_at_nominal_keeps_the_nominal_dynamics() -> None:
    # Actuators keep their own tighter limits (extend is [-0.8, 0.8]) at v = 1.
    a, b = (
        make_env("quadruped", "walk", *args, seed=4) for args in [(), ("actuator_ctrlrange", 1.0)]
    )
    assert b.physics.model.ptr.actuator_ctrlrange[2].tolist() == [-0.8, 0.8]
    a.reset()
    b.reset()
    rng = np.random.default_rng(0)
    for _ in range(200):
        act = rng.uniform(-1, 1, 12)
        np.testing.assert_array_equal(a.step(act).observation, b.step(act).observation)


def test_cheetah_actuator_strength() -> None:
    np.testing.assert_allclose(
        _model("cheetah", "actuator_strength", 30).actuator_gear[:, 0], 0.7 * CHEETAH_GEAR
    )


def test_cheetah_range_of_motion() -> None:
    nominal, shrunk = _model("cheetah"), _model("cheetah", "range_of_motion", 60)
    for name in CHEETAH_LIMBS:
        lo, hi = nominal.jnt_range[nominal.joint(name).id]
        c, h = (lo + hi) / 2, (hi - lo) / 2 * 0.6
        np.testing.assert_allclose(shrunk.jnt_range[shrunk.joint(name).id], [c - h, c + h])
    np.testing.assert_array_equal(shrunk.jnt_range[:3], nominal.jnt_range[:3])


def _rollout(env, actions: np.ndarray) -> np.ndarray:  # type: ignore[no-untyped-def]
    env.reset()
    return np.stack([env.step(a).observation for a in actions])


@pytest.mark.parametrize("key", list(PERTURBATIONS))
def test_extreme_level_changes_trajectory_and_persists_across_resets(key: tuple[str, str]) -> None:
    domain, family = key
    p = PERTURBATIONS[key]
    task = {"walker": "walk", "quadruped": "walk", "cheetah": "run"}[domain]
    nominal = make_env(domain, task, seed=7)
    perturbed = make_env(domain, task, family, p.extreme, seed=7)
    assert (perturbed.perturbation, perturbed.level) == (family, p.extreme)
    assert family in perturbed.describe()
    before = np.array(perturbed.physics.model.ptr.opt.gravity), perturbed.physics.model.ptr
    fields = {
        k: np.array(getattr(before[1], k))
        for k in (
            "body_mass",
            "dof_frictionloss",
            "geom_solref",
            "actuator_ctrlrange",
            "actuator_gear",
            "jnt_range",
        )
    }
    actions = np.random.default_rng(0).uniform(-1, 1, (150, *nominal.action_spec().shape))
    for reseed in (7, 7, 8):  # several episodes, including reseeded resets
        nominal.reseed(reseed)
        perturbed.reseed(reseed)
        assert not np.allclose(_rollout(nominal, actions), _rollout(perturbed, actions))
    m = perturbed.physics.model.ptr
    np.testing.assert_array_equal(m.opt.gravity, before[0])
    for k, v in fields.items():
        np.testing.assert_array_equal(getattr(m, k), v)


def test_perturbation_survives_the_automatic_reset_at_episode_end() -> None:
    env = make_env("cheetah", "run", "actuator_strength", 30.0)
    env.reset()
    while not env.step(np.zeros(6)).last():
        pass
    assert env.step(np.zeros(6)).first()  # dm_env resets on the step after the last
    np.testing.assert_allclose(env.physics.model.ptr.actuator_gear[:, 0], 0.7 * CHEETAH_GEAR)


def test_unknown_family_lists_valid_ones() -> None:
    with pytest.raises(ConfigError, match="actuator_strength, joint_friction, range_of_motion"):
        make_env("cheetah", "run", "wind", 1.0)
    assert families("walker") == ("gravity", "body_mass", "joint_friction")


def test_family_of_another_domain_is_named() -> None:
    with pytest.raises(ConfigError, match="exists for quadruped"):
        make_env("cheetah", "run", "tilted_gravity", 1.0)


@pytest.mark.parametrize(
    ("family", "level"),
    [("joint_friction", 26.0), ("range_of_motion", 59.0), ("actuator_strength", float("nan"))],
)
def test_out_of_range_levels_are_refused(family: str, level: float) -> None:
    with pytest.raises(ConfigError, match="outside the range"):
        make_env("cheetah", "run", family, level)


def test_family_and_level_go_together() -> None:
    with pytest.raises(ConfigError, match="'joint_friction' needs a level"):
        make_env("cheetah", "run", "joint_friction")
    with pytest.raises(ConfigError, match="level 5 needs a perturbation family"):
        make_env("cheetah", "run", None, 5.0)


@pytest.mark.parametrize("key", PERTURBATIONS)
def test_environments_copied_from_the_prototype_equal_freshly_loaded_ones(
    key: tuple[str, str],
) -> None:
    """build_physics copies one loaded physics per process: bitwise the same episodes as
    a physics loaded from the XML, under every family."""
    from rbfm.envs.domains import get_domain, make_control_env

    domain, family = key
    pert = PERTURBATIONS[key]
    spec = get_domain(domain)
    make_env(domain, spec.tasks[0])  # the prototype exists before the copies
    copied = make_env(domain, spec.tasks[0], family, pert.extreme)
    fresh_physics = spec.load_physics()
    pert.apply(fresh_physics.model.ptr, fresh_physics.data.ptr, pert.extreme)
    fresh = make_control_env(spec, spec.tasks[0], fresh_physics, 0)
    copied.reseed(7)
    fresh.task.reseed(np.random.RandomState(np.random.MT19937(7)))
    a, b = copied.reset(), fresh.reset()
    np.testing.assert_array_equal(copied.physics.get_state(), fresh.physics.get_state())
    actions = np.random.default_rng(0).uniform(-1, 1, (100, spec.action_dim))
    for action in actions:
        a, b = copied.step(action), fresh.step(action)
        assert a.reward == b.reward
    np.testing.assert_array_equal(copied.physics.get_state(), fresh.physics.get_state())
    # The perturbation went into the copy's own model: the prototype stays nominal.
    nominal, loaded = make_env(domain, spec.tasks[0]).physics.model, spec.load_physics().model
    for field in ("body_mass", "dof_frictionloss", "actuator_gear", "jnt_range", "geom_solref"):
        np.testing.assert_array_equal(getattr(nominal, field), getattr(loaded, field))
    np.testing.assert_array_equal(nominal.actuator_ctrlrange, loaded.actuator_ctrlrange)
    np.testing.assert_array_equal(nominal.opt.gravity, loaded.opt.gravity)
