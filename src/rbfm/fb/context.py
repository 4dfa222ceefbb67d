"""A context of recent history for F and the actor: the last k (state, action) pairs.

A model pretrained on dynamics-diverse data can only tell which physics it is in from
how states respond to actions. With `FBConfig.context = k > 0`, F and the actor read
[s_t, window_t] where window_t holds k slots, oldest first, slot j (j = k..1) being
(s_{t-j}, a_{t-j}, 1), the action executed at s_{t-j} and a flag that the slot lies in
the episode (slots before its first step are all zeros). Consecutive slots and s_t hold
k transitions; F's and the actor's first layers are the small network over the window.
B reads s alone, so rewards, the warm start, zero-shot and imitation targets keep their
meaning. The same layout is built in three places and must agree (tested): training
batches from dataset rows (`gather_windows`), demonstrations (`demo_inputs`) and
rollouts (`rbfm.evaluation.fb_policy.ContextPolicy`).
"""

from __future__ import annotations

import numpy as np
import torch

from rbfm.data.demos import Demos


def slot_width(obs_dim: int, action_dim: int) -> int:
    return obs_dim + action_dim + 1


def gather_windows(
    obs: torch.Tensor,
    action_after: torch.Tensor,
    rows: torch.Tensor,
    starts: torch.Tensor,
    k: int,
) -> torch.Tensor:
    """The windows of the states at `rows` of row arrays: `obs` (R, o) and
    `action_after` (R, a), the action executed at each row's state; `starts` is each
    row's episode's first row. Returns (N, k * slot_width)."""
    back = torch.arange(k, 0, -1, device=rows.device)
    q = rows[:, None] - back[None, :]  # (N, k), oldest first
    valid = (q >= starts[:, None]).unsqueeze(-1)
    qc = q.clamp(min=0)
    ones = torch.ones(*q.shape, 1, dtype=obs.dtype, device=obs.device)
    slots = torch.cat([obs[qc], action_after[qc].to(obs.dtype), ones], -1)
    return (slots * valid).reshape(len(rows), -1)


def episode_windows(obs: np.ndarray, actions: np.ndarray, k: int) -> np.ndarray:
    """Windows of every row of one episode: `obs` (T+1, o), `actions` (T, a) with
    actions[t] executed at obs[t]. Returns (T+1, k * slot_width)."""
    n = len(obs)
    after = np.zeros((n, actions.shape[1]), np.float32)
    after[: len(actions)] = actions
    rows = torch.arange(n)
    return gather_windows(
        torch.as_tensor(obs, dtype=torch.float32),
        torch.as_tensor(after),
        rows,
        torch.zeros(n, dtype=torch.long),
        k,
    ).numpy()


def demo_inputs(demos: Demos, k: int) -> dict[str, np.ndarray]:
    """`demos.transitions()` with the observations F and the actor read: [s, window]
    when k > 0 (the states themselves stay under "state" and "next_state", for B)."""
    t = demos.transitions()
    t["state"], t["next_state"] = t["observation"], t["next_observation"]
    if k == 0:
        return t
    rows, steps = demos._offsets()
    now, nxt = [], []
    for i, length in enumerate(demos.lengths):
        obs = demos.observation[rows[i] : rows[i + 1]]
        win = episode_windows(obs, demos.action[steps[i] : steps[i + 1]], k)
        aug = np.concatenate([obs, win], 1)
        now.append(aug[: length - 1])
        nxt.append(aug[1:length])
    t["observation"], t["next_observation"] = np.concatenate(now), np.concatenate(nxt)
    return t
