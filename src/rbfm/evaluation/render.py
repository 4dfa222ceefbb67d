"""Seeing a policy: episodes rendered offscreen by MuJoCo, side by side, as a GIF.

MuJoCo renders without a display through EGL (Mesa's software EGL on a CPU machine:
`libegl1` and `libgl1-mesa-dri` on Debian/Ubuntu) or OSMesa (`libosmesa6`, with
MUJOCO_GL=osmesa). dm_control picks its OpenGL backend when it is first imported, so
the backend must be chosen before that: `rbfm render` chooses EGL unless MUJOCO_GL is
set; library users set MUJOCO_GL themselves before importing rbfm.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import imageio.v2 as imageio
import numpy as np
from PIL import Image, ImageDraw

from rbfm.atomic import atomic_write
from rbfm.envs import make_env
from rbfm.errors import ConfigError
from rbfm.evaluation.rollout import Policy, begin, executed


def check_backend() -> None:
    """Refuses to start when rendering cannot work, saying why and what to do."""
    backend = os.environ.get("MUJOCO_GL", "")
    if backend in ("", "disable"):
        raise ConfigError(
            "rendering needs an offscreen OpenGL backend: set MUJOCO_GL=egl (or osmesa) "
            "before importing rbfm (`rbfm render` does this itself)"
        )


def parse_size(text: str) -> tuple[int, int]:
    """ "HEIGHTxWIDTH" in pixels, each 16..2048."""
    try:
        height, width = (int(v) for v in text.lower().split("x"))
    except ValueError:
        height = width = 0
    if not (16 <= height <= 2048 and 16 <= width <= 2048):
        raise ConfigError(f"--size: {text!r} is not HEIGHTxWIDTH in 16..2048 pixels")
    return height, width


def render_episodes(
    policies: list[tuple[str, Policy]],
    domain: str,
    task: str,
    perturbation: str | None = None,
    level: float | None = None,
    seed: int = 0,
    steps: int = 500,
    every: int = 4,
    size: tuple[int, int] = (240, 320),
) -> tuple[np.ndarray, float]:
    """Each policy's episode from the same initial state (seed), a frame every `every`
    control steps for `steps` steps, side by side and labelled with its name and return
    so far: (frames, height, width x policies, 3) uint8, and the frame rate that plays
    them in real time."""
    check_backend()
    if not policies:
        raise ConfigError("render: no policy to render")
    if not 1 <= every <= steps:
        raise ConfigError(f"render: every={every} must be in 1..steps ({steps})")
    envs = [
        make_env(domain, task, perturbation=perturbation, level=level, seed=seed) for _ in policies
    ]
    obs = [env.reset().observation for env in envs]
    try:  # a first frame: the backend works, or the command stops here and says why
        envs[0].physics.render(8, 8, camera_id=0)
    except Exception as e:
        raise ConfigError(
            f"offscreen rendering failed with MUJOCO_GL={os.environ.get('MUJOCO_GL')} "
            f"({type(e).__name__}: {e}); it needs EGL (libegl1, libgl1-mesa-dri) or, with "
            "MUJOCO_GL=osmesa, OSMesa (libosmesa6)"
        ) from e
    returns = np.zeros(len(policies))
    frames = []
    for _, act in policies:
        begin(act, 1)  # each policy runs one episode, its index 0
    for t in range(steps):
        for i, ((_, act), env) in enumerate(zip(policies, envs, strict=True)):
            o, first = obs[i][None].astype(np.float32), np.zeros(1, np.int64)
            action = act(o, first)[0]
            executed(act, o, first, action[None])
            ts = env.step(action)
            obs[i], returns[i] = ts.observation, returns[i] + float(ts.reward or 0.0)
        if t % every == 0:
            row = [
                _label(env.physics.render(*size, camera_id=0), f"{name}: {ret:.0f}")
                for (name, _), env, ret in zip(policies, envs, returns, strict=True)
            ]
            frames.append(np.concatenate(row, axis=1))
    control_dt = envs[0].physics.timestep() * envs[0].n_sub_steps
    return np.stack(frames), 1.0 / (control_dt * every)


def _label(frame: np.ndarray, text: str) -> np.ndarray:
    image = Image.fromarray(frame)
    ImageDraw.Draw(image).text((6, 4), text, fill=(255, 255, 255))
    return np.asarray(image)


def write_gif(frames: np.ndarray, path: str | os.PathLike[str], fps: float) -> Path:
    """The frames as a looping GIF (written to a temporary name, then renamed)."""
    path = Path(path)
    gif: Any = "GIF"  # the temporary file has no .gif suffix to infer it from
    duration = 1000.0 / fps  # imageio's GIF plugin takes ms per frame
    atomic_write(
        path,
        lambda tmp: imageio.mimsave(tmp, list(frames), format=gif, duration=duration, loop=0),
    )
    return path
