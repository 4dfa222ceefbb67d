"""Robustness certificates: a policy's imitation loss on its demonstrations, nominal and
in the worst case over each method's uncertainty set, by the very dual functions the
methods optimise.

- `tv`: RBFM-Light's / DRBC's set, the TV ball of radius eps around the demonstrations'
  distribution. `duals.light_worst_case` solves it exactly: the value is the worst case.
- `heavy`: RBFM-Heavy's / BE-DROIL's set, occupancies realisable under some dynamics
  within f-divergence eps of the demonstrations'. The dual (Section 3.2) is minimised over
  a critic Q and tau; the number reported is its value at the fitted (Q, tau) on every
  transition. By weak duality the dual at any (Q, tau) bounds the worst case from above
  for the demonstrations' own chain of transitions, whose next pairs are its current
  pairs shifted by one step (exactly so but for the trajectories' ends); it is the
  quantity RBFM-Heavy minimises, so policies are compared on the same footing.

Losses are the policy's deterministic squared action errors ||pi(s) - a||^2 (no
smoothing noise), over every demonstration transition the policy was inferred from.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from rbfm.inference.divergences import get_divergence
from rbfm.inference.duals import heavy_critic_loss, heavy_residual, light_worst_case
from rbfm.inference.rbfm_heavy import critic_step

RADII = (0.2, 0.4, 0.6, 0.8, 1.0)


@dataclass(frozen=True)
class Certificate:
    uncertainty_set: str  # "tv" or "heavy"
    radius: float
    nominal: float  # mean loss on the demonstrations
    worst_case: float  # tv: exact worst case; heavy: an upper bound on it


def tv_certificates(losses: torch.Tensor, radii: tuple[float, ...]) -> list[Certificate]:
    nominal = float(losses.mean())
    out = []
    for r in radii:
        q, _ = light_worst_case(losses, r)
        out.append(Certificate("tv", r, nominal, float((q * losses).sum())))
    return out


def heavy_certificates(
    losses: torch.Tensor,
    feat: torch.Tensor,
    next_feat: torch.Tensor,
    radii: tuple[float, ...],
    steps: int = 300,
    gamma: float = 0.99,
    divergence: str = "soft_tv",
    hidden: int = 64,
    lr: float = 3e-3,
    batch_size: int = 512,
    seed: int = 0,
) -> list[Certificate]:
    """The Heavy dual for each radius: (Q, tau) fitted on minibatches, then the dual
    evaluated exactly on every transition at the fitted (Q, tau).

    `feat`/`next_feat` are the critic's inputs at (s, a) and (s', a'): the FB features
    F(s, a, z_w) for task vectors, the raw pairs for baseline policies (as BE-DROIL).
    Every demonstration state is an initial state, as in inference.
    """
    div = get_divergence(divergence)
    losses = losses.detach()
    nominal = float(losses.mean())
    out = []
    gen = torch.Generator(feat.device).manual_seed(seed)
    for r in radii:
        torch.manual_seed(seed)
        q = nn.Sequential(
            nn.Linear(feat.shape[-1], hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, 1),
        ).to(feat.device)
        tau = torch.tensor(1.0, device=feat.device, requires_grad=True)
        opt = torch.optim.Adam([*q.parameters(), tau], lr=lr)
        for _ in range(steps):
            idx = torch.randint(len(feat), (batch_size,), generator=gen, device=feat.device)
            q_s = q(feat[idx])[:, 0]
            critic_step(q_s, q(next_feat[idx])[:, 0], q_s, losses[idx], tau, opt, r, gamma, div)
        with torch.no_grad():
            q_s = q(feat)[:, 0]
            c = heavy_residual(losses, q_s, q(next_feat)[:, 0], gamma)
            value, _ = heavy_critic_loss(q_s, c, tau, r, gamma, div)
        out.append(Certificate("heavy", r, nominal, float(value)))
    return out
