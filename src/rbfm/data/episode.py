"""One episode in the ExORL layout, stepped by an agent: what `rbfm collect` writes and
what a replay file's actions regenerate (`rbfm.data.resimulate`)."""

from __future__ import annotations

from typing import Protocol

import mujoco
import numpy as np

from rbfm.data.exorl import KEYS
from rbfm.envs import RbfmEnv

# Beside a collection's buffer: its domain, task, seed and agent (`rbfm collect`).
COLLECTION_FILE = "collect.json"


class Agent(Protocol):
    def begin_episode(self, index: int) -> None: ...
    def act(self, obs: np.ndarray, step: int) -> np.ndarray: ...


def run_episode(env: RbfmEnv, agent: Agent, step: int) -> dict[str, np.ndarray]:
    """One episode in ExORL layout: T+1 rows, row 0 the reset."""
    spec = env.spec
    n = spec.episode_length + 1
    ep: dict[str, np.ndarray] = {
        "observation": np.zeros((n, spec.obs_dim), np.float32),
        "action": np.zeros((n, spec.action_dim), np.float32),
        "reward": np.zeros((n, 1), np.float32),
        "discount": np.ones((n, 1), np.float32),
        "physics": np.zeros((n, spec.physics_dim), np.float64),
    }
    obs, act, rew, disc, phys = (ep[k] for k in KEYS)
    # physics.get_state() without dm_control's wrapper, which costs more than the write.
    model, data = env.physics.model.ptr, env.physics.data.ptr
    what = mujoco.mjtState.mjSTATE_PHYSICS
    ts = env.reset()
    obs[0] = ts.observation
    mujoco.mj_getState(model, data, phys[0], what)
    for t in range(1, n):
        a = agent.act(obs[t - 1], step + t - 1)
        ts = env.step(a)
        obs[t], act[t], rew[t], disc[t] = ts.observation, a, ts.reward, ts.discount
        mujoco.mj_getState(model, data, phys[t], what)
    if not ts.last():
        raise RuntimeError(f"{env.describe()}: episode did not end after {n - 1} steps")
    return ep
