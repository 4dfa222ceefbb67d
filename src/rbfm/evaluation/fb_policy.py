"""An FB model's deterministic policy pi_z as the rollout engine's `Policy`."""

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
