"""RND exploration (Burda et al. 2018) on URLB's DDPG backbone, reward-free.

DDPG: actor and double critic MLPs whose first layer is Linear-LayerNorm-Tanh,
n-step TD targets from a Polyak-averaged critic, clipped target-policy noise.
RND: a predictor regresses a frozen random network on normalised, clamped
observations; the intrinsic reward is the prediction error divided by its running
standard deviation. As in URLB the intrinsic reward of a sampled n-step transition
is computed at its first observation.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from rbfm.device import pick_device
from rbfm.errors import unknown
from rbfm.exploration.replay import EpisodeReplay


@dataclass(frozen=True)
class RNDConfig:
    """URLB's RND/DDPG hyperparameters (the `paper` preset)."""

    hidden_dim: int = 1024
    rnd_hidden_dim: int = 1024
    rnd_rep_dim: int = 512
    batch_size: int = 1024
    lr: float = 1e-4
    nstep: int = 3
    discount: float = 0.99
    critic_target_tau: float = 0.01
    update_every_steps: int = 2
    stddev: float = 0.2
    stddev_clip: float = 0.3
    num_seed_frames: int = 4000
    rnd_scale: float = 1.0
    obs_clip: float = 5.0


RND_PRESETS: dict[str, RNDConfig] = {
    "paper": RNDConfig(),
    # Sized for 2 CPU cores: >= 500 transitions/s on cheetah (benchmarks/collect.py).
    # Updates cost ~10 ms here whatever the width, so they are spaced out: 32 sampled
    # transitions per environment step instead of URLB's 512.
    "cpu": RNDConfig(
        hidden_dim=128, rnd_hidden_dim=128, rnd_rep_dim=64, batch_size=256, update_every_steps=8
    ),
    "tiny": RNDConfig(
        hidden_dim=32,
        rnd_hidden_dim=32,
        rnd_rep_dim=16,
        batch_size=32,
        num_seed_frames=1000,
        update_every_steps=4,
    ),
}


def rnd_config(preset: str) -> RNDConfig:
    if preset not in RND_PRESETS:
        raise unknown("RND preset", preset, RND_PRESETS)
    return RND_PRESETS[preset]


def _trunk(inp: int, out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(inp, out), nn.LayerNorm(out), nn.Tanh())


class Actor(nn.Module):
    def __init__(self, obs_dim: int, action_dim: int, hidden: int) -> None:
        super().__init__()
        self.net = nn.Sequential(
            _trunk(obs_dim, hidden),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, action_dim),
            nn.Tanh(),
        )

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs)  # type: ignore[no-any-return]


class Critic(nn.Module):
    def __init__(self, obs_dim: int, action_dim: int, hidden: int) -> None:
        super().__init__()
        self.trunk = _trunk(obs_dim + action_dim, hidden)
        self.q1 = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))
        self.q2 = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.trunk(torch.cat([obs, action], dim=-1))
        return self.q1(h), self.q2(h)


class RunningMeanStd(nn.Module):
    """Running mean and variance merged batch by batch (Chan et al.), as URLB's RMS."""

    mean: torch.Tensor
    var: torch.Tensor
    count: torch.Tensor

    def __init__(self, shape: tuple[int, ...]) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(shape))
        self.register_buffer("var", torch.ones(shape))
        self.register_buffer("count", torch.tensor(1e-4))

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        n = x.shape[0]
        delta = x.mean(0) - self.mean
        total = self.count + n
        self.var.copy_(
            (self.var * self.count + x.var(0) * n + delta.square() * self.count * n / total) / total
        )
        self.mean.add_(delta * n / total)
        self.count.copy_(total)


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


class RNDAgent:
    """Reward-free DDPG + RND. All randomness comes from generators held in its state."""

    name = "rnd"

    def __init__(
        self, obs_dim: int, action_dim: int, cfg: RNDConfig, seed: int, device: str | None = None
    ) -> None:
        self.cfg, self.action_dim = cfg, action_dim
        self.device = pick_device(device)
        torch.manual_seed(seed)  # initial weights only; sampling uses self.gen
        h = cfg.hidden_dim
        self.actor = Actor(obs_dim, action_dim, h).to(self.device)
        self.critic = Critic(obs_dim, action_dim, h).to(self.device)
        self.critic_target = Critic(obs_dim, action_dim, h).to(self.device)
        self.critic_target.load_state_dict(self.critic.state_dict())
        self.rnd = RND(obs_dim, cfg).to(self.device)
        self.intr_rms = RunningMeanStd((1,)).to(self.device)
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=cfg.lr, fused=True)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=cfg.lr, fused=True)
        self.rnd_opt = torch.optim.Adam(self.rnd.predictor.parameters(), lr=cfg.lr, fused=True)
        self.rng = np.random.default_rng(seed)
        self.gen = torch.Generator(self.device).manual_seed(seed)

    def act(self, obs: np.ndarray, step: int) -> np.ndarray:
        if step < self.cfg.num_seed_frames:
            return self.rng.uniform(-1, 1, self.action_dim).astype(np.float32)
        with torch.no_grad():
            mu = self.actor(torch.as_tensor(obs, device=self.device)[None])[0]
            noise = torch.randn(mu.shape, generator=self.gen, device=self.device) * self.cfg.stddev
            return np.asarray((mu + noise).clamp(-1, 1).cpu().numpy())

    def _target_action(self, obs: torch.Tensor) -> torch.Tensor:
        mu = self.actor(obs)
        noise = torch.randn(mu.shape, generator=self.gen, device=self.device) * self.cfg.stddev
        clipped = noise.clamp(-self.cfg.stddev_clip, self.cfg.stddev_clip)
        return (mu + clipped).clamp(-1, 1)

    def update(self, replay: EpisodeReplay) -> dict[str, float]:
        cfg = self.cfg
        raw = replay.sample(self.rng, cfg.batch_size, cfg.nstep, cfg.discount)
        b = {k: torch.as_tensor(v, device=self.device) for k, v in raw.items()}
        obs, action, next_obs = b["observation"], b["action"], b["next_observation"]
        discount = b["discount"][:, None]

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
            target_q = torch.min(*self.critic_target(next_obs, self._target_action(next_obs)))
            target = reward + discount * target_q
        q1, q2 = self.critic(obs, action)
        critic_loss = F.mse_loss(q1, target) + F.mse_loss(q2, target)
        self.critic_opt.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_opt.step()

        actor_loss = -torch.min(*self.critic(obs, self._target_action(obs))).mean()
        self.actor_opt.zero_grad(set_to_none=True)
        actor_loss.backward()
        self.actor_opt.step()

        with torch.no_grad():
            for p, tp in zip(
                self.critic.parameters(), self.critic_target.parameters(), strict=True
            ):
                tp.lerp_(p, cfg.critic_target_tau)
        return {
            "rnd_loss": float(rnd_loss.detach()),
            "critic_loss": float(critic_loss.detach()),
            "actor_loss": float(actor_loss.detach()),
            "intr_reward": float(reward.mean()),
        }

    def state_dict(self) -> dict[str, Any]:
        modules = ("actor", "critic", "critic_target", "rnd", "intr_rms")
        optims = ("actor_opt", "critic_opt", "rnd_opt")
        return {
            "config": asdict(self.cfg),
            **{m: getattr(self, m).state_dict() for m in modules + optims},
            "rng": self.rng.bit_generator.state,
            "gen": self.gen.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if replace(self.cfg, **state["config"]) != self.cfg:
            raise ValueError("checkpoint was written with another RND configuration")
        for name in ("actor", "critic", "critic_target", "rnd", "intr_rms"):
            getattr(self, name).load_state_dict(state[name])
        for name in ("actor_opt", "critic_opt", "rnd_opt"):
            getattr(self, name).load_state_dict(state[name])
        self.rng.bit_generator.state = state["rng"]
        self.gen.set_state(state["gen"])
