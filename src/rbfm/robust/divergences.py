"""f-divergence generators for RBFM-Heavy's uncertainty set.

Each generator gives f, f' and (f')^{-1}, and the closed-form maximiser of the
pointwise problem  max_{w >= 0} w c - tau f(w)  (Proposition 3):
w* = max(0, (f')^{-1}(c / tau)). Where f' is bounded above (SoftTV: f' < 1/2) the
supremum is +infinity for y = c / tau > sup f' and is not attained at y = sup f':
there w* is +inf, never a clamped finite value. The dual is then only finite for
tau >= c / sup f' on every transition, so its solvers keep tau there (`tau_floor`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from rbfm.errors import unknown

Fn = Callable[[torch.Tensor], torch.Tensor]

# The largest y = c / tau a solver lets tau reach (`tau_floor`). SoftTV: just inside
# its domain y < 1/2, where w* = 1 + artanh(1 - 1e-4) ~ 5.95 is finite. KL: its value
# exp(y - 1) is finite for every y but overflows float32 beyond y ~ 89; 50 keeps w*
# below 2e21, far above any weight a KL ball of radius <= 100 over <= 1e6 transitions
# admits (E[w log w] <= eps bounds every w by ~ n eps), so the bound never binds.
_SOFT_TV_Y_CAP = 0.5 * (1 - 1e-4)
_KL_Y_CAP = 50.0


@dataclass(frozen=True)
class Divergence:
    name: str
    f: Fn
    f_prime: Fn
    f_prime_inv: Fn  # valid on (f'(0), y_max)
    f_prime_at_zero: float  # below it w* = 0 (-inf: w* > 0 always)
    y_max: float  # sup of f' (inf: unbounded); the pointwise sup is +inf beyond it
    y_cap: float  # the largest c / tau solvers allow (<= y_max; see _SOFT_TV_Y_CAP)

    def w_star(self, c: torch.Tensor, tau: torch.Tensor | float) -> torch.Tensor:
        """argmax_{w >= 0} w c - tau f(w), for tau > 0, in its three regimes: 0 for
        y = c / tau <= f'(0), (f')^{-1}(y) inside, +inf for y >= sup f' (no maximiser:
        the value grows without bound, or only approaches its sup as w -> inf)."""
        y = c / tau
        low = y <= self.f_prime_at_zero
        high = y >= self.y_max
        # Evaluate the inverse only where it is defined and w* is finite and positive.
        inside = ~(low | high)
        mid = 0.5 * (max(self.f_prime_at_zero, -1e3) + min(self.y_max, 1e3))
        safe = torch.where(inside, y, torch.full_like(y, mid))
        w = self.f_prime_inv(safe).clamp(min=0.0)
        w = torch.where(low, torch.zeros_like(w), w)
        return torch.where(high, torch.full_like(w, math.inf), w)

    def largest(self, n: int) -> float:
        """The largest divergence of any distribution q on n points from the uniform one,
        max_q E_u[f(n q)]: D_f is convex in q, so it is reached at a point mass,
        f(n) / n + (1 - 1/n) f(0). SoftTV: 0.706 at n = 100, -> f(0) + 1/2 = 0.717 as n
        grows (f grows like |w - 1| / 2); KL: log n; chi2: n - 1. A ball of this radius
        or more around n samples holds every distribution on them: its constraint is
        inactive and the worst case is limited by the other constraints alone."""
        fn, f0 = self.f(torch.tensor([float(n), 0.0], dtype=torch.float64)).tolist()
        return fn / n + (1 - 1 / n) * f0

    def tau_floor(self, c: torch.Tensor) -> torch.Tensor:
        """The smallest tau with c / tau <= y_cap on every element of c (0 when no c is
        positive): below it the dual is +inf (SoftTV) or overflows (KL). Differentiable
        in c (through its largest element), for solvers that keep tau above it by
        construction."""
        top = c.max().clamp(min=0.0)
        return top / self.y_cap if math.isfinite(self.y_cap) else torch.zeros_like(top)


def _soft_tv_f(w: torch.Tensor) -> torch.Tensor:
    # 0.5 log cosh(x) computed stably: |x| + log(1 + exp(-2|x|)) - log 2.
    x = (w - 1).abs()
    return 0.5 * (x + torch.nn.functional.softplus(-2 * x) - math.log(2))


def _kl_f(w: torch.Tensor) -> torch.Tensor:
    return torch.xlogy(w, w)  # w log w, with 0 log 0 = 0


DIVERGENCES: dict[str, Divergence] = {
    "soft_tv": Divergence(
        name="soft_tv",
        f=_soft_tv_f,
        f_prime=lambda w: 0.5 * torch.tanh(w - 1),
        f_prime_inv=lambda y: 1 + torch.atanh(2 * y),
        f_prime_at_zero=0.5 * math.tanh(-1.0),
        y_max=0.5,
        y_cap=_SOFT_TV_Y_CAP,
    ),
    "kl": Divergence(
        name="kl",
        f=_kl_f,
        f_prime=lambda w: torch.log(w) + 1,
        f_prime_inv=lambda y: torch.exp(y - 1),
        f_prime_at_zero=-math.inf,
        y_max=math.inf,
        y_cap=_KL_Y_CAP,
    ),
    "chi2": Divergence(
        name="chi2",
        f=lambda w: (w - 1) ** 2,
        f_prime=lambda w: 2 * (w - 1),
        f_prime_inv=lambda y: 1 + y / 2,
        f_prime_at_zero=-2.0,
        y_max=math.inf,
        y_cap=math.inf,
    ),
}


def get_divergence(name: str) -> Divergence:
    if name not in DIVERGENCES:
        raise unknown("divergence", name, DIVERGENCES)
    return DIVERGENCES[name]
