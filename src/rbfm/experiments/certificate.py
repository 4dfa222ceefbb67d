"""Robustness certificates: a policy's imitation loss on its demonstrations, nominal and
in the worst case over each method's uncertainty set, by the very dual functions the
methods optimise.

- `tv`: RBFM-Light's / DRBC's set, the TV ball of radius eps around the demonstrations'
  distribution. `duals.light_worst_case` solves it exactly: the value is the worst case.
- `heavy`: RBFM-Heavy's / BE-DROIL's set, occupancies realisable under some dynamics
  within f-divergence eps of the demonstrations'. The dual (Section 3.2) is minimised over
  a critic Q and tau on every transition by `rbfm_heavy.fit_critic` with RBFM-Heavy's
  default critic: exactly, as a linear program, where the ball constrains nothing (the
  critic linear in the features; SoftTV radii >= 0.717), else by fitting the MLP critic
  (tau kept where the dual is finite, at most `steps` steps).
  By weak duality the dual at any (Q, tau) bounds the worst case from above for the
  demonstrations' own chain of transitions, whose next pairs are its current pairs
  shifted by one step (exactly so but for the trajectories' ends); it is the quantity
  RBFM-Heavy minimises, so policies are compared on the same footing. The worst case
  grows with the radius (a larger ball holds the smaller), so the number reported for a
  radius is the least of the duals reached at it and at every larger radius: an MLP fit
  stopped by its step cap is not reported above the exact value of a larger ball. A
  bound no fit could make finite is reported as inf, never as a clamped number.

Losses are the policy's deterministic squared action errors ||pi(s) - a||^2 (no
smoothing noise), over every demonstration transition the policy was inferred from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from rbfm.inference.rbfm_heavy import HeavyConfig, fit_critic
from rbfm.robust.duals import light_worst_case

RADII = (0.2, 0.4, 0.6, 0.8, 1.0)


# What a certificate's value depends on besides the policy, its demonstrations and the
# radii and steps: part of a certificate cell's id, so that changing any of it (or how
# certificates are computed: `version`) recomputes them.
@dataclass(frozen=True)
class HeavySettings:
    gamma: float = 0.99
    divergence: str = "soft_tv"
    seed: int = 0  # the MLP critic's initialisation
    version: int = 2  # 2: bounds tightened by the larger radii's


HEAVY = HeavySettings()


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
    steps: int = 3000,
    gamma: float = HEAVY.gamma,
    divergence: str = HEAVY.divergence,
    seed: int = HEAVY.seed,
) -> list[Certificate]:
    """The Heavy dual for each radius, (Q, tau) fitted on every transition.

    `feat`/`next_feat` are the critic's inputs at (s, a) and (s', a'): the FB features
    F(s, a, z_w) for task vectors, the raw pairs for baseline policies (as BE-DROIL).
    Every demonstration state is an initial state, as in inference. `steps` caps each fit.
    In the order of `radii`.
    """
    nominal = float(losses.mean())
    bounds, bound = {}, math.inf
    for r in sorted(set(radii), reverse=True):
        cfg = HeavyConfig(steps=steps, eps=r, gamma=gamma, divergence=divergence)
        value, _, _, _ = fit_critic(losses, feat, next_feat, cfg, seed)
        bound = min(bound, value)
        bounds[r] = bound
    return [Certificate("heavy", r, nominal, bounds[r]) for r in radii]
