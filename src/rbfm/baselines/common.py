"""What the single-task baselines share: policies saved as safetensors + JSON, results."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from rbfm.errors import DatasetError
from rbfm.fb.checkpoint import CheckpointError
from rbfm.inference.demos import Demos

FORMAT = "rbfm-policy"


def mlp(inp: int, hidden: tuple[int, ...], out: int, activation: type[nn.Module]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for h in hidden:
        layers += [nn.Linear(inp, h), activation()]
        inp = h
    return nn.Sequential(*layers, nn.Linear(inp, out))


@dataclass
class BaselineResult:
    method: str
    policy: nn.Module  # maps observations (N, obs_dim) to deterministic actions (N, act_dim)
    trace: list[float] = field(default_factory=list)
    seconds: float = 0.0
    steps: int = 0

    @property
    def ms_per_step(self) -> float:
        return 1000 * self.seconds / max(self.steps, 1)


def demo_tensors(
    demos: Demos, obs_dim: int, action_dim: int, device: torch.device
) -> dict[str, torch.Tensor]:
    if demos.observation.shape[1] != obs_dim or demos.action.shape[1] != action_dim:
        raise DatasetError(
            f"demonstrations of {demos.domain} do not fit a policy for "
            f"{obs_dim}-dim observations and {action_dim}-dim actions"
        )
    return {k: torch.as_tensor(v, device=device) for k, v in demos.transitions().items()}


def save_policy(stem: Path, policy: nn.Module, meta: dict[str, Any]) -> Path:
    """`stem.safetensors` (weights) and `stem.json` (format, method, config...), atomically."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    weights = stem.with_suffix(".safetensors")
    tmp = weights.with_name(f".{weights.name}.part")
    save_file({k: v.detach().cpu().contiguous() for k, v in policy.state_dict().items()}, str(tmp))
    os.replace(tmp, weights)
    desc = stem.with_suffix(".json")
    tmp = desc.with_name(f".{desc.name}.part")
    tmp.write_text(json.dumps({"format": FORMAT, **meta}, indent=2))
    os.replace(tmp, desc)
    return stem


def read_policy_meta(stem: Path) -> dict[str, Any]:
    desc = stem.with_suffix(".json")
    try:
        meta = json.loads(desc.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{desc}: unreadable policy description ({e})") from e
    if meta.get("format") != FORMAT:
        raise CheckpointError(f"{desc}: not an rbfm policy (format {FORMAT!r})")
    return meta


def load_weights(stem: Path, policy: nn.Module) -> nn.Module:
    weights = stem.with_suffix(".safetensors")
    try:
        state = load_file(str(weights))
        policy.load_state_dict(state)
    except (OSError, RuntimeError) as e:
        raise CheckpointError(f"{weights}: does not hold this policy's weights ({e})") from e
    return policy.eval()
