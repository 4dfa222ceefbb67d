"""RND exploration (Burda et al. 2018) on URLB's DDPG backbone, reward-free.

RND: a predictor regresses a frozen random network on normalised, clamped
observations; the intrinsic reward is the prediction error divided by its running
standard deviation. As in URLB the intrinsic reward of a sampled n-step transition
is computed at its first observation.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from rbfm.checks import check_fields
from rbfm.errors import unknown
from rbfm.exploration.ddpg import DDPGAgent, DDPGConfig, RunningMeanStd, agent_presets
from rbfm.exploration.replay import EpisodeReplay


@dataclass(frozen=True)
class RNDConfig(DDPGConfig):
    """URLB's RND/DDPG hyperparameters (the `paper` preset)."""

    rnd_hidden_dim: int = 1024
    rnd_rep_dim: int = 512
    rnd_scale: float = 1.0
    obs_clip: float = 5.0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_fields(self, {"rnd_hidden_dim": (1, None), "rnd_rep_dim": (1, None)})
        check_fields(self, {"rnd_scale": (0, 1e6)}, integer=False)
        check_fields(self, {"obs_clip": (0, 1e6)}, integer=False, open_low=True)


RND_PRESETS: dict[str, RNDConfig] = agent_presets(
    RNDConfig(),
    {
        "cpu": {"rnd_hidden_dim": 128, "rnd_rep_dim": 64},
        "tiny": {"rnd_hidden_dim": 32, "rnd_rep_dim": 16},
    },
)


def rnd_config(preset: str) -> RNDConfig:
    if preset not in RND_PRESETS:
        raise unknown("RND preset", preset, RND_PRESETS)
    return RND_PRESETS[preset]


def _mlp(inp: int, hidden: int, out: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(inp, hidden),
        nn.ReLU(),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, out),
    )


class RND(nn.Module):
    def __init__(self, obs_dim: int, cfg: RNDConfig) -> None:
        super().__init__()
        self.clip = cfg.obs_clip
        self.obs_rms: RunningMeanStd
        self.obs_rms = RunningMeanStd((obs_dim,))
        self.predictor = _mlp(obs_dim, cfg.rnd_hidden_dim, cfg.rnd_rep_dim)
        self.target = _mlp(obs_dim, cfg.rnd_hidden_dim, cfg.rnd_rep_dim)
        self.target.requires_grad_(False)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Per-sample prediction error, shape (B, 1)."""
        x = ((obs - self.obs_rms.mean) / (self.obs_rms.var.sqrt() + 1e-8)).clamp(
            -self.clip, self.clip
        )
        return (self.predictor(x) - self.target(x)).square().mean(-1, keepdim=True)


class RNDAgent(DDPGAgent):
    """Reward-free DDPG + RND."""

    name = "rnd"
    saved = (*DDPGAgent.saved, "rnd", "intr_rms", "rnd_opt")

    def __init__(
        self, obs_dim: int, action_dim: int, cfg: RNDConfig, seed: int, device: str | None = None
    ) -> None:
        super().__init__(obs_dim, action_dim, cfg, seed, device)
        self.cfg: RNDConfig = cfg
        self.rnd = RND(obs_dim, cfg).to(self.device)
        self.intr_rms = RunningMeanStd((1,)).to(self.device)
        self.rnd_opt = torch.optim.Adam(self.rnd.predictor.parameters(), lr=cfg.lr, fused=True)

    def update(self, replay: EpisodeReplay) -> dict[str, float]:
        cfg = self.cfg
        raw = replay.sample(self.rng, cfg.batch_size, cfg.nstep, cfg.discount)
        b = {k: torch.as_tensor(v, device=self.device) for k, v in raw.items()}
        obs = b["observation"]

        self.rnd.obs_rms.update(obs)
        error = self.rnd(obs)
        rnd_loss = error.mean()
        self.rnd_opt.zero_grad(set_to_none=True)
        rnd_loss.backward()
        self.rnd_opt.step()

        with torch.no_grad():
            # URLB recomputes the error after the predictor step; the pre-step error is
            # the same signal one update earlier and saves a third of RND's cost.
            error = error.detach()
            self.intr_rms.update(error)
            reward = cfg.rnd_scale * error / (self.intr_rms.var.sqrt() + 1e-8)
        metrics = self.td_update(
            obs, b["action"], reward, b["discount"][:, None], b["next_observation"]
        )
        return {"rnd_loss": float(rnd_loss.detach()), **metrics}
