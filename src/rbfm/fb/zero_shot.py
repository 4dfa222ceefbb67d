"""Zero-shot reward inference: z from a reward on labelled dataset states."""

from __future__ import annotations

import numpy as np
import torch

from rbfm.data import Dataset, Transitions, relabel_all
from rbfm.evaluation import Policy
from rbfm.fb.model import FBModel


def labelled_states(
    data: Dataset | Transitions, domain: str, n: int, seed: int, progress: bool = False
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """n states s' drawn uniformly from the data, with every task's reward r(s')."""
    sample = data.subsample(min(n, len(data)), seed)
    return sample.next_observation, relabel_all(sample, domain, progress=progress)


def infer_z(model: FBModel, obs: np.ndarray, reward: np.ndarray) -> torch.Tensor:
    """z = mean r(s) B(s) over the labelled states, on the sqrt(d) sphere."""
    device = next(model.parameters()).device
    return model.reward_z(
        torch.as_tensor(obs, device=device),
        torch.as_tensor(reward, dtype=torch.float32, device=device),
    )


def policy(model: FBModel, z: torch.Tensor) -> Policy:
    """The deterministic policy pi_z for the rollout engine: z of shape (d,) for every
    episode, or (episodes, d) for one task vector per episode of the batch."""
    device = next(model.parameters()).device
    zs = z.to(device).reshape(-1, z.shape[-1])

    def act(obs: np.ndarray, episodes: np.ndarray) -> np.ndarray:
        rows = zs[torch.as_tensor(episodes, device=device)] if len(zs) > 1 else zs
        return model.act(torch.as_tensor(obs, device=device), rows).cpu().numpy()

    return act
