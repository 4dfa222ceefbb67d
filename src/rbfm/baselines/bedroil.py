"""BE-DROIL (Agrawal et al. 2025), implemented from the equations (no public code exists).

A TanhGaussian policy (MLP 256x256) and a critic Q(s, a) on raw state-action pairs
(MLP 256x256, ReLU) with tau >= 0 solve RBFM-Heavy's dual, with the policy's
parameters in the place of the task vector: per batch, l(s) = ||a - a_D||^2 with a
sampled from the policy (reparameterised), c = l + gamma Q(s', a'_D) - Q(s, a_D),
the critic and tau take a step on RBFM-Heavy's dual (`critic_step`, on the same pure
function `robust.duals.heavy_critic_loss` as RBFM-Heavy's critic; tau raw, as the
paper's Table 9 runs it), then the policy minimises E[sg(w*) l], alternating 1:1
(Table 9). Every demonstration state counts as an initial state, as for RBFM-Heavy.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch
from torch import nn

from rbfm.baselines.common import Learner, Setup, mlp
from rbfm.baselines.common import train as common_train
from rbfm.checks import in_range, positive_ints
from rbfm.errors import unknown
from rbfm.robust.divergences import Divergence, get_divergence
from rbfm.robust.duals import (
    MIN_TAU,
    ball_inactive,
    check_heavy,
    heavy_critic_loss,
    heavy_policy_loss,
    heavy_residual,
)
from rbfm.seeding import seeded

_LOG_STD = (-5.0, 2.0)


@dataclass(frozen=True)
class BEDROILConfig:
    """Table 9."""

    eps: float = 0.8
    gamma: float = 0.99
    hidden: tuple[int, ...] = (256, 256)
    lr: float = 5e-5
    batch_size: int = 512
    steps: int = 1_000_000
    divergence: str = "soft_tv"
    tau_init: float = 1.0
    trace_every: int = 100

    def __post_init__(self) -> None:
        check_heavy("BEDROILConfig", self.eps, self.gamma, self.divergence, self.tau_init)
        positive_ints("BEDROILConfig", "hidden", self.hidden)
        in_range("BEDROILConfig", "lr", self.lr, 0, 1, open_low=True)
        in_range("BEDROILConfig", "batch_size", self.batch_size, 1, integer=True)
        in_range("BEDROILConfig", "steps", self.steps, 1, integer=True)
        in_range("BEDROILConfig", "trace_every", self.trace_every, 1, integer=True)


BEDROIL_PRESETS: dict[str, BEDROILConfig] = {
    "paper": BEDROILConfig(),
    "cpu": BEDROILConfig(steps=20_000, lr=3e-4),
}


def bedroil_config(preset: str) -> BEDROILConfig:
    if preset not in BEDROIL_PRESETS:
        raise unknown("BE-DROIL preset", preset, BEDROIL_PRESETS)
    return BEDROIL_PRESETS[preset]


class TanhGaussianPolicy(nn.Module):
    """a = tanh(mu + sigma * e); its deterministic action (evaluation) is tanh(mu)."""

    def __init__(self, obs_dim: int, action_dim: int, hidden: tuple[int, ...]) -> None:
        super().__init__()
        self.net = mlp(obs_dim, hidden, 2 * action_dim, nn.ReLU)

    def distribution(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mu, log_std = self.net(obs).chunk(2, -1)
        return mu, log_std.clamp(*_LOG_STD).exp()

    def sample(self, obs: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        mu, std = self.distribution(obs)
        noise = torch.randn(mu.shape, generator=gen, device=mu.device)
        return torch.tanh(mu + std * noise)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.distribution(obs)[0])


def project_tau(tau: torch.Tensor, c: torch.Tensor, divergence: Divergence) -> None:
    """Raises a raw tau parameter in place to where the dual is finite (and >= MIN_TAU)."""
    with torch.no_grad():
        tau.copy_(torch.maximum(tau, divergence.tau_floor(c)).clamp(min=MIN_TAU))


def critic_step(
    q_s: torch.Tensor,
    q_next: torch.Tensor,
    q_init: torch.Tensor,
    losses: torch.Tensor,
    tau: torch.Tensor,
    opt: torch.optim.Optimizer,
    eps: float,
    gamma: float,
    divergence: Divergence,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One step of (Q, tau) on Section 3.2's dual, given Q on the batch's (s, a), its
    (s', a') and initial states; returns the dual's value and w*, which (Algorithm 3)
    also weights BE-DROIL's policy step. tau is a raw parameter, first raised to where
    the batch's dual is finite."""
    c = heavy_residual(losses.detach(), q_s, q_next, gamma)
    project_tau(tau, c, divergence)
    value, w = heavy_critic_loss(q_init, c, tau, eps, gamma, divergence)
    opt.zero_grad(set_to_none=True)
    value.backward()
    opt.step()
    with torch.no_grad():
        tau.clamp_(min=MIN_TAU)
    return value, w


def learner(run: Setup, cfg: BEDROILConfig) -> Learner:
    """BE-DROIL: the critic and tau on RBFM-Heavy's dual, then the policy on the
    worst-case weights, alternating 1:1 (Algorithm 3)."""
    dev, data, gen = run.device, run.data, run.gen
    obs_dim, action_dim = data["observation"].shape[1], data["action"].shape[1]
    divergence = get_divergence(cfg.divergence)
    ball_inactive("be-droil", divergence, cfg.eps, len(data["observation"]))
    with seeded(run.seed):  # the initial weights, without reseeding the caller's generator
        policy = TanhGaussianPolicy(obs_dim, action_dim, cfg.hidden).to(dev)
        q = mlp(obs_dim + action_dim, cfg.hidden, 1, nn.ReLU).to(dev)
    tau = torch.tensor(cfg.tau_init, device=dev, requires_grad=True)
    critic_opt = torch.optim.Adam([*q.parameters(), tau], lr=cfg.lr)
    policy_opt = torch.optim.Adam(policy.parameters(), lr=cfg.lr)
    sa = torch.cat([data["observation"], data["action"]], -1)
    next_sa = torch.cat([data["next_observation"], data["next_action"]], -1)
    n = len(sa)

    def update() -> torch.Tensor:
        idx = torch.randint(n, (cfg.batch_size,), generator=gen, device=dev)
        init = torch.randint(n, (cfg.batch_size,), generator=gen, device=dev)
        a = policy.sample(data["observation"][idx], gen)
        losses = (a - data["action"][idx]).square().sum(-1)
        value, w = critic_step(
            q(sa[idx])[:, 0],
            q(next_sa[idx])[:, 0],
            q(sa[init])[:, 0],
            losses,
            tau,
            critic_opt,
            cfg.eps,
            cfg.gamma,
            divergence,
        )
        policy_loss = heavy_policy_loss(w, losses)
        policy_opt.zero_grad(set_to_none=True)
        policy_loss.backward()
        policy_opt.step()
        return value

    state = {
        "policy": policy,
        "q": q,
        "tau": tau,
        "critic_opt": critic_opt,
        "policy_opt": policy_opt,
        "gen": gen,
    }
    return Learner(policy, state, update)


# train(demos, obs_dim, action_dim, cfg, seed, device=None, progress=False, resume=None,
# resume_every=10_000): `common.train`.
train = partial(common_train, "bedroil", learner)
