"""The MPPI demonstrator: its reward equals the environment's, it beats random actions,
it is deterministic for a seed, and its demonstrations resume and load like any."""

from __future__ import annotations

import math
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from rbfm.cli import main
from rbfm.envs import make_env
from rbfm.errors import ConfigError, DatasetError
from rbfm.inference import load_demos
from rbfm.planning import TINY, MPPIPlanner, mpc_config
from rbfm.planning import demos as planner_demos
from rbfm.planning.demos import mpc_demos, planned_episode
from rbfm.planning.mppi import PlannedEpisode, physics_state


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
    with pytest.raises(ConfigError, match=r"mpc\.samples: 0 is out of range \(valid: an integer"):
        mpc_config("walker", {"samples": 0})
    with pytest.raises(ConfigError, match=r"mpc: no field sample \(valid: horizon, noise, "):
        mpc_config("walker", {"sample": 3})
    with pytest.raises(ConfigError, match="unknown cheetah task"):
        MPPIPlanner("cheetah", "fly", TINY)
    with pytest.raises(ConfigError, match=r"mpc\.seed: -1 is out of range"):
        MPPIPlanner("cheetah", "run", TINY, seed=-1)
    with pytest.raises(ConfigError, match=r"mpc\.index: -1 is out of range"):
        planned_episode("cheetah", "run", TINY, -1)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"episodes": 1.5}, r"mpc\.episodes: 1\.5 is not an integer"),
        ({"episodes": "2"}, r"mpc\.episodes: '2' is not a number"),
        ({"episodes": True}, r"mpc\.episodes: True is not a number"),
        # An episode of one step holds no transition: refused before any is planned.
        ({"steps": 1}, r"mpc\.steps: 1 is out of range \(valid: an integer in \[2, inf\)\)"),
        ({"steps": 0}, r"mpc\.steps: 0 is out of range"),
    ],
)
def test_planner_counts_are_refused_before_any_part_is_written(
    tmp_path: Path, given: dict[str, object], message: str
) -> None:
    out = tmp_path / "demos.npz"
    args = {"episodes": 1, "steps": None} | given
    with pytest.raises(ConfigError, match=message):
        mpc_demos("cheetah", "run", args["episodes"], out, TINY, steps=args["steps"])  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


# The process itself: argparse's refusal and rbfm's, each an exit status 2 without a
# traceback (the others are refused in this one, below).
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--expert", "oracle"], "invalid choice: 'oracle'"),
        (["--mpc", "samples=0"], "mpc.samples: 0 is out of range"),
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


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"samples": math.nan},
            "mpc.samples: nan is out of range (valid: an integer in [2, 1024])",
        ),
        ({"horizon": math.inf}, "mpc.horizon: inf is out of range (valid: an integer in [1, 250])"),
        ({"samples": 1e18}, "mpc.samples: 1000000000000000000 is out of range (valid: an integer"),
        ({"horizon": 2.5}, "mpc.horizon: 2.5 is not an integer (valid: an integer in [1, 250])"),
        ({"noise": -1}, "mpc.noise: -1 is out of range (valid: a number in (0, 2])"),
        ({"temperature": math.nan}, "mpc.temperature: nan is out of range (valid: a number in"),
        ({"threads": True}, "mpc.threads: True is not a number (valid: an integer in [1, 256])"),
    ],
)
def test_planner_settings_that_are_not_finite_huge_or_negative_are_refused_by_name(
    overrides: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError) as e:
        mpc_config("walker", overrides)
    assert str(e.value).startswith(message)


def test_settings_of_one_value_name_the_same_episodes() -> None:
    """16.0 is the integer 16 and 1 the number 1.0: the same settings, one part key."""
    config = mpc_config("cheetah", {"samples": 16.0, "noise": 1})
    assert config.record() == mpc_config("cheetah", {"samples": 16, "noise": 1.0}).record()
    assert type(config.samples) is int and type(config.noise) is float


def test_a_specs_planner_table_is_refused_before_anything_runs(tmp_path: Path) -> None:
    from rbfm.experiments import load_spec, plan

    spec = tmp_path / "bad.toml"
    spec.write_text(
        'name = "bad"\nexperts = ["mpc"]\nmpc = { samples = nan }\n'
        '[[models]]\ndomain = "cheetah"\ncheckpoint = "cheetah:rnd-v1"\ntasks = ["walk"]\n'
        '[[methods]]\nname = "fbil"\n'
    )
    with pytest.raises(ConfigError, match=r"^mpc\.samples: nan is out of range"):
        plan(load_spec(str(spec)))


@pytest.fixture(scope="module")
def short_episode() -> PlannedEpisode:
    return planned_episode("cheetah", "run", TINY, 0, steps=2)


@pytest.fixture
def no_planning(monkeypatch: pytest.MonkeyPatch) -> None:
    def planned(*args: object) -> None:
        raise AssertionError("a refused input reached the planner")

    monkeypatch.setattr(planner_demos, "planned_episode", planned)


def _demos_cli(tmp_path: Path, *args: str) -> list[str]:
    base = ["demos", "--expert", "mpc", "--domain", "cheetah", "--task", "run"]
    return [*base, "--out", str(tmp_path / "d.npz"), *args]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--mpc", "samples=NaN"], "mpc.samples: nan is out of range (valid: an integer in"),
        (["--mpc", "horizon=Infinity"], "mpc.horizon: inf is out of range (valid: an integer in"),
        (["--mpc", "horizon=inf"], "mpc.horizon: 'inf' is not a number (valid: an integer in"),
        (["--mpc", "samples=1e18"], "mpc.samples: 1000000000000000000 is out of range"),
        (["--mpc", "noise=-1"], "mpc.noise: -1 is out of range (valid: a number in (0, 2])"),
        (["--seed", "-1"], "--seed: -1 is out of range (valid: 0 to 4294967295)"),
        (["--task", "fly"], "unknown cheetah task 'fly'"),
        (["--mpc", "horizon=-1"], "mpc.horizon: -1 is out of range"),
        (["--device", "bogus"], "--device are --expert fb's (the planner runs on"),
    ],
)
def test_the_command_line_refuses_bad_planner_input_before_planning(
    args: list[str],
    message: str,
    tmp_path: Path,
    no_planning: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(_demos_cli(tmp_path, "--episodes", "1", *args)) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []  # no output, no parts folder


def test_the_models_expert_refuses_a_negative_seed_before_loading_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import rbfm.fb.checkpoint

    monkeypatch.setattr(rbfm.fb.checkpoint, "load_checkpoint", lambda *a, **k: pytest.fail())
    args = ["demos", "--checkpoint", "cheetah", "--task", "run", "--seed", "-1"]
    assert main([*args, "--out", str(tmp_path / "d.npz")]) == 2
    err = capsys.readouterr().err
    assert "--seed: -1 is out of range (valid: 0 to 4294967295)" in err
    assert len(err.splitlines()) == 1 and list(tmp_path.iterdir()) == []


def test_a_repeated_mpc_key_is_refused(
    tmp_path: Path, no_planning: None, capsys: pytest.CaptureFixture[str]
) -> None:
    args = _demos_cli(tmp_path, "--mpc", "samples=8", "--mpc", "samples=16")
    assert main(args) == 2
    assert "--mpc samples: given more than once" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_parts_path_that_is_a_file_or_cannot_be_written_is_refused_before_planning(
    tmp_path: Path, no_planning: None, capsys: pytest.CaptureFixture[str]
) -> None:
    taken = tmp_path / "taken"
    taken.write_text("not a folder")
    assert main(_demos_cli(tmp_path, "--parts", str(taken))) == 2
    assert f"--parts: {taken} is a file; give a folder" in capsys.readouterr().err
    # /proc takes no new files, whoever asks (root writes through permission bits).
    assert main(_demos_cli(tmp_path, "--parts", "/proc/rbfm-parts")) == 2
    err = capsys.readouterr().err
    assert "--parts: cannot write into /proc" in err and len(err.splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: b"",
        lambda data: data[: len(data) // 2],
        lambda data: bytes(np.random.default_rng(0).integers(0, 256, len(data), np.uint8)),
    ],
    ids=["empty", "truncated", "random"],
)
def test_a_bad_part_file_is_named_with_what_to_do_before_any_episode_is_planned(
    damage: Callable[[bytes], bytes],
    short_episode: PlannedEpisode,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    parts = tmp_path / "parts"
    monkeypatch.setattr(planner_demos, "planned_episode", lambda *args: short_episode)
    planner_demos.planned_episodes("cheetah", "run", TINY, 2, parts)
    first, second = sorted(parts.iterdir())
    first.unlink()  # episode 0 is to plan again: the bad episode 1 is found first
    second.write_bytes(damage(second.read_bytes()))
    monkeypatch.setattr(planner_demos, "planned_episode", lambda *args: pytest.fail("planned"))
    args = ["--episodes", "2", "--mpc", f"samples={TINY.samples}", "--parts", str(parts)]
    assert main(_demos_cli(tmp_path, "--mpc", f"horizon={TINY.horizon}", *args)) == 2
    err = capsys.readouterr().err
    assert f"{second}: not a whole planner episode" in err and "delete it" in err
    assert len(err.splitlines()) == 1 and not (tmp_path / "d.npz").exists()


def test_a_part_file_that_cannot_be_read_is_not_called_broken(
    short_episode: PlannedEpisode, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Only a file that reads as no episode is one to delete: hours of planning may be
    # behind one that merely cannot be opened.
    parts = tmp_path / "parts"
    monkeypatch.setattr(planner_demos, "planned_episode", lambda *args: short_episode)
    planner_demos.planned_episodes("cheetah", "run", TINY, 1, parts)
    (only,) = parts.iterdir()
    only.unlink()
    only.mkdir()
    with pytest.raises(DatasetError, match=r"cannot read it \(Is a directory\)$"):
        planner_demos.planned_episodes("cheetah", "run", TINY, 1, parts)


def test_the_planner_demonstrates_eight_episodes_unless_told(
    short_episode: PlannedEpisode,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(planner_demos, "planned_episode", lambda *args: short_episode)
    assert main(_demos_cli(tmp_path)) == 0
    assert load_demos(tmp_path / "d.npz").num_episodes == 8
    assert "wrote 8 cheetah/run mpc episodes" in capsys.readouterr().out
    # One episode: its return, without a confidence interval.
    assert main(_demos_cli(tmp_path, "--episodes", "1")) == 0
    out = capsys.readouterr().out
    assert f"return {short_episode.total:.1f} (1 episode, no CI)" in out and "+-" not in out
