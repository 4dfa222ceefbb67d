"""APS exploration (Liu & Abbeel 2021) on URLB's DDPG backbone, reward-free.

A skill w on the unit sphere (dim 10) is resampled every 5 steps and appended to the
actor's and critic's inputs; the critic predicts successor features psi(s, a, w) and
Q = psi . w. A state feature phi(s) (L2-normalised) is trained to align with the
skill of the transition that reached s. The intrinsic reward at s' is the particle
(kNN, k = 12) entropy estimate of phi(s') within the batch plus phi(s') . w.

Skills are a deterministic function of (seed, episode, block), so a resumed
collection regenerates them instead of storing them next to the ExORL episodes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from rbfm.checks import check_fields, check_flag
from rbfm.errors import unknown
from rbfm.exploration.ddpg import DDPGAgent, DDPGConfig, RunningMeanStd, agent_presets
from rbfm.exploration.replay import EpisodeReplay


@dataclass(frozen=True)
class APSConfig(DDPGConfig):
    """URLB's APS hyperparameters (the `paper` preset)."""

    sf_dim: int = 10
    update_task_every_step: int = 5
    knn_k: int = 12
    knn_clip: float = 1e-4
    knn_avg: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        # knn_k neighbours among a batch's states
        counts = {"sf_dim": (1, None), "update_task_every_step": (1, None)}
        check_fields(self, {**counts, "knn_k": (1, self.batch_size)})
        check_fields(self, {"knn_clip": (0, 1e6)}, integer=False)
        check_flag(type(self).__name__, "knn_avg", self.knn_avg)


APS_PRESETS: dict[str, APSConfig] = agent_presets(APSConfig(), {})


def aps_config(preset: str) -> APSConfig:
    if preset not in APS_PRESETS:
        raise unknown("APS preset", preset, APS_PRESETS)
    return APS_PRESETS[preset]


def particle_reward(
    rep: torch.Tensor, k: int, clip: float, rms: RunningMeanStd, avg: bool = True
) -> torch.Tensor:
    """URLB's particle-based entropy reward: log(1 + kNN distance) within the batch, (B, 1).

    Distances to the k nearest particles (the particle itself included, as in URLB) are
    divided by their running variance (URLB's code divides by its `S`, a variance, not
    the standard deviation its name suggests; kept so data matches ExORL's), clipped
    at `clip`, averaged over the k (or the k-th taken) and passed through log(1 + x).
    """
    dist = torch.cdist(rep, rep)
    knn = dist.topk(k, dim=1, largest=False).values  # ascending
    x = knn.reshape(-1, 1) if avg else knn[:, -1:]
    rms.update(x)
    x = (x / rms.var).sub(clip).clamp(min=0)
    x = x.reshape(len(rep), k).mean(1, keepdim=True) if avg else x
    return torch.log1p(x)


def episode_skills(seed: int, index: int, length: int, cfg: APSConfig) -> np.ndarray:
    """(length + 1, sf_dim) skills row-aligned with an episode's actions (row 0 unused)."""
    blocks = -(-length // cfg.update_task_every_step)
    w = np.random.default_rng([seed, index, 3]).standard_normal((blocks, cfg.sf_dim))
    w /= np.linalg.norm(w, axis=1, keepdims=True)
    per_action = np.repeat(w, cfg.update_task_every_step, axis=0)[:length]
    return np.concatenate([per_action[:1], per_action]).astype(np.float32)


class APSAgent(DDPGAgent):
    """Reward-free DDPG + APS (successor features and particle entropy)."""

    name = "aps"
    saved = (*DDPGAgent.saved, "phi", "phi_opt", "pbe_rms")

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        cfg: APSConfig,
        seed: int,
        length: int,
        device: str | None = None,
    ) -> None:
        super().__init__(
            obs_dim, action_dim, cfg, seed, device, cond_dim=cfg.sf_dim, critic_out=cfg.sf_dim
        )
        self.cfg: APSConfig = cfg
        self.seed, self.length = seed, length
        h = cfg.hidden_dim
        self.phi = nn.Sequential(
            nn.Linear(obs_dim, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(), nn.Linear(h, cfg.sf_dim)
        ).to(self.device)
        self.phi_opt = torch.optim.Adam(self.phi.parameters(), lr=cfg.lr, fused=True)
        self.pbe_rms = RunningMeanStd((1,)).to(self.device)
        self._skills = episode_skills(seed, 0, length, cfg)

    def skills(self, index: int) -> np.ndarray:
        return episode_skills(self.seed, index, self.length, self.cfg)

    def begin_episode(self, index: int) -> None:
        self._skills = self.skills(index)

    def act(self, obs: np.ndarray, step: int) -> np.ndarray:
        skill = self._skills[step % self.length + 1]
        return self.explore(np.concatenate([obs, skill]), step)

    def update(self, replay: EpisodeReplay) -> dict[str, float]:
        cfg = self.cfg
        raw = replay.sample(self.rng, cfg.batch_size, cfg.nstep, cfg.discount)
        b = {k: torch.as_tensor(v, device=self.device) for k, v in raw.items()}
        obs, next_obs, w = b["observation"], b["next_observation"], b["cond"]

        phi_loss = -(F.normalize(self.phi(next_obs), dim=-1) * w).sum(-1).mean()
        self.phi_opt.zero_grad(set_to_none=True)
        phi_loss.backward()
        self.phi_opt.step()

        with torch.no_grad():
            rep = self.phi(next_obs)
            entropy = particle_reward(rep, cfg.knn_k, cfg.knn_clip, self.pbe_rms, cfg.knn_avg)
            reward = entropy + (F.normalize(rep, dim=-1) * w).sum(-1, keepdim=True)
        metrics = self.td_update(
            torch.cat([obs, w], -1),
            b["action"],
            reward,
            b["discount"][:, None],
            torch.cat([next_obs, w], -1),
            value=lambda psi: (psi * w).sum(-1, keepdim=True),
        )
        return {"phi_loss": float(phi_loss.detach()), **metrics}
