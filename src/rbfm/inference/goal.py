"""Goal-based imitation (GOAL-FB of Pirotta et al., ICLR 2024; metamotivo's tracking
inference): each demonstrated step becomes a goal, and the policy tracks the sequence.

    z_t = sqrt(d) normalise( (1/L) sum_{k=1..L} B(s_{t+k}) )

over the demonstration's next L states (fewer near its end). The task is a sequence of
task vectors, not one: an episode follows the demonstration whose first state is
nearest its own in B's space, by time index (t past the demonstration's end keeps its
last z). Nothing is fitted, so it costs one pass of B over the states.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from rbfm.checks import in_range
from rbfm.data.demos import Demos
from rbfm.errors import DatasetError
from rbfm.fb.model import FBModel
from rbfm.fb.networks import project


@dataclass(frozen=True)
class GoalConfig:
    lookahead: int = 8  # L: the demonstration states averaged into each step's goal

    def __post_init__(self) -> None:
        in_range("GoalConfig", "lookahead", self.lookahead, 1, 1000, integer=True)


@dataclass(frozen=True)
class GoalSequences:
    """Per demonstration: its z sequence (T, d) and its first state's embedding B(s_0)."""

    z: list[torch.Tensor]
    starts: torch.Tensor  # (E, d)
    seconds: float


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
    started = time.perf_counter()
    device = next(model.parameters()).device
    seqs, starts = [], []
    with torch.no_grad():
        for episode in demos.observations():
            b = model.backward_map(torch.as_tensor(episode, device=device))
            seqs.append(lookahead_goals(b[1:], cfg.lookahead, model.radius))
            starts.append(b[0])
    if not all(torch.isfinite(z).all() for z in seqs):
        raise FloatingPointError("goal: a task vector is not finite; nothing written")
    return GoalSequences(seqs, torch.stack(starts), time.perf_counter() - started)


class GoalPolicy:
    """pi_{z_t}(s) for the rollout engine: each episode picks its demonstration at its
    first step (nearest start in B's space) and advances one goal per executed step."""

    def __init__(self, model: FBModel, goals: GoalSequences) -> None:
        self.model, self.goals = model, goals
        self.device = next(model.parameters()).device
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
        new = self.demo[episodes] < 0
        if new.any():
            with torch.no_grad():
                b = self.model.backward_map(x[torch.as_tensor(new, device=self.device)])
            nearest = torch.cdist(b, self.goals.starts.to(self.device)).argmin(1)
            self.demo[episodes[new]] = nearest.cpu().numpy()
        demo = torch.as_tensor(self.demo[episodes], device=self.device)
        t = torch.minimum(torch.as_tensor(self.t[episodes], device=self.device), self.last[demo])
        return self.model.act(x, self.padded[demo, t]).cpu().numpy()

    def executed(self, obs: np.ndarray, episodes: np.ndarray, actions: np.ndarray) -> None:
        del obs, actions
        self.t[episodes] += 1


def _pad(seqs: list[torch.Tensor]) -> torch.Tensor:
    """(E, T_max, d): each sequence followed by copies of its last z."""
    longest = max(len(z) for z in seqs)
    return torch.stack([torch.cat([z, z[-1:].expand(longest - len(z), -1)]) for z in seqs])
