"""The MPPI demonstrator: its reward equals the environment's, it beats random actions,
it is deterministic for a seed, and its demonstrations resume and load like any."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rbfm.envs import make_env
from rbfm.errors import ConfigError
from rbfm.inference import load_demos
from rbfm.planning import TINY, MPPIPlanner, mpc_config
from rbfm.planning import demos as planner_demos
from rbfm.planning.demos import mpc_demos, planned_episode
from rbfm.planning.mppi import physics_state


@pytest.mark.parametrize(
    ("domain", "task", "dynamics"),
    [
        ("walker", "flip", None),
        ("quadruped", "jump", {"tilted_gravity": 6.0}),
        ("cheetah", "run_backward", {"joint_friction": 20.0}),
    ],
)
def test_the_planners_returns_are_the_environments_bit_for_bit(
    domain: str, task: str, dynamics: dict[str, float] | None
) -> None:
    env = make_env(domain, task, seed=3, dynamics=dynamics)
    env.reset()
    planner = MPPIPlanner(domain, task, mpc_config(domain, {"horizon": 12}), dynamics)
    actions = np.random.default_rng(0).uniform(-1, 1, (12, env.action_spec().shape[0]))
    state = physics_state(env.physics.model.ptr, env.physics.data.ptr)
    planned = planner.returns(state, actions[None])[0]
    stepped = sum(env.step(a).reward for a in actions)
    assert planned == pytest.approx(stepped, rel=1e-12, abs=1e-12)


def test_the_planner_beats_random_actions_and_is_deterministic() -> None:
    a = planned_episode("cheetah", "run", TINY, 0, seed=0, steps=60)
    b = planned_episode("cheetah", "run", TINY, 0, seed=0, steps=60)
    np.testing.assert_array_equal(a.action, b.action)
    env = make_env("cheetah", "run", seed=0)
    env.reset()
    rng = np.random.default_rng(0)
    random = sum(env.step(rng.uniform(-1, 1, 6)).reward for _ in range(60))
    assert a.total > 3 * random and a.total > 1.0
    assert planned_episode("cheetah", "run", TINY, 1, seed=0, steps=60).total != a.total


def test_demonstrations_resume_episode_by_episode_and_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "mpc.npz"
    whole = mpc_demos("cheetah", "walk", 2, tmp_path / "whole.npz", TINY, steps=20)
    # An interrupted run: episode 0 kept, then the process died.
    parts = out.with_name(out.name + ".parts")
    planner_demos.planned_episodes("cheetah", "walk", TINY, 1, parts, steps=20)
    real = planner_demos.planned_episode

    def only_new(*args: object, **kwargs: object) -> object:
        assert args[3] == 1, "episode 0 was planned again"
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(planner_demos, "planned_episode", only_new)
    resumed = mpc_demos("cheetah", "walk", 2, out, TINY, steps=20)
    np.testing.assert_array_equal(resumed.action, whole.action)
    assert not parts.exists()
    loaded = load_demos(out)
    assert loaded.meta["source"] == "mpc" and loaded.meta["mpc"]["samples"] == TINY.samples
    np.testing.assert_allclose(loaded.returns, whole.returns)
    assert loaded.num_episodes == 2 and list(loaded.lengths) == [20, 20]


def test_bad_settings_are_refused_before_planning() -> None:
    with pytest.raises(ConfigError, match=r"mpc samples: 0 is out of range \(valid: >= 2\)"):
        mpc_config("walker", {"samples": 0})
    with pytest.raises(ConfigError, match=r"mpc horizon: 2.5 is not an integer"):
        mpc_config("walker", {"horizon": 2.5})
    with pytest.raises(ConfigError, match="unknown mpc setting 'sample'"):
        mpc_config("walker", {"sample": 3})
    with pytest.raises(ConfigError, match="unknown cheetah task"):
        MPPIPlanner("cheetah", "fly", TINY)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--expert", "oracle"], "invalid choice: 'oracle'"),
        (["--task", "fly"], "unknown cheetah task 'fly'"),
        (["--mpc", "samples=0"], "mpc samples: 0 is out of range"),
        (["--mpc", "horizon=-1"], "mpc horizon: -1 is out of range"),
    ],
)
def test_the_command_line_says_what_is_wrong_in_one_line(
    args: list[str], message: str, tmp_path: Path
) -> None:
    base = ["--expert", "mpc", "--domain", "cheetah", "--task", "run", "--episodes", "1"]
    cmd = [sys.executable, "-m", "rbfm.cli", "demos", *base, "--out", str(tmp_path / "d.npz")]
    run = subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and message in run.stderr
    assert "Traceback" not in run.stderr and not (tmp_path / "d.npz").exists()
