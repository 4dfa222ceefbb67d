"""Single-task robust offline imitation baselines: DRBC and BE-DROIL.

Both train a policy network from the same demonstration files and seeds as the
RBFM methods, are saved as safetensors + JSON, and run through `rbfm infer
--method drbc|bedroil` and `rbfm evaluate` next to the FB task vectors.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
from torch import nn

from rbfm.baselines import bedroil, drbc
from rbfm.baselines.common import BaselineResult, load_weights, read_policy_meta, save_policy
from rbfm.errors import unknown
from rbfm.evaluation.rollout import Policy
from rbfm.inference.demos import Demos

BASELINES = ("drbc", "bedroil")


def train_baseline(
    method: str,
    demos: Demos,
    preset: str,
    seed: int,
    steps: int | None = None,
    progress: bool = False,
    resume: Path | None = None,
) -> tuple[BaselineResult, dict[str, object]]:
    """Trains DRBC or BE-DROIL on `demos`; returns the result and its config as a dict.

    With `resume` (a file) the run snapshots itself there and continues from it.
    """
    from rbfm.envs import get_domain

    spec = get_domain(demos.domain)
    dims = spec.obs_dim, spec.action_dim
    if method == "drbc":
        cfg_d = drbc.drbc_config(preset, demos.domain)
        cfg_d = cfg_d if steps is None else drbc.DRBCConfig(**{**asdict(cfg_d), "steps": steps})
        res = drbc.train(demos, *dims, cfg_d, seed, progress=progress, resume=resume)
        return res, asdict(cfg_d)
    if method == "bedroil":
        cfg_b = bedroil.bedroil_config(preset)
        if steps is not None:
            cfg_b = bedroil.BEDROILConfig(**{**asdict(cfg_b), "steps": steps})
        res = bedroil.train(demos, *dims, cfg_b, seed, progress=progress, resume=resume)
        return res, asdict(cfg_b)
    raise unknown("baseline", method, BASELINES)


def load_policy(path: str | os.PathLike[str]) -> tuple[str, nn.Module, dict[str, object]]:
    """(method, policy module, description) of a saved baseline policy."""
    stem = (
        Path(path).with_suffix("") if Path(path).suffix in (".json", ".safetensors") else Path(path)
    )
    meta = read_policy_meta(stem)
    hidden = tuple(meta["config"]["hidden"])  # type: ignore[index]
    dims = int(meta["obs_dim"]), int(meta["action_dim"])  # type: ignore[call-overload]
    if meta["method"] == "drbc":
        module: nn.Module = drbc.DeterministicPolicy(*dims, hidden)
    elif meta["method"] == "bedroil":
        module = bedroil.TanhGaussianPolicy(*dims, hidden)
    else:
        raise unknown("baseline", meta["method"], BASELINES)
    return str(meta["method"]), load_weights(stem, module), meta


def as_policy(module: nn.Module) -> Policy:
    """A policy network as a numpy function for the rollout engine (deterministic)."""

    def act(obs: np.ndarray, episodes: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return module(torch.as_tensor(obs)).numpy()

    return act


__all__ = [
    "BASELINES",
    "BaselineResult",
    "as_policy",
    "bedroil",
    "drbc",
    "load_policy",
    "save_policy",
    "train_baseline",
]
