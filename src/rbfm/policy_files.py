"""Task-vector and policy files: the one home of what `rbfm infer` writes and `rbfm
evaluate`, `rbfm render` and the experiment runner read.

- A task vector (FB methods): JSON with the z and its description (method, domain,
  task, the model's weights hash, settings, objective, ...).
- A policy (baselines): safetensors weights and a JSON description (format
  "rbfm-policy", method, dimensions, config); saving and loading by
  `rbfm.baselines` (`write_policy`, `load_policy`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rbfm.atomic import atomic_write
from rbfm.baselines import load_policy
from rbfm.errors import ConfigError


def save_z(path: str | os.PathLike[str], z: torch.Tensor, meta: dict[str, Any]) -> Path:
    path = Path(path)
    text = json.dumps({"z": z.detach().cpu().tolist(), **meta}, indent=2)
    atomic_write(path, lambda tmp: tmp.write_text(text))
    return path


def load_z(path: str | os.PathLike[str]) -> tuple[torch.Tensor, dict[str, Any]]:
    try:
        data = json.loads(Path(path).read_text())
        z = torch.tensor(data.pop("z"), dtype=torch.float32)
    except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise ConfigError(f"{path}: not a task-vector file written by `rbfm infer` ({e})") from e
    if z.ndim != 1 or not torch.isfinite(z).all():
        raise ConfigError(f"{path}: the task vector must be a finite 1-d list of numbers")
    return z, data


def check_z(
    path: str | os.PathLike[str], z: torch.Tensor, info: dict[str, Any], meta: dict[str, Any]
) -> None:
    """Refuses a task vector that does not belong to the model described by `meta`."""
    dim = int(meta["config"]["z_dim"])
    if len(z) != dim:
        raise ConfigError(f"{path}: a {len(z)}-dim task vector, but the model's z has {dim}")
    if info.get("domain") not in (None, meta["domain"]):
        raise ConfigError(
            f"{path}: a {info['domain']} task vector, but the model is a {meta['domain']} model"
        )
    sha = info.get("model_sha256")
    if sha is not None and sha != meta["sha256"]:
        raise ConfigError(
            f"{path}: inferred with another model (weights {sha[:12]}...), not this checkpoint "
            f"({meta['sha256'][:12]}...)"
        )


def load_any(
    path: str | os.PathLike[str],
) -> tuple[str, torch.Tensor | None, nn.Module | None, dict[str, Any]]:
    """A file from `rbfm infer`, whichever kind: (method, z or None, policy network or
    None, description)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: not a task-vector or policy file ({e})") from e
    if isinstance(data, dict) and data.get("format") == "rbfm-policy":
        method, module, info = load_policy(path)
        return method, None, module, info
    z, info = load_z(path)
    return str(info.get("method", Path(path).stem)), z, None, info
