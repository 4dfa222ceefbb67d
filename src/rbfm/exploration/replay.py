"""The replay buffer of exploration agents: completed episodes, sampled as URLB does."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np


class EpisodeReplay:
    """Fixed-length episodes in preallocated arrays.

    As in URLB, only completed episodes are sampled: an episode is drawn uniformly,
    then a start step uniformly among those with n steps ahead of them.
    """

    def __init__(
        self, capacity: int, length: int, obs_dim: int, action_dim: int, cond_dim: int = 0
    ) -> None:
        self.length, self.num_episodes = length, 0
        rows = length + 1
        self.observation = np.zeros((capacity, rows, obs_dim), np.float32)
        self.action = np.zeros((capacity, rows, action_dim), np.float32)
        self.discount = np.zeros((capacity, rows), np.float32)
        # What the agent conditioned each action on (APS's skill), row-aligned with actions.
        self.cond = np.zeros((capacity, rows, cond_dim), np.float32)

    def add(self, episode: Mapping[str, np.ndarray], cond: np.ndarray | None = None) -> None:
        if len(episode["observation"]) != self.length + 1:
            raise ValueError(f"episodes must have {self.length + 1} rows")
        if self.num_episodes == len(self.observation):
            raise ValueError("replay buffer is full")
        i = self.num_episodes
        self.observation[i] = episode["observation"]
        self.action[i] = episode["action"]
        self.discount[i] = np.ravel(episode["discount"])
        if cond is not None:
            self.cond[i] = cond
        self.num_episodes += 1

    def sample(
        self, rng: np.random.Generator, batch_size: int, nstep: int, gamma: float
    ) -> dict[str, np.ndarray]:
        """(obs, action, discount, next_obs, cond) with n-step discounting of URLB's loader."""
        ep = rng.integers(self.num_episodes, size=batch_size)
        t = rng.integers(0, self.length - nstep + 1, size=batch_size) + 1
        steps = t[:, None] + np.arange(nstep)[None, :]
        discount = (gamma * self.discount[ep[:, None], steps]).prod(axis=1)
        return {
            "observation": self.observation[ep, t - 1],
            "action": self.action[ep, t],
            "discount": discount.astype(np.float32),
            "next_observation": self.observation[ep, t + nstep - 1],
            "cond": self.cond[ep, t],
        }
