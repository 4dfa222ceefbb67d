"""What the single-task baselines share: policies saved as safetensors + JSON, results."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from torch import nn

from rbfm.atomic import atomic_write, beside, check_pair, parse_json, write_pair
from rbfm.data.demos import Demos
from rbfm.errors import ConfigError, DatasetError
from rbfm.fb.checkpoint import CheckpointError
from rbfm.progress import steps_bar

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


class Resume:
    """Periodic, atomic snapshots of a training loop, so runs of hours survive a kill.

    The paper presets train for 1-2M updates (hours on a CPU). Every `every` updates
    the loop's whole state (networks, optimisers, schedules, generator, trace) goes to
    one file; a new run with the same fingerprint (method, config, seed, demonstrations)
    continues from it and ends exactly where an uninterrupted run would. The file is
    removed when training completes. `path=None` disables it.
    """

    def __init__(self, path: Path | None, every: int, fingerprint: dict[str, Any]) -> None:
        self.path, self.every = path, every
        self.fingerprint = json.loads(json.dumps(fingerprint))  # JSON-normalised

    def load(self, state: dict[str, Any], result: BaselineResult) -> int:
        """Restores `state` (objects with load_state_dict/set_state) in place; the start step."""
        if self.path is None or not self.path.exists():
            return 0
        saved = torch.load(self.path, map_location="cpu", weights_only=False)
        if saved["fingerprint"] != self.fingerprint:
            raise CheckpointError(
                f"{self.path} is an unfinished run with other settings; delete it or choose "
                "another --out"
            )
        for name, obj in state.items():
            value = saved["state"][name]
            if isinstance(obj, torch.Generator):
                obj.set_state(value)
            elif isinstance(obj, torch.Tensor):
                with torch.no_grad():
                    obj.copy_(value)
            else:
                obj.load_state_dict(value)
        result.trace = list(saved["trace"])
        return int(saved["step"])

    def save(self, step: int, state: dict[str, Any], result: BaselineResult) -> None:
        if self.path is None or step % self.every:
            return
        snapshot = {
            name: obj.get_state()
            if isinstance(obj, torch.Generator)
            else obj.detach().clone()
            if isinstance(obj, torch.Tensor)
            else obj.state_dict()
            for name, obj in state.items()
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        saved = {"fingerprint": self.fingerprint, "step": step, "state": snapshot}
        atomic_write(self.path, lambda tmp: torch.save({**saved, "trace": result.trace}, tmp))

    def finish(self) -> None:
        if self.path is not None:
            self.path.unlink(missing_ok=True)


@dataclass
class Learner:
    """A baseline ready to train: its policy, what a snapshot saves (`Resume`), and one
    training step (returns its objective)."""

    policy: nn.Module
    state: dict[str, Any]
    update: Callable[[], torch.Tensor]


def train(
    method: str,
    build: Callable[[Setup, Any], Learner],
    demos: Demos,
    obs_dim: int,
    action_dim: int,
    cfg: Any,
    seed: int,
    device: str | None = None,
    progress: bool = False,
    resume: Path | None = None,
    resume_every: int = 10_000,
) -> BaselineResult:
    """Trains the learner `build` makes on `demos` for `cfg.steps` steps, tracing every
    `cfg.trace_every`; with `resume` (a file) it snapshots there every `resume_every`
    steps and a run with a snapshot continues from it. `result.steps` counts the steps
    run in this call."""
    start = time.perf_counter()
    dev = torch.device(device or "cpu")
    data = demo_tensors(demos, obs_dim, action_dim, dev)
    learner = build(Setup(dev, data, seed, torch.Generator(dev).manual_seed(seed)), cfg)
    result = BaselineResult(method, learner.policy)
    snapshots = Resume(resume, resume_every, fingerprint(method, cfg, seed, demos))
    first = snapshots.load(learner.state, result)
    for step in steps_bar(range(first, cfg.steps), method, progress):
        value = learner.update()
        if step % cfg.trace_every == 0:
            result.trace.append(float(value.detach()))
        snapshots.save(step + 1, learner.state, result)
    snapshots.finish()
    result.steps = cfg.steps - first
    result.seconds = time.perf_counter() - start
    return result


def fingerprint(method: str, cfg: Any, seed: int, demos: Demos) -> dict[str, Any]:
    """What must match for a snapshot to be continued: method, config, seed, demonstrations."""
    digest = hashlib.sha256(demos.observation.tobytes() + demos.action.tobytes()).hexdigest()
    return {"method": method, "config": asdict(cfg), "seed": seed, "demos": digest}


def demo_tensors(
    demos: Demos, obs_dim: int, action_dim: int, device: torch.device
) -> dict[str, torch.Tensor]:
    if demos.observation.shape[1] != obs_dim or demos.action.shape[1] != action_dim:
        raise DatasetError(
            f"demonstrations of {demos.domain} do not fit a policy for "
            f"{obs_dim}-dim observations and {action_dim}-dim actions"
        )
    return {k: torch.as_tensor(v, device=device) for k, v in demos.transitions().items()}


@dataclass
class Setup:
    """What a baseline's learner is built from: the device, the demonstration tensors,
    the run's seed and the generator of its batches (seeded by it)."""

    device: torch.device
    data: dict[str, torch.Tensor]
    seed: int
    gen: torch.Generator


def save_policy(stem: Path, policy: nn.Module, meta: dict[str, Any]) -> Path:
    """`stem.safetensors` (weights) and `stem.json` (format, method, config...), atomically."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous() for k, v in policy.state_dict().items()}
    write_pair(stem, state, {"format": FORMAT, **meta})
    return stem


def read_policy_meta(stem: Path) -> dict[str, Any]:
    desc = beside(stem, ".json")
    try:
        meta = parse_json(desc.read_text())
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{desc}: unreadable policy description ({e})") from e
    if meta.get("format") != FORMAT:
        raise CheckpointError(f"{desc}: not an rbfm policy (format {FORMAT!r})")
    return meta


def load_weights(stem: Path, policy: nn.Module, meta: dict[str, Any]) -> nn.Module:
    """`policy` with the weights beside `stem`, the ones its description `meta` was
    written with (`rbfm.atomic.check_pair`) and finite."""
    weights = beside(stem, ".safetensors")
    try:
        check_pair(stem, meta)
    except ConfigError as e:
        raise CheckpointError(str(e)) from None
    try:
        state = load_file(str(weights))
        policy.load_state_dict(state)
    except (OSError, RuntimeError) as e:
        raise CheckpointError(f"{weights}: does not hold this policy's weights ({e})") from e
    if not all(bool(torch.isfinite(v).all()) for v in state.values()):
        raise CheckpointError(f"{weights}: the policy's weights hold NaN or infinite values")
    return policy.eval()
