"""An FB model's deterministic policy pi_z as the rollout engine's `Policy`, and the same
with Gaussian action noise."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from rbfm.evaluation.rollout import Policy, Wrapper
from rbfm.fb.context import slot_width
from rbfm.fb.model import FBModel

# Matrix kernels for a few rows round differently from those for many: an actor's output
# for one state matched its output in a 400-row call bit for bit only when the call held
# a multiple of 8 rows (1-3 or 5-9 rows moved it by up to 1e-5, measured on the three
# default models; MuJoCo grows that into another return). Calls are padded to a multiple
# of 8, so an episode's actions do not depend on how many others share its batch: a
# result is the same evaluated alone, beside other files, or resumed in another job.
ROWS = 8


def batch_invariant(fn: Callable[..., torch.Tensor], *rows: torch.Tensor) -> torch.Tensor:
    """`fn(*rows)` on its tensors padded to a multiple of `ROWS` rows with copies of their
    first row; the padding's outputs are dropped. Padded are the first tensor and every
    other with a row per row of it: a z of shape (d,), or (1, d) beside many states, is
    passed as it is. `fn` must compute each output row from its own input rows."""
    n = len(rows[0])
    extra = -n % ROWS
    if not extra:
        return fn(*rows)
    padded = [
        torch.cat([t, t[:1].expand(extra, *t.shape[1:])])
        if i == 0 or (t.dim() > 1 and len(t) == n)
        else t
        for i, t in enumerate(rows)
    ]
    return fn(*padded)[:n]


def fb_policy(model: FBModel, z: torch.Tensor) -> Policy:
    """The deterministic policy pi_z for the rollout engine: z of shape (d,) for every
    episode, or (episodes, d) for one task vector per episode of the batch. A model with
    a context gets a `ContextPolicy`, which keeps each episode's window."""
    if model.cfg.context:
        return ContextPolicy(model, z)
    device = next(model.parameters()).device
    zs = z.to(device).reshape(-1, z.shape[-1])

    def act(obs: np.ndarray, episodes: np.ndarray) -> np.ndarray:
        x = torch.as_tensor(obs, device=device)
        return batch_invariant(model.act, x, _rows(zs, episodes)).cpu().numpy()

    return act


def _rows(zs: torch.Tensor, episodes: np.ndarray) -> torch.Tensor:
    """Each episode's task vector: one for all, or one row per episode of the batch."""
    return zs[torch.as_tensor(episodes, device=zs.device)] if len(zs) > 1 else zs


class ContextPolicy:
    """pi_z(s, window) with each episode's window of its last k (state, executed action)
    pairs, emptied by `begin` (the engine calls it before every batch of new episodes)
    and advanced by `executed` (`rbfm.fb.context` has the layout)."""

    def __init__(self, model: FBModel, z: torch.Tensor) -> None:
        self.model, self.device = model, next(model.parameters()).device
        self.zs = z.to(self.device).reshape(-1, z.shape[-1])
        self.k = model.cfg.context
        self.width = slot_width(model.obs_dim, model.action_dim)
        self.windows = np.zeros((0, self.k, self.width), np.float32)

    def begin(self, n: int) -> None:
        self.windows = np.zeros((n, self.k, self.width), np.float32)

    def __call__(self, obs: np.ndarray, episodes: np.ndarray) -> np.ndarray:
        if len(self.windows) <= int(episodes.max()):
            raise RuntimeError("ContextPolicy: begin(n) must be called before the episodes")
        aug = np.concatenate([obs, self.windows[episodes].reshape(len(obs), -1)], 1)
        x = torch.as_tensor(aug, dtype=torch.float32, device=self.device)
        return batch_invariant(self.model.act, x, _rows(self.zs, episodes)).cpu().numpy()

    def executed(self, obs: np.ndarray, episodes: np.ndarray, actions: np.ndarray) -> None:
        slot = np.concatenate([obs, actions, np.ones((len(obs), 1), np.float32)], 1)
        w = self.windows[episodes]
        self.windows[episodes] = np.concatenate([w[:, 1:], slot[:, None]], 1)


class NoisyPolicy(Wrapper):
    """`policy`'s action plus N(0, std^2) noise, clipped to the action bounds [-1, 1].

    Episode i draws its noise from its own generator, seeded by `seeds[i]` (its initial
    state's seed): an episode's noise does not depend on which others share its batch.
    The executed (noisy) actions are what a policy with a memory records.
    """

    def __init__(self, policy: Policy, std: float, seeds: list[tuple[int, int]]) -> None:
        self.policy, self.std = policy, std
        self.rngs = [np.random.default_rng([*seed, 1]) for seed in seeds]

    def __call__(self, obs: np.ndarray, episodes: np.ndarray) -> np.ndarray:
        a = self.policy(obs, episodes)
        noise = np.stack([self.rngs[i].standard_normal(a.shape[-1]) for i in episodes])
        return np.clip(a + self.std * noise, -1.0, 1.0).astype(np.float32)


def noisy_policy(policy: Policy, std: float, seeds: list[tuple[int, int]]) -> Policy:
    """`NoisyPolicy`: per-episode noise generators seeded by `seeds`."""
    return NoisyPolicy(policy, std, seeds)
