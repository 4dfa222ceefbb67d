"""f-divergence generators for RBFM-Heavy's uncertainty set.

Each generator gives f, f' and (f')^{-1}, and the closed-form maximiser of the
pointwise problem  max_{w >= 0} w c - tau f(w)  (Proposition 3):
w* = max(0, (f')^{-1}(c / tau)). Where f' is bounded above (SoftTV: f' < 1/2)
the supremum is infinite for c / tau >= sup f'; y = c / tau is clamped just below
it, and the dual's tau term is what must push tau up until c / tau < sup f'.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from rbfm.errors import unknown

Fn = Callable[[torch.Tensor], torch.Tensor]

# SoftTV's inverse derivative is artanh(2y) + 1, finite only for |y| < 1/2.
_SOFT_TV_MARGIN = 1e-6


@dataclass(frozen=True)
class Divergence:
    name: str
    f: Fn
    f_prime: Fn
    f_prime_inv: Fn  # valid on (f'(0), y_max)
    f_prime_at_zero: float  # below it w* = 0 (-inf: w* > 0 always)
    y_max: float  # sup of f' (inf: unbounded)

    def w_star(self, c: torch.Tensor, tau: torch.Tensor | float) -> torch.Tensor:
        """argmax_{w >= 0} w c - tau f(w), for tau > 0, in its three regimes."""
        y = c / tau
        if math.isfinite(self.y_max):
            y = y.clamp(max=self.y_max - _SOFT_TV_MARGIN)
        if math.isfinite(self.f_prime_at_zero):
            # Evaluate the inverse only where it is defined and w* is positive.
            inside = y > self.f_prime_at_zero
            safe = torch.where(inside, y, torch.full_like(y, self.f_prime_at_zero + 1e-3))
            return torch.where(inside, self.f_prime_inv(safe).clamp(min=0.0), torch.zeros_like(y))
        return self.f_prime_inv(y)


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
    ),
    "kl": Divergence(
        name="kl",
        f=_kl_f,
        f_prime=lambda w: torch.log(w) + 1,
        f_prime_inv=lambda y: torch.exp(y - 1),
        f_prime_at_zero=-math.inf,
        y_max=math.inf,
    ),
    "chi2": Divergence(
        name="chi2",
        f=lambda w: (w - 1) ** 2,
        f_prime=lambda w: 2 * (w - 1),
        f_prime_inv=lambda y: 1 + y / 2,
        f_prime_at_zero=-2.0,
        y_max=math.inf,
    ),
}


def get_divergence(name: str) -> Divergence:
    if name not in DIVERGENCES:
        raise unknown("divergence", name, DIVERGENCES)
    return DIVERGENCES[name]
