"""Zero-shot reward inference: z from a reward on labelled dataset states."""

from __future__ import annotations

import numpy as np
import torch

from rbfm.data import Dataset, Transitions, relabel_all
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
