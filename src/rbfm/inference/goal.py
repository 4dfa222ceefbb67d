"""Goal-based imitation (GOAL-FB of Pirotta et al., ICLR 2024; metamotivo's tracking
inference): each demonstrated step becomes a goal, and the policy tracks the sequence.

    z_t = sqrt(d) normalise( (1/L) sum_{k=1..L} B(s_{t+k}) )

over the demonstration's next L states (fewer near its end). The task is a sequence of
task vectors, not one, and `index` says which one a step tracks:
- "time" (default; metamotivo's tracking): an episode follows the demonstration whose
  first state is nearest its own in B's space, by time index (t past the
  demonstration's end keeps its last z);
- "state": every step tracks the z_t of the demonstrated state s_t nearest the current
  one in B's space, over all demonstrations, so an episode that falls behind the
  demonstration, or starts elsewhere, tracks what followed where it is.
Nothing is fitted, so it costs one pass of B over the states.

Its file is a `.json` description (format "rbfm-goals", method, domain, task, the model's
weights hash) beside a `.safetensors` of the sequences and the start embeddings: four
walker demonstrations of 1,000 steps are 0.8 MB there against ~4 MB as JSON numbers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from rbfm.atomic import beside, check_pair, stem_of, write_pair
from rbfm.checks import in_range, known_fields
from rbfm.data.demos import Demos
from rbfm.errors import ConfigError, DatasetError
from rbfm.evaluation.fb_policy import batch_invariant
from rbfm.fb.model import FBModel
from rbfm.fb.networks import project
from rbfm.inference.expert_demos import demo_features

INDEXES = ("time", "state")  # which z_t a step tracks (the module's docstring)


@dataclass(frozen=True)
class GoalConfig:
    lookahead: int = 8  # L: the demonstration states averaged into each step's goal
    index: str = "time"

    def __post_init__(self) -> None:
        in_range("GoalConfig", "lookahead", self.lookahead, 1, 1000, integer=True)
        _check_index("GoalConfig index", self.index)


def _check_index(where: str, index: object) -> None:
    if index not in INDEXES:
        raise ConfigError(f"{where}: {index!r} (valid: {', '.join(INDEXES)})")


def goal_config(overrides: dict[str, Any]) -> GoalConfig:
    """GoalConfig with `overrides`, an unknown field refused by name."""
    known_fields(GoalConfig, overrides, "goal")
    return GoalConfig(**overrides)


@dataclass(frozen=True)
class GoalSequences:
    """Per demonstration: its z sequence (T, d) and its first state's embedding B(s_0);
    with the "state" index also its states' embeddings B(s_0..s_{T-1}), z_t's keys."""

    z: list[torch.Tensor]
    starts: torch.Tensor  # (E, d)
    seconds: float
    index: str = "time"
    keys: list[torch.Tensor] = field(default_factory=list)  # "state": (T, d) each


def lookahead_goals(embeddings: torch.Tensor, lookahead: int, radius: float) -> torch.Tensor:
    """z_t from a demonstration's (T, d) next-state embeddings b_t = B(s_{t+1}): the mean
    of b_t..b_{t+L-1} (fewer at the end), projected."""
    if len(embeddings) < lookahead:
        raise DatasetError(
            f"goal: a demonstration of {len(embeddings)} steps is shorter than the "
            f"lookahead of {lookahead} (valid: demonstrations of >= {lookahead} steps)"
        )
    csum = torch.cat([embeddings.new_zeros(1, embeddings.shape[1]), embeddings.cumsum(0)])
    t = torch.arange(len(embeddings), device=embeddings.device)
    end = torch.clamp(t + lookahead, max=len(embeddings))
    mean = (csum[end] - csum[t]) / (end - t)[:, None].to(embeddings.dtype)
    return project(mean, radius)


def infer_sequences(model: FBModel, demos: Demos, cfg: GoalConfig) -> GoalSequences:
    """The goal sequence of every demonstration."""
    if model.cfg.context:
        raise DatasetError(
            "goal: models with a context are not supported (the actor reads a window)"
        )
    started = time.perf_counter()
    seqs, starts, keys = [], [], []
    with torch.no_grad():
        for i, episode in enumerate(demos.observations()):
            b = demo_features(model, episode, i)
            seqs.append(lookahead_goals(b[1:], cfg.lookahead, model.radius))
            starts.append(b[0])
            if cfg.index == "state":
                keys.append(b[:-1])
    if not all(torch.isfinite(z).all() for z in [*seqs, *keys, *starts]):
        raise FloatingPointError("goal: a task vector is not finite; nothing written")
    seconds = time.perf_counter() - started
    return GoalSequences(seqs, torch.stack(starts), seconds, cfg.index, keys)


class GoalPolicy:
    """pi_{z_t}(s) for the rollout engine. Time index: each episode picks its
    demonstration at its first step (nearest start in B's space) and advances one goal
    per executed step. State index: each step the z_t of the nearest demonstrated state."""

    def __init__(self, model: FBModel, goals: GoalSequences) -> None:
        self.model, self.goals = model, goals
        self.device = next(model.parameters()).device
        if goals.index == "state":  # every demonstration's steps as one table
            if [len(k) for k in goals.keys] != [len(z) for z in goals.z]:
                raise ValueError("GoalPolicy: the state index needs a key B(s_t) per z_t")
            self.keys = torch.cat(goals.keys).to(self.device)
            self.flat = torch.cat(goals.z).to(self.device)
        else:
            self.padded = _pad(goals.z).to(self.device)  # (E, T_max, d)
            self.last = torch.as_tensor([len(z) - 1 for z in goals.z], device=self.device)
        self.t = np.zeros(0, np.int64)
        self.demo = np.full(0, -1, np.int64)

    def begin(self, n: int) -> None:
        self.t = np.zeros(n, np.int64)
        self.demo = np.full(n, -1, np.int64)

    def __call__(self, obs: np.ndarray, episodes: np.ndarray) -> np.ndarray:
        if len(self.t) <= int(episodes.max()):
            raise RuntimeError("GoalPolicy: begin(n) must be called before the episodes")
        x = torch.as_tensor(obs, device=self.device)
        with torch.no_grad():
            if self.goals.index == "state":
                return batch_invariant(self._state_indexed, x).cpu().numpy()
            new = self.demo[episodes] < 0
            if new.any():
                fresh = x[torch.as_tensor(new, device=self.device)]
                nearest = batch_invariant(self._nearest_start, fresh)
                self.demo[episodes[new]] = nearest.cpu().numpy()
            demo = torch.as_tensor(self.demo[episodes], device=self.device)
            t = torch.as_tensor(self.t[episodes], device=self.device)
            z = self.padded[demo, torch.minimum(t, self.last[demo])]
            return batch_invariant(self.model.act, x, z).cpu().numpy()

    def _state_indexed(self, x: torch.Tensor) -> torch.Tensor:
        return self.model.act(x, self.flat[_nearest(self.model.backward_map(x), self.keys)])

    def _nearest_start(self, x: torch.Tensor) -> torch.Tensor:
        return _nearest(self.model.backward_map(x), self.goals.starts.to(self.device))

    def executed(self, obs: np.ndarray, episodes: np.ndarray, actions: np.ndarray) -> None:
        del obs, actions
        self.t[episodes] += 1


def _nearest(b: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """The index of each row's nearest row of `table`, always by a matrix product: below
    26 rows torch's default computes pairwise and rounds otherwise, so a near tie would
    depend on the batch. Called inside `batch_invariant`, whose padding the product needs."""
    return torch.cdist(b, table, compute_mode="use_mm_for_euclid_dist").argmin(1)


def _pad(seqs: list[torch.Tensor]) -> torch.Tensor:
    """(E, T_max, d): each sequence followed by copies of its last z."""
    longest = max(len(z) for z in seqs)
    return torch.stack([torch.cat([z, z[-1:].expand(longest - len(z), -1)]) for z in seqs])


FORMAT = "rbfm-goals"


def write_goals(stem: Path, goals: GoalSequences, meta: dict[str, Any]) -> Path:
    """`stem.safetensors` and then `stem.json` (`rbfm.atomic.write_pair`); returns the
    `.json` path."""
    tensors = {f"z.{i}": z.detach().cpu().contiguous() for i, z in enumerate(goals.z)}
    tensors["starts"] = goals.starts.detach().cpu().contiguous()
    tensors |= {f"key.{i}": k.detach().cpu().contiguous() for i, k in enumerate(goals.keys)}
    info = {"format": FORMAT, **meta, "demonstrations": len(goals.z), "index": goals.index}
    info["lengths"] = [len(z) for z in goals.z]
    return write_pair(stem, tensors, info)


def read_goals(path: Path, info: dict[str, Any]) -> GoalSequences:
    """The sequences of a goals file whose description `info` is already read."""
    weights = beside(stem_of(path), ".safetensors")
    index = info.get("index", "time")  # files written before the state index have none
    _check_index(f"{path} index", index)
    check_pair(stem_of(path), info)
    try:
        tensors = load_file(str(weights))
        count = int(info["demonstrations"])
        seqs = [tensors[f"z.{i}"] for i in range(count)]
        starts = tensors["starts"]
    except (OSError, SafetensorError, KeyError, TypeError, ValueError) as e:
        raise ConfigError(f"{weights}: not the goal sequences of {path} ({e})") from e
    wanted = [f"key.{i}" for i in range(count)] if index == "state" else []
    if missing := [k for k in wanted if k not in tensors]:
        raise ConfigError(f"{weights}: index 'state' needs a key per sequence ({missing[0]})")
    keys = [tensors[k] for k in wanted]
    # Another dtype would fail later, in torch, at the first step of a rollout.
    if wrong := [k for k, t in tensors.items() if t.dtype != torch.float32]:
        dtype = str(tensors[wrong[0]].dtype).removeprefix("torch.")
        raise ConfigError(
            f"{weights}: {wrong[0]} is {dtype}; goal sequences are float32 (as `rbfm infer` "
            "writes them)"
        )
    dims = {z.shape[-1] for z in seqs} | {starts.shape[-1]}
    if (
        len(dims) != 1
        or any(z.ndim != 2 or len(z) == 0 for z in seqs)
        or starts.shape != (count, dims.pop())
        or any(k.shape != z.shape for k, z in zip(keys, seqs, strict=False))
    ):
        raise ConfigError(f"{weights}: goal sequences of inconsistent shapes")
    if "lengths" in info and info["lengths"] != [len(z) for z in seqs]:
        raise ConfigError(
            f"{weights}: sequences of lengths {[len(z) for z in seqs]}, where {path} "
            f"describes {info['lengths']}"
        )
    if not all(torch.isfinite(z).all() for z in [*seqs, starts, *keys]):
        raise ConfigError(f"{weights}: a goal task vector is not finite")
    return GoalSequences(seqs, starts, 0.0, index, keys)
