"""Single-task robust offline imitation baselines: DRBC and BE-DROIL.

Both train a policy network from the same demonstration files and seeds as the
RBFM methods, are saved as safetensors + JSON, and run through `rbfm infer
--method drbc|bedroil` and `rbfm evaluate` next to the FB task vectors.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from rbfm.atomic import stem_of
from rbfm.baselines import bedroil, drbc
from rbfm.baselines.common import BaselineResult, load_weights, read_policy_meta, save_policy
from rbfm.checks import known_fields
from rbfm.data.demos import Demos
from rbfm.errors import unknown
from rbfm.evaluation.fb_policy import batch_invariant
from rbfm.evaluation.rollout import Policy
from rbfm.fb.checkpoint import CheckpointError

BASELINES = ("drbc", "bedroil")
# The policy network each baseline trains and saves: (obs_dim, action_dim, hidden) -> module.
POLICY_TYPES: dict[str, type[nn.Module]] = {
    "drbc": drbc.DeterministicPolicy,
    "bedroil": bedroil.TanhGaussianPolicy,
}


def build_policy(method: str, obs_dim: int, action_dim: int, hidden: tuple[int, ...]) -> nn.Module:
    """An untrained policy network of `method` (weights are loaded into it)."""
    if method not in POLICY_TYPES:
        raise unknown("baseline", method, BASELINES)
    return POLICY_TYPES[method](obs_dim, action_dim, hidden)


def write_policy(
    stem: Path, method: str, module: nn.Module, domain: str, meta: dict[str, Any]
) -> Path:
    """Saves a trained baseline policy with what loading it needs (method, domain,
    dimensions; `meta` adds its config, seed, demonstrations...)."""
    from rbfm.envs import get_domain

    spec = get_domain(domain)
    info = {"method": method, "domain": domain, **meta}
    return save_policy(
        stem, module, info | {"obs_dim": spec.obs_dim, "action_dim": spec.action_dim}
    )


def baseline_config(
    method: str, preset: str, domain: str, overrides: dict[str, Any] | None = None
) -> drbc.DRBCConfig | bedroil.BEDROILConfig:
    """The preset's config (DRBC: the domain's Table 8 row) with fields overridden."""
    if method == "drbc":
        base: drbc.DRBCConfig | bedroil.BEDROILConfig = drbc.drbc_config(preset, domain)
    elif method == "bedroil":
        base = bedroil.bedroil_config(preset)
    else:
        raise unknown("baseline", method, BASELINES)
    known_fields(type(base), overrides or {}, method)
    return dataclasses.replace(base, **(overrides or {}))


def train_baseline(
    method: str,
    demos: Demos,
    preset: str,
    seed: int,
    overrides: dict[str, Any] | None = None,
    progress: bool = False,
    resume: Path | None = None,
) -> tuple[BaselineResult, dict[str, object]]:
    """Trains DRBC or BE-DROIL on `demos`; returns the result and its config as a dict.

    With `resume` (a file) the run snapshots itself there and continues from it.
    """
    from rbfm.envs import get_domain

    spec = get_domain(demos.domain)
    dims = spec.obs_dim, spec.action_dim
    cfg = baseline_config(method, preset, demos.domain, overrides)
    if isinstance(cfg, drbc.DRBCConfig):
        res = drbc.train(demos, *dims, cfg, seed, progress=progress, resume=resume)
    else:
        res = bedroil.train(demos, *dims, cfg, seed, progress=progress, resume=resume)
    return res, dataclasses.asdict(cfg)


def load_policy(path: str | os.PathLike[str]) -> tuple[str, nn.Module, dict[str, object]]:
    """(method, policy module, description) of a saved baseline policy."""
    stem = stem_of(path)
    from rbfm.envs import get_domain

    meta = read_policy_meta(stem)
    config, dims_given = meta.get("config"), (meta.get("obs_dim"), meta.get("action_dim"))
    hidden = config.get("hidden") if isinstance(config, dict) else None
    ok = isinstance(hidden, list) and all(isinstance(h, int) and h > 0 for h in hidden)
    if not ok or not all(isinstance(d, int) and not isinstance(d, bool) for d in dims_given):
        raise CheckpointError(
            f"{stem}.json: not a whole policy description (it needs obs_dim, action_dim and "
            "config.hidden, as `rbfm infer` writes them)"
        )
    widths = tuple(hidden)  # type: ignore[arg-type]
    dims = int(meta["obs_dim"]), int(meta["action_dim"])  # type: ignore[call-overload]
    spec = get_domain(str(meta.get("domain")))
    if dims != (spec.obs_dim, spec.action_dim):
        raise CheckpointError(
            f"{stem}: a policy for {dims[0]}/{dims[1]}-dim observations/actions, but "
            f"{spec.name}'s are {spec.obs_dim}/{spec.action_dim}"
        )
    module = build_policy(str(meta["method"]), *dims, widths)
    return str(meta["method"]), load_weights(stem, module, meta), meta


def as_policy(module: nn.Module) -> Policy:
    """A policy network as a numpy function for the rollout engine (deterministic; each
    call padded by `batch_invariant`, so an episode's actions do not depend on its batch)."""
    device = next(module.parameters()).device

    def act(obs: np.ndarray, episodes: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return batch_invariant(module, torch.as_tensor(obs, device=device)).cpu().numpy()

    return act


__all__ = [
    "BASELINES",
    "POLICY_TYPES",
    "BaselineResult",
    "as_policy",
    "baseline_config",
    "bedroil",
    "build_policy",
    "drbc",
    "load_policy",
    "save_policy",
    "train_baseline",
    "write_policy",
]
