"""DRBC (Panaganti et al. 2023): behavioural cloning of a policy network under the TV dual.

The policy (MLP 256x256, Tanh activations, tanh output) minimises the worst case of
its squared action error over a TV ball of radius eps around the demonstrations'
state distribution: exactly RBFM-Light's objective (`duals.light_objective`, the
same sort-based exact dual), but over network weights instead of a task vector.
The public code re-solves the dual with a generic solver every few steps.
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
from rbfm.robust.duals import light_objective
from rbfm.seeding import seeded


@dataclass(frozen=True)
class DRBCConfig:
    """Table 8 (per domain)."""

    eps: float = 0.5
    hidden: tuple[int, ...] = (256, 256)
    steps: int = 2_000_000
    batch_size: int = 256
    lr: float = 1e-4
    lr_decay: float = 0.95  # multiplied in every `decay_every` steps
    decay_every: int = 10_000
    trace_every: int = 100

    def __post_init__(self) -> None:
        in_range("DRBCConfig", "eps", self.eps, 0, 1)
        positive_ints("DRBCConfig", "hidden", self.hidden)
        in_range("DRBCConfig", "steps", self.steps, 1, integer=True)
        in_range("DRBCConfig", "batch_size", self.batch_size, 1, integer=True)
        in_range("DRBCConfig", "lr", self.lr, 0, 1, open_low=True)
        in_range("DRBCConfig", "lr_decay", self.lr_decay, 0, 1, open_low=True)
        in_range("DRBCConfig", "decay_every", self.decay_every, 1, integer=True)
        in_range("DRBCConfig", "trace_every", self.trace_every, 1, integer=True)


DRBC_PRESETS: dict[str, DRBCConfig] = {
    "paper-cheetah": DRBCConfig(eps=0.3, lr=1e-5, lr_decay=0.9),
    "paper-walker": DRBCConfig(eps=0.5, lr=1e-4, lr_decay=0.95),
    "paper-quadruped": DRBCConfig(eps=0.6, lr=1e-4, lr_decay=0.9),
    # A few minutes on 2 cores; the learning rate decays as if the 2M-step schedule
    # were compressed into these steps.
    "cpu": DRBCConfig(steps=20_000, lr=1e-3, decay_every=2_000, lr_decay=0.9),
}


def drbc_config(preset: str, domain: str) -> DRBCConfig:
    """`paper` picks the domain's Table 8 row."""
    name = f"paper-{domain}" if preset == "paper" else preset
    if name not in DRBC_PRESETS:
        raise unknown("DRBC preset", preset, ["paper", "cpu"])
    return DRBC_PRESETS[name]


class DeterministicPolicy(nn.Module):
    def __init__(self, obs_dim: int, action_dim: int, hidden: tuple[int, ...]) -> None:
        super().__init__()
        self.net = mlp(obs_dim, hidden, action_dim, nn.Tanh)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.net(obs))


def learner(run: Setup, cfg: DRBCConfig) -> Learner:
    """DRBC: the policy's TV-ball worst case of its squared action error, per batch."""
    dev, data, gen = run.device, run.data, run.gen
    obs_dim, action_dim = data["observation"].shape[1], data["action"].shape[1]
    with seeded(run.seed):  # the initial weights, without reseeding the caller's generator
        policy = DeterministicPolicy(obs_dim, action_dim, cfg.hidden).to(dev)
    opt = torch.optim.Adam(policy.parameters(), lr=cfg.lr)
    schedule = torch.optim.lr_scheduler.StepLR(opt, cfg.decay_every, cfg.lr_decay)
    n = len(data["observation"])

    def update() -> torch.Tensor:
        idx = torch.randint(n, (cfg.batch_size,), generator=gen, device=dev)
        losses = (policy(data["observation"][idx]) - data["action"][idx]).square().sum(-1)
        value, _ = light_objective(losses, cfg.eps)
        opt.zero_grad(set_to_none=True)
        value.backward()
        opt.step()
        schedule.step()
        return value

    state = {"policy": policy, "opt": opt, "schedule": schedule, "gen": gen}
    return Learner(policy, state, update)


# train(demos, obs_dim, action_dim, cfg, seed, device=None, progress=False, resume=None,
# resume_every=10_000): `common.train`.
train = partial(common_train, "drbc", learner)
