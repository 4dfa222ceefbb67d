"""An FB model's deterministic policy pi_z as the rollout engine's `Policy`, and the same
with Gaussian action noise."""

from __future__ import annotations

import numpy as np
import torch

from rbfm.evaluation.rollout import Policy
from rbfm.fb.model import FBModel


def fb_policy(model: FBModel, z: torch.Tensor) -> Policy:
    """The deterministic policy pi_z for the rollout engine: z of shape (d,) for every
    episode, or (episodes, d) for one task vector per episode of the batch."""
    device = next(model.parameters()).device
    zs = z.to(device).reshape(-1, z.shape[-1])

    def act(obs: np.ndarray, episodes: np.ndarray) -> np.ndarray:
        rows = zs[torch.as_tensor(episodes, device=device)] if len(zs) > 1 else zs
        return model.act(torch.as_tensor(obs, device=device), rows).cpu().numpy()

    return act


def noisy_policy(policy: Policy, std: float, seeds: list[tuple[int, int]]) -> Policy:
    """`policy`'s action plus N(0, std^2) noise, clipped to the action bounds [-1, 1].

    Episode i draws its noise from its own generator, seeded by `seeds[i]` (its initial
    state's seed): an episode's noise does not depend on which others share its batch.
    """
    rngs = [np.random.default_rng([*seed, 1]) for seed in seeds]

    def act(obs: np.ndarray, episodes: np.ndarray) -> np.ndarray:
        a = policy(obs, episodes)
        noise = np.stack([rngs[i].standard_normal(a.shape[-1]) for i in episodes])
        return np.clip(a + std * noise, -1.0, 1.0).astype(np.float32)

    return act
