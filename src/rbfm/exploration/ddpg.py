"""URLB's reward-free DDPG backbone, shared by the exploration agents (RND, APS).

Actor and double critic MLPs whose first layer is Linear-LayerNorm-Tanh, n-step TD
targets from a Polyak-averaged critic, clipped target-policy noise. Each agent brings
its intrinsic reward (and, for APS, a skill vector appended to the observation).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any, TypeVar

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from rbfm.checks import check_fields
from rbfm.device import pick_device
from rbfm.exploration.replay import EpisodeReplay


@dataclass(frozen=True)
class DDPGConfig:
    """URLB's DDPG hyperparameters."""

    hidden_dim: int = 1024
    batch_size: int = 1024
    lr: float = 1e-4
    nstep: int = 3
    discount: float = 0.99
    critic_target_tau: float = 0.01
    update_every_steps: int = 2
    stddev: float = 0.2
    stddev_clip: float = 0.3
    num_seed_frames: int = 4000

    def __post_init__(self) -> None:
        """Every field in its range (`rbfm collect --set` reaches here): a NaN rate or
        noise would train to NaN actions, which MuJoCo refuses mid-collection."""
        counts = ("hidden_dim", "batch_size", "nstep", "update_every_steps")
        check_fields(self, {**dict.fromkeys(counts, (1, None)), "num_seed_frames": (0, None)})
        check_fields(
            self, {"lr": (0, 1), "critic_target_tau": (0, 1)}, integer=False, open_low=True
        )
        numbers = {"discount": (0, 1), "stddev": (0, 10), "stddev_clip": (0, 10)}
        check_fields(self, numbers, integer=False)


_C = TypeVar("_C", bound=DDPGConfig)

# The backbone's sizes in each preset, the same for every agent on it (paper: URLB's, the
# defaults). cpu is sized for 2 CPU cores: >= 500 transitions/s on cheetah
# (benchmarks/collect.py); updates cost ~10 ms there whatever the width, so they are
# spaced out: 32 sampled transitions per environment step instead of URLB's 512.
_BACKBONE_PRESETS: dict[str, dict[str, int]] = {
    "paper": {},
    "cpu": {"hidden_dim": 128, "batch_size": 256, "update_every_steps": 8},
    "tiny": {"hidden_dim": 32, "batch_size": 32, "num_seed_frames": 1000, "update_every_steps": 4},
}


def agent_presets(paper: _C, own: dict[str, dict[str, Any]]) -> dict[str, _C]:
    """An agent's presets: its `paper` config with each preset's backbone sizes, and its
    own fields' values in that preset (`own`)."""
    return {
        name: replace(paper, **sizes, **own.get(name, {}))
        for name, sizes in _BACKBONE_PRESETS.items()
    }


def trunk(inp: int, out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(inp, out), nn.LayerNorm(out), nn.Tanh())


class Actor(nn.Module):
    def __init__(self, obs_dim: int, action_dim: int, hidden: int) -> None:
        super().__init__()
        self.net = nn.Sequential(
            trunk(obs_dim, hidden),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, action_dim),
            nn.Tanh(),
        )

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs)  # type: ignore[no-any-return]


class Critic(nn.Module):
    """Two Q heads on a shared trunk; `out` > 1 gives vector values (APS's successor features)."""

    def __init__(self, obs_dim: int, action_dim: int, hidden: int, out: int = 1) -> None:
        super().__init__()
        self.trunk = trunk(obs_dim + action_dim, hidden)
        self.q1 = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, out))
        self.q2 = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, out))

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


def target_action(
    actor: nn.Module, obs: torch.Tensor, cfg: DDPGConfig, gen: torch.Generator
) -> torch.Tensor:
    """The actor's action plus clipped Gaussian noise (target policy smoothing)."""
    mu = actor(obs)
    noise = torch.randn(mu.shape, generator=gen, device=mu.device) * cfg.stddev
    return (mu + noise.clamp(-cfg.stddev_clip, cfg.stddev_clip)).clamp(-1, 1)


def polyak(net: nn.Module, target: nn.Module, tau: float) -> None:
    with torch.no_grad():
        for p, tp in zip(net.parameters(), target.parameters(), strict=True):
            tp.lerp_(p, tau)


class DDPGAgent:
    """The backbone's networks, exploration and TD updates; subclasses add their reward.

    `cond_dim` extra inputs (APS's skill) are appended to the observation of the actor
    and the critic; `critic_out` > 1 makes the critic vector-valued. All randomness
    comes from generators held in the agent's state, so a resumed collection is exact.
    """

    name = "ddpg"
    # attributes saved by state_dict: modules and optimisers (subclasses extend these)
    saved: tuple[str, ...] = ("actor", "critic", "critic_target", "actor_opt", "critic_opt")

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        cfg: DDPGConfig,
        seed: int,
        device: str | None = None,
        cond_dim: int = 0,
        critic_out: int = 1,
    ) -> None:
        self.cfg, self.action_dim, self.cond_dim = cfg, action_dim, cond_dim
        self.device = pick_device(device)
        torch.manual_seed(seed)  # initial weights only; sampling uses self.gen
        h, inp = cfg.hidden_dim, obs_dim + cond_dim
        self.actor = Actor(inp, action_dim, h).to(self.device)
        self.critic = Critic(inp, action_dim, h, critic_out).to(self.device)
        self.critic_target = Critic(inp, action_dim, h, critic_out).to(self.device)
        self.critic_target.load_state_dict(self.critic.state_dict())
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=cfg.lr, fused=True)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=cfg.lr, fused=True)
        self.rng = np.random.default_rng(seed)
        self.gen = torch.Generator(self.device).manual_seed(seed)

    def update(self, replay: EpisodeReplay) -> dict[str, float]:
        """One learning step from a replay sample: the agent's reward, then `td_update`."""
        raise NotImplementedError

    def begin_episode(self, index: int) -> None:
        """Called before episode `index` (APS draws its skills here)."""

    def skills(self, index: int) -> np.ndarray | None:
        """What episode `index`'s actions were conditioned on, row-aligned (none here)."""
        return None

    def act(self, obs: np.ndarray, step: int) -> np.ndarray:
        return self.explore(obs, step)

    def explore(self, obs: np.ndarray, step: int) -> np.ndarray:
        """Uniform actions during the seed frames, then the actor plus Gaussian noise."""
        if step < self.cfg.num_seed_frames:
            return self.rng.uniform(-1, 1, self.action_dim).astype(np.float32)
        with torch.no_grad():
            mu = self.actor(torch.as_tensor(obs, device=self.device)[None])[0]
            noise = torch.randn(mu.shape, generator=self.gen, device=self.device) * self.cfg.stddev
            return np.asarray((mu + noise).clamp(-1, 1).cpu().numpy())

    def td_update(
        self,
        obs: torch.Tensor,
        action: torch.Tensor,
        reward: torch.Tensor,
        discount: torch.Tensor,
        next_obs: torch.Tensor,
        value: Callable[[torch.Tensor], torch.Tensor] = lambda q: q,
    ) -> dict[str, float]:
        """One critic step (n-step TD), one actor step, Polyak; `value` maps critic outputs
        to Q values (identity, or APS's successor features dotted with the skill)."""
        cfg = self.cfg
        with torch.no_grad():
            next_q = self.critic_target(
                next_obs, target_action(self.actor, next_obs, cfg, self.gen)
            )
            target = reward + discount * torch.min(*map(value, next_q))
        q1, q2 = map(value, self.critic(obs, action))
        critic_loss = F.mse_loss(q1, target) + F.mse_loss(q2, target)
        self.critic_opt.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_opt.step()

        q = self.critic(obs, target_action(self.actor, obs, cfg, self.gen))
        actor_loss = -torch.min(*map(value, q)).mean()
        self.actor_opt.zero_grad(set_to_none=True)
        actor_loss.backward()
        self.actor_opt.step()
        polyak(self.critic, self.critic_target, cfg.critic_target_tau)
        return {
            "critic_loss": float(critic_loss.detach()),
            "actor_loss": float(actor_loss.detach()),
            "intr_reward": float(reward.mean()),
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            "config": asdict(self.cfg),
            **{name: getattr(self, name).state_dict() for name in self.saved},
            "rng": self.rng.bit_generator.state,
            "gen": self.gen.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if replace(self.cfg, **state["config"]) != self.cfg:
            raise ValueError(f"checkpoint was written with another {self.name} configuration")
        for name in self.saved:
            getattr(self, name).load_state_dict(state[name])
        self.rng.bit_generator.state = state["rng"]
        self.gen.set_state(state["gen"])
