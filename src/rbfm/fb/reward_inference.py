"""Zero-shot reward inference: z from a reward on labelled dataset states."""

from __future__ import annotations

from copy import deepcopy
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rbfm.data import Dataset, Transitions, load_dataset, relabel_all
from rbfm.data.dataset import find_buffer
from rbfm.envs import TASKS
from rbfm.fb.checkpoint import (
    dataset_name,
    export_checkpoint,
    load_checkpoint,
    training_data,
)
from rbfm.fb.model import FBModel
from rbfm.fb.moment import moment_record


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


def export_with_task_z(
    checkpoint: str, out: str, dataset: str | None = None, fp16: bool = False
) -> Path:
    """Copies a checkpoint (e.g. a run's best) to the stem `out`, every task's
    reward-inferred z in its description: the stored ones when it has them (its
    selection's), else inferred now from `dataset` (seed 1). `dataset` also names the
    model's data, whatever path the run recorded; `fp16` halves the file. Where the data
    is on the machine (`dataset`, or the path the run recorded) the description also
    stores E_rho[B B^T] (`rbfm.fb.moment`), computed from the weights as stored; without
    the data, a moment the source's description stores is kept as it is (its weights':
    after `fp16` rounding it differs by ~1e-4 relative)."""
    data = None if dataset is None else dataset_name(find_buffer(Path(dataset)))
    model, meta = load_checkpoint(checkpoint)
    dtype = torch.float16 if fp16 else None
    extra: dict[str, Any] = {}
    path = _data_here(meta, dataset)
    if path is not None:  # first: data it cannot use is refused before any z is inferred
        # The moment of the model that loads from the export: its weights after rounding.
        exported = model if dtype is None else _rounded(model, dtype)
        extra["b_moment"] = moment_record(exported, load_dataset(path, str(meta["domain"])))
    source = None if "task_z" in meta else dataset
    task_z, _ = task_vectors(model, meta, list(TASKS[meta["domain"]]), checkpoint, source, 1)
    extra["task_z"] = {t: z.tolist() for t, z in task_z.items()}
    # A relative path as given, else its last part: no machine's absolute paths.
    extra["exported_from"] = (
        checkpoint if not Path(checkpoint).is_absolute() else Path(checkpoint).name
    )
    if data is not None:
        extra["dataset"] = {"name": data}
    return export_checkpoint(checkpoint, out, extra, dtype)


def _rounded(model: FBModel, dtype: torch.dtype) -> FBModel:
    """A copy whose floating-point tensors went through `dtype` and back, as a file
    stored in `dtype` loads."""
    copy = deepcopy(model)
    with torch.no_grad():
        for t in copy.state_dict().values():
            if t.is_floating_point():
                t.copy_(t.to(dtype))
    return copy


def _data_here(meta: dict[str, Any], given: str | None) -> str | None:
    """The model's data if it is on this machine: `given`, else the path the run recorded."""
    if given is not None:
        return given
    path = meta.get("dataset", {}).get("path")
    return str(path) if path is not None and Path(path).exists() else None
