"""Domains and tasks: shapes, episode length, and rewards against dm_control's own."""

from __future__ import annotations

import numpy as np
import pytest
from dm_control import suite
from dm_control.suite import quadruped
from dm_control.utils import rewards

from rbfm.envs import TASKS, make_env
from rbfm.envs.domains import get_domain
from rbfm.errors import ConfigError

ALL_TASKS = [(d, t) for d, tasks in TASKS.items() for t in tasks]
OBS_DIMS = {"walker": 24, "quadruped": 78, "cheetah": 17}


def test_twelve_tasks_as_in_the_paper() -> None:
    assert TASKS == {
        "walker": ("stand", "walk", "run", "flip"),
        "quadruped": ("stand", "walk", "run", "jump"),
        "cheetah": ("walk", "run", "walk_backward", "run_backward"),
    }


@pytest.mark.parametrize(("domain", "task"), ALL_TASKS)
def test_every_task_constructs_and_steps(domain: str, task: str) -> None:
    env = make_env(domain, task, seed=1)
    ts = env.reset()
    assert ts.observation.shape == (OBS_DIMS[domain],) == env.observation_spec().shape
    assert ts.observation.dtype == np.float32
    rng = np.random.default_rng(0)
    spec = env.action_spec()
    for _ in range(20):
        ts = env.step(rng.uniform(spec.minimum, spec.maximum))
        assert 0.0 <= ts.reward <= 1.0
        assert np.isfinite(ts.observation).all()
    assert env.perturbation is None and env.level is None


@pytest.mark.parametrize("domain", list(TASKS))
def test_episodes_last_1000_steps(domain: str) -> None:
    env = make_env(domain, TASKS[domain][0])
    env.reset()
    zeros = np.zeros(env.action_spec().shape)
    steps = 0
    while not env.step(zeros).last():
        steps += 1
    assert steps + 1 == 1000


SUITE_TASKS = [
    ("walker", "stand"),
    ("walker", "walk"),
    ("walker", "run"),
    ("quadruped", "walk"),
    ("quadruped", "run"),
    ("cheetah", "run"),
]


@pytest.mark.parametrize(("domain", "task"), SUITE_TASKS)
def test_suite_tasks_equal_dm_control(domain: str, task: str) -> None:
    ours = make_env(domain, task, seed=3)
    theirs = suite.load(domain, task, task_kwargs={"random": 3})
    ours.reset()
    theirs.reset()
    rng = np.random.default_rng(1)
    for _ in range(300):
        a = rng.uniform(-1, 1, ours.action_spec().shape)
        x, y = ours.step(a), theirs.step(a)
        assert x.reward == y.reward
        flat = np.concatenate([np.ravel(v) for v in y.observation.values()]).astype(np.float32)
        np.testing.assert_array_equal(x.observation, flat)
    # The layout users are told to follow is dm_control's own, key by key.
    layout = tuple((k, int(np.prod(v.shape))) for k, v in theirs.observation_spec().items())
    assert get_domain(domain).observation_layout == layout


def _drive(domain: str, task: str, steps: int = 300):  # type: ignore[no-untyped-def]
    env = make_env(domain, task, seed=5)
    env.reset()
    rng = np.random.default_rng(2)
    for _ in range(steps):
        ts = env.step(rng.uniform(-1, 1, env.action_spec().shape))
        yield env.physics, ts.reward


def test_walker_flip_reward_formula() -> None:
    seen = []
    for physics, r in _drive("walker", "flip"):
        stand = rewards.tolerance(physics.torso_height(), bounds=(1.2, float("inf")), margin=0.6)
        stand = (3 * stand + (1 + physics.torso_upright()) / 2) / 4
        angmom = physics.named.data.subtree_angmom["torso"][1]
        spin = rewards.tolerance(
            angmom, bounds=(5, float("inf")), margin=5, value_at_margin=0, sigmoid="linear"
        )
        assert r == pytest.approx(stand * (1 + 5 * spin) / 6, abs=1e-12)
        seen.append(spin)
    assert max(seen) > 0  # the angular-momentum term was exercised


def test_quadruped_stand_and_jump_reward_formulas() -> None:
    stand = dict(_drive("quadruped", "stand"))
    heights = []
    for physics, r in _drive("quadruped", "jump"):
        upright = quadruped._upright_reward(physics)
        height = physics.named.data.sensordata["center_of_mass"][2]
        jump = rewards.tolerance(
            height, bounds=(1.0, float("inf")), margin=1.0, value_at_margin=0.5, sigmoid="linear"
        )
        assert r == pytest.approx(upright * jump, abs=1e-12)
        heights.append(height)
    assert all(0 < r <= 1 for r in stand.values())
    assert np.ptp(heights) > 0


@pytest.mark.parametrize(
    ("task", "target", "sign"),
    [
        ("walk", 2, 1),
        ("run", 10, 1),
        ("walk_backward", 2, -1),
        ("run_backward", 10, -1),
    ],
)
def test_cheetah_speed_rewards(task: str, target: float, sign: float) -> None:
    values = []
    for physics, r in _drive("cheetah", task):
        expected = rewards.tolerance(
            sign * physics.speed(),
            bounds=(target, float("inf")),
            margin=target,
            value_at_margin=0,
            sigmoid="linear",
        )
        assert r == pytest.approx(expected, abs=1e-12)
        values.append(r)
    assert max(values) > 0


@pytest.mark.parametrize(
    ("domain", "task", "message"),
    [
        ("hopper", "hop", "valid choices: walker, quadruped, cheetah"),
        ("walker", "jump", "valid choices: stand, walk, run, flip"),
    ],
)
def test_unknown_names_list_the_valid_ones(domain: str, task: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        make_env(domain, task)


def _dynamics(domain: str) -> list[tuple[str | None, float | None]]:
    from rbfm.envs import PERTURBATIONS, get_perturbation

    families = [f for d, f in PERTURBATIONS if d == domain]
    return [(None, None)] + [(f, get_perturbation(domain, f).levels[-1]) for f in families]


@pytest.mark.parametrize("domain", list(TASKS))
def test_advance_equals_step_bitwise_under_every_family(domain: str) -> None:
    """The evaluation's fast path (advance, observation, features) against dm_control's
    step: the same observations, rewards and episode end, nominal and at each family's
    extreme level, through a whole episode; a physics failure raises in both."""
    from dm_control.rl.control import PhysicsError

    task = TASKS[domain][-1]
    rng = np.random.default_rng(0)
    for family, level in _dynamics(domain):
        ref, fast = make_env(domain, task, family, level), make_env(domain, task, family, level)
        reward_fn = fast.spec.reward_fn(task)
        first = ref.reset()
        fast.reset()
        assert np.array_equal(first.observation, fast.observation().astype(np.float32))
        last = False
        while not last:
            a = rng.uniform(-1, 1, ref.action_spec().shape).astype(np.float32)
            ts = ref.step(a)
            last = fast.advance(a)
            assert np.array_equal(ts.observation, fast.observation().astype(np.float32))
            assert ts.reward == float(reward_fn(fast.spec.features(fast.features()[None]))[0])
            assert ts.last() == last
    nan = np.full(ref.action_spec().shape, np.nan)
    ref.reset()
    fast.reset()
    with pytest.raises(PhysicsError, match="BADCTRL"):
        ref.step(nan)
    with pytest.raises(PhysicsError, match="BADCTRL"):
        fast.advance(nan)
