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
from rbfm.baselines import BaselineResult, load_policy, train_baseline, write_policy
from rbfm.data.demos import Demos
from rbfm.errors import ConfigError
from rbfm.fb.model import FBModel
from rbfm.inference import InferenceResult, infer, method_config
from rbfm.methods import get_method


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


def infer_to_file(
    model: FBModel,
    model_meta: dict[str, Any],
    checkpoint: str,
    demos: Demos,
    method: str,
    seed: int,
    out: str | os.PathLike[str],
    settings: str = "default",
    overrides: dict[str, Any] | None = None,
    described: dict[str, Any] | None = None,
    progress: bool = False,
) -> InferenceResult:
    """An FB method's task vector from `demos`, written to `out` with its description:
    the model's weights hash (so it is never scored with another model), the settings,
    and the method's full-set objective, steps and convergence."""
    overrides = dict(overrides or {})
    if "eps" in overrides and not get_method(method).robust:
        raise ConfigError(f"eps applies to the robust methods only, not {method}")
    method_config(method, settings, **overrides)  # refused before any work
    result = infer(model, demos, method, seed, progress, settings, **overrides)
    meta = {
        "method": method,
        "seed": seed,
        "domain": demos.domain,
        "task": demos.task,
        **(described or {}),
        "checkpoint": str(checkpoint),
        "model_sha256": model_meta["sha256"],
        "settings": settings,
        "overrides": overrides,
        "seconds": result.seconds,
        "steps": result.steps,
        # The method's objective on every demonstration transition at z (deterministic).
        "objective": result.objective,
        "converged": result.converged,
        **result.extra,
    }
    save_z(out, result.z, meta)
    return result


def train_to_file(
    method: str,
    demos: Demos,
    preset: str,
    seed: int,
    out: str | os.PathLike[str],
    overrides: dict[str, Any] | None = None,
    described: dict[str, Any] | None = None,
    progress: bool = False,
) -> tuple[BaselineResult, dict[str, Any], Path]:
    """A baseline policy trained on `demos` and written to `out` (a stem); the run
    snapshots itself to `<stem>.resume.pt` and, called again, continues from it."""
    stem = Path(out).with_suffix("")
    resume = stem.with_name(f"{stem.name}.resume.pt")
    result, config = train_baseline(method, demos, preset, seed, overrides, progress, resume)
    meta = {
        "seed": seed,
        "task": demos.task,
        **(described or {}),
        "preset": preset,
        "config": config,
        "steps": config["steps"],
        # this process's share when the run was resumed
        "seconds": result.seconds,
        "steps_timed": result.steps,
    }
    write_policy(stem, method, result.policy, demos.domain, meta)
    return result, config, stem
