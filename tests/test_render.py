"""`rbfm render`: GIFs of policies side by side, offscreen."""

from __future__ import annotations

import ctypes.util
import os
import subprocess
import sys
from pathlib import Path

import imageio.v2 as imageio
import pytest
import torch

from rbfm.errors import ConfigError
from rbfm.evaluation.render import render_episodes


def test_refuses_without_an_offscreen_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MUJOCO_GL", "disable")  # rbfm's default in library use
    with pytest.raises(ConfigError, match="set MUJOCO_GL=egl"):
        render_episodes([], "cheetah", "run")


@pytest.mark.skipif(
    ctypes.util.find_library("EGL") is None,
    reason="no EGL library on this machine (libegl1 and libgl1-mesa-dri; README)",
)
def test_render_writes_a_gif_of_two_policies_side_by_side(tmp_path: Path) -> None:
    """In a fresh process, as a user runs it: dm_control fixes its OpenGL backend when
    first imported, which the test process has already done with rendering disabled."""
    from rbfm.fb.checkpoint import read_meta
    from rbfm.policy_files import save_z

    z = torch.tensor(read_meta("cheetah")["task_z"]["run"])
    zs = []
    for name in ("fbil", "rbfm-heavy"):
        zs.append(
            str(
                save_z(
                    tmp_path / f"{name}.json",
                    z,
                    {"method": name, "domain": "cheetah", "task": "run"},
                )
            )
        )
    out = tmp_path / "run.gif"
    env = {k: v for k, v in os.environ.items() if k != "MUJOCO_GL"}
    args = ["render", "--checkpoint", "cheetah", "--task", "run", "--steps", "8", "--every", "4"]
    cmd = [sys.executable, "-m", "rbfm.cli", *args, "--z", *zs, "--out", str(out)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    frames = imageio.mimread(out)
    assert len(frames) == 2 and frames[0].shape[:2] == (240, 640)  # two panels of 320
    assert "2 frames of cheetah/run, nominal" in done.stdout


def test_steps_past_the_episode_are_refused_before_rendering(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The environment would start another episode at step 1,000, which the GIF would join."""
    from rbfm.cli import main

    args = ["render", "--checkpoint", "cheetah:rnd-v1", "--task", "run", "--steps", "1001"]
    assert main([*args, "--out", str(tmp_path / "r.gif")]) == 2
    err = capsys.readouterr().err
    assert "render.steps: 1001 is out of range (valid: an integer in [1, 1000])" in err
    assert not list(tmp_path.iterdir())


def test_a_mujoco_gl_that_does_not_load_is_one_line() -> None:
    """In a fresh process: MuJoCo loads the backend MUJOCO_GL names when first imported."""
    env = {**os.environ, "MUJOCO_GL": "bogus"}
    cmd = [sys.executable, "-m", "rbfm.cli", "envs"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert "rbfm: error: MuJoCo's OpenGL backend MUJOCO_GL=bogus did not load (invalid" in (
        done.stderr
    )
