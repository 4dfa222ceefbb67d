"""The robust dual objectives as pure functions, shared by RBFM and the baselines.

RBFM-Light / DRBC (Propositions 1-2): the worst case of E[l] over a TV ball of
radius eps around the nominal distribution equals
    min_lambda  g(lambda) = E[(l - lambda)_+] + eps (max l - lambda)_+ + lambda.
g is convex and piecewise linear with kinks at the losses, so its minimiser is
found exactly by sorting them.

RBFM-Heavy / BE-DROIL (Section 3.2): with c = l(s) + gamma Q(s', a') - Q(s, a),
the critic minimises over (Q, tau >= 0)
    (1 - gamma) E_mu[Q(s0, a0)] + eps tau + E[w* c - tau f(w*)],
w* = max(0, (f')^{-1}(c / tau)); the task vector (or policy) then minimises
E[sg(w*) l]. (The paper's Algorithm 3 writes the last term with eps for tau and
the sign of f flipped; this is the equation of Section 3.2.)
"""

from __future__ import annotations

import math
import warnings

import torch

from rbfm.checks import in_range
from rbfm.robust.divergences import Divergence, get_divergence

MIN_TAU = 1e-6  # solvers keep tau in [MIN_TAU, inf): w* needs c / tau


def _mean(x: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
    return x.mean() if weights is None else (weights * x).sum() / weights.sum()


def light_worst_case(
    losses: torch.Tensor, eps: float, weights: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(q*, lambda*): the worst-case distribution over the TV ball and g's minimiser.

    One sort, no solver: the adversary moves eps of mass (at most all the mass not
    already there) from the smallest losses onto the largest one. Walking down the
    sorted losses, each point keeps its nominal mass until the total reaches 1;
    lambda* is the loss where that happens (the kink where g's slope
    1 - eps - P(l > lambda) changes sign), so min_lambda g = g(lambda*) = E_q*[l].
    """
    with torch.no_grad():
        flat = losses.detach().flatten()
        p = (
            torch.full_like(flat, 1 / len(flat))
            if weights is None
            else weights.detach().flatten().to(flat) / weights.sum()
        )
        ls, order = flat.sort(descending=True)
        ps = p[order]
        moved = min(eps, 1 - float(ps[0]))
        budget = 1 - moved - (torch.cumsum(ps, 0) - ps)  # what is left for point i
        qs = torch.minimum(budget.clamp(min=0), ps)
        qs[0] = ps[0] + moved
        q = torch.empty_like(qs).scatter_(0, order, qs).reshape(losses.shape)
        lam = ls[(qs > 0).nonzero().max()]
    return q, lam


def light_objective(
    losses: torch.Tensor, eps: float, weights: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(g(lambda*), lambda*): the TV-ball worst case, differentiable in the losses.

    The value is computed in its primal form E_q*[l], which equals
    g(lambda*) = E[(l - lambda*)_+] + eps (max l - lambda*)_+ + lambda* (tested), so
    that its gradient is q* itself (Danskin's theorem on max_q E_q[l]), also where
    losses tie, where differentiating g with lambda* held fixed would not be.
    """
    q, lam = light_worst_case(losses, eps, weights)
    return (q * losses).sum(), lam


def light_smoothed(
    losses: torch.Tensor, lam: torch.Tensor, eps: float, temperature: float
) -> torch.Tensor:
    """g(lambda) with its kinks smoothed at `temperature` T, for quasi-Newton descents:
        mean(T softplus((l - lambda) / T)) + eps T softplus((M_T - lambda) / T) + lambda,
    M_T = T logsumexp(l / T) the soft maximum. Each smoothed piece exceeds its exact one by
    at most T log 2 (softplus) or T log n (M_T), so with V the exact worst case
        V <= min_lambda light_smoothed <= V + T ((1 + eps) log 2 + eps log n),
    and it is smooth in (l, lambda) jointly."""
    t = temperature
    soft_max = t * logsumexp_floored(losses / t)
    mean_part = (t * softplus_floored((losses - lam) / t)).mean()
    return mean_part + eps * t * softplus_floored((soft_max - lam) / t) + lam


# exp(-60) ~ 1e-26: terms this far below the largest change no float32 sum, and their
# exponentials (in the gradients) would otherwise be denormal floats, which CPUs process
# ~100x slower (measured: a backward pass through a smoothed objective took 2 s, not 50 ms).
_FLOOR = 60.0


def softplus_floored(x: torch.Tensor) -> torch.Tensor:
    """softplus(x), with x raised to -60 first (changes it by < 1e-26)."""
    return torch.nn.functional.softplus(x.clamp(min=-_FLOOR))


def logsumexp_floored(x: torch.Tensor) -> torch.Tensor:
    """logsumexp over the first dimension, each element raised to (max - 60) first."""
    top = x.detach().max()
    return torch.logsumexp(torch.maximum(x, top - _FLOOR), 0)


def light_dual(
    losses: torch.Tensor, lam: torch.Tensor | float, eps: float, weights: torch.Tensor | None = None
) -> torch.Tensor:
    """g(lambda) of Proposition 1 (for checks and plots; training uses light_objective)."""
    return _mean(torch.relu(losses - lam), weights) + eps * torch.relu(losses.max() - lam) + lam


def heavy_residual(
    loss: torch.Tensor, q: torch.Tensor, q_next: torch.Tensor, gamma: float
) -> torch.Tensor:
    """c = l(s) + gamma Q(s', a') - Q(s, a)."""
    return loss + gamma * q_next - q


def heavy_critic_loss(
    q0: torch.Tensor,
    c: torch.Tensor,
    tau: torch.Tensor,
    eps: float,
    gamma: float,
    divergence: Divergence,
    weights: torch.Tensor | None = None,
    q0_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The dual in (Q, tau) at the closed-form w*, and w* itself (detached).

    By Danskin's theorem the gradient of the inner maximum is its gradient at the
    maximiser, so w* is computed without gradient. `weights` (optional) are the
    nominal probabilities of the transitions when the expectation is exact.

    Where some c / tau reaches the end of f''s range (SoftTV: 1/2) the pointwise
    supremum is not attained (w* = +inf) and the value is +inf: an honest bound, never
    a clamped finite one. Solvers keep tau above `divergence.tau_floor(c)` to stay finite.
    """
    w = divergence.w_star(c.detach(), tau.detach()).detach()
    finite = torch.isfinite(w)
    w_safe = torch.where(finite, w, torch.zeros_like(w))  # no inf * 0 in the gradient
    inner = w_safe * c - tau * divergence.f(w_safe)
    value = (1 - gamma) * _mean(q0, q0_weights) + eps * tau + _mean(inner, weights)
    if not bool(finite.all()):
        value = value + torch.full_like(value.detach(), math.inf)
    return value, w


def heavy_policy_loss(
    w: torch.Tensor, loss: torch.Tensor, weights: torch.Tensor | None = None
) -> torch.Tensor:
    """E[sg(w*) l]: the imitation loss under the worst-case occupancy."""
    return _mean(w.detach() * loss, weights)


class InactiveBallWarning(UserWarning):
    """The f-ball's radius reaches the largest divergence any distribution on the samples
    has (`Divergence.largest`): the ball constrains nothing."""


_WARNED: set[str] = set()


def ball_inactive(owner: str, divergence: Divergence, eps: float, n: int) -> bool:
    """Whether the f-ball of radius eps around n equally weighted transitions holds every
    distribution on them, with an `InactiveBallWarning` when it does. Then the robust
    problem's optimal tau is 0 and its worst case is limited only by the Bellman-flow
    constraints the critic can express: SoftTV at the paper's eps = 0.8 is such a case
    (every distribution is within 0.717), so eps 0.8 and 1.0 pose the same problem."""
    largest = divergence.largest(n)
    if eps < largest:
        return False
    if owner in _WARNED:  # once per method and process: every inference of a grid hits it
        return True
    _WARNED.add(owner)
    warnings.warn(
        f"{owner}: eps {eps:g} is at least {largest:.3f}, the largest {divergence.name} "
        f"divergence of any distribution on these transitions: the ball holds every "
        f"distribution and only the Bellman-flow constraints bound the worst case "
        f"(a smaller eps makes the radius count)",
        InactiveBallWarning,
        stacklevel=3,
    )
    return True


def check_heavy(owner: str, eps: float, gamma: float, divergence: str, tau_init: float) -> None:
    """The dual's own settings (RBFM-Heavy and BE-DROIL)."""
    in_range(owner, "eps", eps, 0, 100)
    in_range(owner, "gamma", gamma, 0, 1, open_low=True, open_high=True)
    in_range(owner, "tau_init", tau_init, 0, open_low=True)
    get_divergence(divergence)  # unknown names are refused with the valid ones
