"""Zero-shot reward inference: z from a reward on labelled dataset states."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rbfm.data import Dataset, Transitions, load_dataset, relabel_all
from rbfm.fb.checkpoint import training_data
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


def task_vectors(
    model: FBModel,
    meta: dict[str, Any],
    tasks: list[str],
    checkpoint: str,
    dataset: str | None = None,
    seed: int = 0,
    progress: bool = False,
) -> tuple[dict[str, torch.Tensor], str]:
    """Each task's reward-inferred z, and where it came from: the z stored with the
    checkpoint (best and shipped models store the ones they were selected with: no
    dataset needed) unless `dataset` is given or some task has none, else inferred
    from `model.cfg.reward_samples` states of `dataset` (default: the training data)."""
    stored = meta.get("task_z", {})
    if dataset is None and all(t in stored for t in tasks):
        z = {t: torch.tensor(stored[t], dtype=torch.float32) for t in tasks}
        return z, "stored with the checkpoint"
    domain = str(meta["domain"])
    ds = load_dataset(training_data(meta, dataset, checkpoint), domain)
    obs, rewards = labelled_states(ds, domain, model.cfg.reward_samples, seed, progress)
    with torch.no_grad():
        z = {t: infer_z(model, obs, rewards[t]) for t in tasks}
    return z, f"inferred from {model.cfg.reward_samples} labelled dataset states"
