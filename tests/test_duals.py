"""The robust duals against their primal problems, solved exactly.

Light: the dual at the sorted-loss lambda equals the worst case over the TV ball
(a linear program) and a brute-force minimisation over lambda.
Heavy: on random finite MDPs, the dual minimised over (Q, tau) with the closed-form
w* equals the primal maximum over occupancies that satisfy the Bellman flow
constraints and the f-divergence ball (a convex program), for SoftTV and KL.
"""

from __future__ import annotations

import math
import warnings

import cvxpy as cp
import numpy as np
import pytest
import torch
from scipy.optimize import linprog, minimize_scalar

from rbfm.inference import method_config
from rbfm.inference.rbfm_heavy import fit_critic
from rbfm.robust import (
    DIVERGENCES,
    InactiveBallWarning,
    ball_inactive,
    get_divergence,
    heavy_critic_loss,
    heavy_policy_loss,
    heavy_residual,
    light_dual,
    light_objective,
)
from rbfm.robust.duals import light_smoothed
from rbfm.robust.flow_lp import FlowLP, FlowLPError, flow_smoothed

# ------------------------------------------------------------------ RBFM-Light


def _tv_worst_case(losses: np.ndarray, p: np.ndarray, eps: float) -> tuple[float, np.ndarray]:
    """max_q E_q[l] s.t. q a distribution and TV(q, p) = 0.5 |q - p|_1 <= eps."""
    n = len(losses)
    # variables [q (n), t (n)] with t >= |q - p|
    c = np.concatenate([-losses, np.zeros(n)])
    eye = np.eye(n)
    a_ub = np.block([[eye, -eye], [-eye, -eye], [np.zeros((1, n)), 0.5 * np.ones((1, n))]])
    b_ub = np.concatenate([p, -p, [eps]])
    a_eq = np.concatenate([np.ones(n), np.zeros(n)])[None]
    res = linprog(c, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=[1.0], bounds=[(0, None)] * (2 * n))
    assert res.status == 0
    return float(-res.fun), res.x[:n]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("eps", [0.05, 0.3, 0.8])
def test_light_dual_equals_the_tv_worst_case(seed: int, eps: float) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 40))
    losses = rng.exponential(1.0, n) * (rng.random(n) < 0.8)  # ties at 0 included
    uniform = seed % 2 == 0
    p = np.full(n, 1 / n) if uniform else rng.dirichlet(np.ones(n))
    weights = None if uniform else torch.tensor(p)
    loss_t = torch.tensor(losses, requires_grad=True)
    value, lam = light_objective(loss_t, eps, weights)
    worst, _ = _tv_worst_case(losses, p, eps)
    assert float(value.detach()) == pytest.approx(worst, abs=1e-9)
    # Its gradient is a worst-case distribution: it attains the worst case itself.
    value.backward()
    assert loss_t.grad is not None
    grad = loss_t.grad.numpy()
    assert grad.min() >= -1e-12 and grad.sum() == pytest.approx(1.0)
    assert 0.5 * np.abs(grad - p).sum() <= eps + 1e-9 and grad @ losses == pytest.approx(worst)

    def g(x: float) -> float:
        return float(p @ np.maximum(losses - x, 0) + eps * max(losses.max() - x, 0) + x)

    grid = np.linspace(losses.min() - 1, losses.max() + 1, 20001)
    brute = min(g(x) for x in grid)
    assert float(value.detach()) <= brute + 1e-12
    assert float(value.detach()) == pytest.approx(brute, abs=1e-3)
    assert g(float(lam)) == pytest.approx(float(value.detach()), abs=1e-12)
    g_rbfm = light_dual(torch.tensor(losses), float(lam), eps, weights)
    assert float(g_rbfm) == pytest.approx(float(value.detach()), abs=1e-12)
    assert 0 <= float(lam) <= (1 + eps) * losses.max()  # Proposition 2's interval


def test_light_gradient_when_the_ball_reaches_a_point_mass_on_the_max() -> None:
    losses = torch.tensor([0.1, 0.5, 2.0, 0.3], requires_grad=True)
    value, lam = light_objective(losses, 0.8)
    value.backward()
    # eps = 0.8 > the 0.75 held by the other points: the worst case is all on the max.
    assert float(lam) == 2.0 and float(value.detach()) == pytest.approx(2.0)
    assert losses.grad is not None
    assert losses.grad.tolist() == pytest.approx([0.0, 0.0, 1.0, 0.0], abs=1e-12)


# ------------------------------------------------------------ divergences, w*


@pytest.mark.parametrize("name", list(DIVERGENCES))
def test_w_star_is_the_pointwise_argmax(name: str) -> None:
    div = get_divergence(name)
    rng = np.random.default_rng(0)
    for _ in range(40):
        tau = float(rng.uniform(0.2, 3.0))
        upper = 0.49 if name == "soft_tv" else 2.0
        c = float(rng.uniform(-1.5, upper)) * tau
        w = float(div.w_star(torch.tensor(c, dtype=torch.float64), tau))

        def neg(x: float, c: float = c, tau: float = tau) -> float:
            return -(x * c - tau * float(div.f(torch.tensor(x, dtype=torch.float64))))

        best = minimize_scalar(neg, bounds=(0.0, 60.0), method="bounded", options={"xatol": 1e-10})
        assert w == pytest.approx(best.x, abs=1e-4), (c, tau)
        assert -neg(w) >= -best.fun - 1e-9


def test_soft_tv_three_regimes() -> None:
    div = get_divergence("soft_tv")
    f0 = 0.5 * math.tanh(-1)
    y = torch.tensor([-5.0, f0 - 1e-3, 0.0, 0.3, 0.5, 3.0], dtype=torch.float64)
    w = div.w_star(y, 1.0)
    assert w[0] == 0 and w[1] == 0  # below f'(0): the optimum is at w = 0
    assert float(w[2]) == pytest.approx(1.0)  # f'(1) = 0
    assert float(w[3]) == pytest.approx(1 + math.atanh(0.6))
    # At and beyond 1/2 the supremum is not attained (infinite beyond): w* = +inf, not a
    # clamped finite weight.
    assert math.isinf(w[4]) and math.isinf(w[5])
    np.testing.assert_allclose(div.f_prime(w[2:4]), y[2:4])


# ------------------------------------------------------------------ RBFM-Heavy


def _mdp(seed: int, S: int = 4, A: int = 2) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    P = rng.dirichlet(np.ones(S) * 0.7, size=(S, A))
    P[P < 0.05] = 0  # sparse supports, as real transitions have
    P /= P.sum(-1, keepdims=True)
    pi = rng.dirichlet(np.ones(A), size=S)
    mu = rng.dirichlet(np.ones(S))
    loss = rng.uniform(0, 1, S)
    return {"P": P, "pi": pi, "mu": mu, "loss": loss}


def _nominal_occupancy(m: dict[str, np.ndarray], gamma: float) -> np.ndarray:
    P, pi, mu = m["P"], m["pi"], m["mu"]
    P_pi = np.einsum("sa,sat->st", pi, P)
    d = (1 - gamma) * np.linalg.solve((np.eye(len(mu)) - gamma * P_pi).T, mu)
    return np.einsum("s,sa,sat->sat", d, pi, P)


def _primal(m: dict[str, np.ndarray], gamma: float, eps: float, name: str) -> float:
    """max_rho sum rho(s,a,s') l(s) over Bellman-flow occupancies in the f-ball."""
    rho0 = _nominal_occupancy(m, gamma)
    S, A = m["pi"].shape
    support = np.argwhere(rho0 > 1e-12)
    r0 = rho0[tuple(support.T)]
    rho = cp.Variable(len(support), nonneg=True)
    ratio = cp.multiply(rho, 1 / r0)
    if name == "kl":
        div = cp.sum(cp.multiply(r0, cp.entr(ratio))) * -1  # sum r0 * w log w
    else:  # 0.5 log cosh(w - 1) = 0.5 (logistic(2(w - 1)) - (w - 1) - log 2)
        div = 0.5 * cp.sum(
            cp.multiply(r0, cp.logistic(2 * (ratio - 1)) - (ratio - 1) - math.log(2))
        )
    flow = []
    for s in range(S):
        for a in range(A):
            out = [i for i, (s1, a1, _) in enumerate(support) if (s1, a1) == (s, a)]
            into = [i for i, (_, _, s2) in enumerate(support) if s2 == s]
            rhs = (1 - gamma) * m["mu"][s] * m["pi"][s, a]
            rhs = rhs + gamma * m["pi"][s, a] * (cp.sum(rho[into]) if into else 0)
            flow.append((cp.sum(rho[out]) if out else 0) == rhs)
    problem = cp.Problem(cp.Maximize(m["loss"][support[:, 0]] @ rho), [*flow, div <= eps])
    problem.solve(solver=cp.CLARABEL)
    assert problem.status == "optimal"
    return float(problem.value)


def _dual(m: dict[str, np.ndarray], gamma: float, eps: float, name: str) -> float:
    """min over a tabular Q and tau > 0 of rbfm's heavy_critic_loss with exact weights."""
    rho0 = torch.tensor(_nominal_occupancy(m, gamma))
    S, A = m["pi"].shape
    idx = rho0.nonzero()
    s, a, s2 = idx.T
    weights = rho0[s, a, s2]
    pi, mu = torch.tensor(m["pi"]), torch.tensor(m["mu"])
    loss = torch.tensor(m["loss"])[s]
    q_table = torch.zeros(S, A, dtype=torch.float64, requires_grad=True)
    log_tau = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
    div = get_divergence(name)
    opt = torch.optim.LBFGS(
        [q_table, log_tau],
        max_iter=2000,
        tolerance_grad=1e-12,
        tolerance_change=1e-15,
        history_size=50,
        line_search_fn="strong_wolfe",
    )

    def objective() -> torch.Tensor:
        q_next = (pi * q_table).sum(-1)[s2]  # E_{a' ~ pi(s')} Q(s', a')
        c = heavy_residual(loss, q_table[s, a], q_next, gamma)
        # Where f' is bounded (SoftTV) the dual is +inf for tau < c / sup f': search only
        # where it is finite (the optimum is inside, its weights being finite here).
        floor = c.clamp(min=0).max() / div.y_cap if math.isfinite(div.y_max) else 0.0
        value, _ = heavy_critic_loss(
            q_table.flatten(),
            c,
            floor + log_tau.exp(),
            eps,
            gamma,
            div,
            weights=weights,
            q0_weights=(mu[:, None] * pi).flatten(),
        )
        return value

    def closure() -> torch.Tensor:
        opt.zero_grad()
        value = objective()
        value.backward()
        return value

    for _ in range(5):
        opt.step(closure)
    return float(objective().detach())


@pytest.mark.parametrize("name", ["soft_tv", "kl"])
@pytest.mark.parametrize("seed", range(3))
def test_heavy_dual_equals_the_robust_primal(name: str, seed: int) -> None:
    m, gamma, eps = _mdp(seed), 0.9, 0.05
    primal, dual = _primal(m, gamma, eps, name), _dual(m, gamma, eps, name)
    nominal = float((_nominal_occupancy(m, gamma).sum((1, 2)) * m["loss"]).sum())
    assert primal > nominal + 1e-3  # the adversary gains: the ball constraint binds
    assert dual == pytest.approx(primal, rel=1e-5, abs=1e-7)


def test_heavy_policy_loss_weights_losses_without_gradient_to_w() -> None:
    w = torch.tensor([0.0, 2.0, 1.0], requires_grad=True)
    loss = torch.tensor([1.0, 3.0, 5.0], requires_grad=True)
    value = heavy_policy_loss(w, loss)
    value.backward()
    assert float(value.detach()) == pytest.approx((0 + 6 + 5) / 3)
    assert w.grad is None and loss.grad is not None
    assert loss.grad.tolist() == pytest.approx([0.0, 2 / 3, 1 / 3])


@pytest.mark.parametrize("name", ["soft_tv", "kl"])
@pytest.mark.parametrize("seed", range(3))
def test_heavy_dual_at_any_critic_bounds_the_primal_or_is_infinite(name: str, seed: int) -> None:
    """The Heavy certificate is the dual at whatever (Q, tau) a fit reached: by weak
    duality it bounds the robust primal from above at every (Q, tau), and where tau is
    below the dual's domain (SoftTV: some c / tau >= 1/2) it is +inf, never a clamped
    finite number and never NaN."""
    m, gamma, eps = _mdp(seed), 0.9, 0.05
    primal = _primal(m, gamma, eps, name)
    rho0 = torch.tensor(_nominal_occupancy(m, gamma))
    s, a, s2 = rho0.nonzero().T
    pi, mu = torch.tensor(m["pi"]), torch.tensor(m["mu"])
    div = get_divergence(name)
    rng = np.random.default_rng(seed)
    infinite = 0
    for _ in range(200):
        q_table = torch.tensor(rng.normal(0, 3, m["pi"].shape))
        c = heavy_residual(
            torch.tensor(m["loss"])[s], q_table[s, a], (pi * q_table).sum(-1)[s2], gamma
        )
        tau = torch.tensor(float(np.exp(rng.uniform(-4, 3))), dtype=torch.float64)
        value, _ = heavy_critic_loss(
            q_table.flatten(),
            c,
            tau,
            eps,
            gamma,
            div,
            weights=rho0[s, a, s2],
            q0_weights=(mu[:, None] * pi).flatten(),
        )
        assert not torch.isnan(value)
        assert float(value) >= primal - 1e-9
        if name == "soft_tv" and float(c.max() / tau) > 0.5:
            assert math.isinf(float(value)) and float(value) > 0
            infinite += 1
    assert infinite > 0 or name == "kl"  # the draws did reach outside the domain


def test_kl_overflow_is_an_infinite_bound_not_nan() -> None:
    """KL's w* = exp(c / tau - 1) overflows float32 for c / tau > ~89: the value is
    reported as +inf, and its gradient stays finite (no inf * 0)."""
    div = get_divergence("kl")
    c = torch.tensor([0.5, 200.0], requires_grad=True)
    tau = torch.tensor(1.0, requires_grad=True)
    value, w = heavy_critic_loss(torch.zeros(2), c, tau, 0.1, 0.9, div)
    assert math.isinf(float(value.detach())) and math.isinf(float(w[1]))
    value.backward()
    assert torch.isfinite(c.grad).all() and torch.isfinite(tau.grad)
    # Solvers keep tau above the floor, where the value is finite.
    floor = div.tau_floor(c.detach())
    finite, _ = heavy_critic_loss(torch.zeros(2), c.detach(), floor, 0.1, 0.9, div)
    assert math.isfinite(float(finite))


def _closed_loop(seed: int, S: int = 5, A: int = 2, n: int = 300) -> tuple[np.ndarray, ...]:
    """One trajectory of a random finite MDP closed into a loop (the last next pair is
    the first pair), so that uniform weights on its transitions satisfy the Bellman flow
    with every pair an initial one, as `fit_critic` assumes."""
    rng = np.random.default_rng(seed)
    P = rng.dirichlet(np.ones(S) * 0.7, size=(S, A))
    pi = rng.dirichlet(np.ones(A), size=S)
    s, a = [0], [rng.choice(A, p=pi[0])]
    for _ in range(n - 1):
        s.append(rng.choice(S, p=P[s[-1], a[-1]]))
        a.append(rng.choice(A, p=pi[s[-1]]))
    pair = np.array(s) * A + np.array(a)
    loss = rng.uniform(0, 1, S)[np.array(s)] + 0.1 * rng.random(n)
    return loss, pair, np.roll(pair, -1)


def _sample_primal(loss: np.ndarray, pair: np.ndarray, nxt: np.ndarray, eps: float | None) -> float:
    """max over weights w >= 0 on the transitions of mean(w l), under the empirical flow
    constraints of every (s, a) pair and mean(f(w)) <= eps (SoftTV; none if eps is
    None), gamma 0.99."""
    n, gamma = len(loss), 0.99
    w = cp.Variable(n, nonneg=True)
    div = 0.5 * cp.sum(cp.logistic(2 * (w - 1)) - (w - 1) - math.log(2)) / n
    flow = []
    for k in np.unique(np.concatenate([pair, nxt])):
        out, into = (pair == k).astype(float), (nxt == k).astype(float)
        flow.append(out @ w / n == (1 - gamma) * out.mean() + gamma * (into @ w) / n)
    ball = [] if eps is None else [div <= eps]
    problem = cp.Problem(cp.Maximize(loss @ w / n), [*flow, *ball])
    problem.solve(solver=cp.CLARABEL)
    assert problem.status == "optimal"
    return float(problem.value)


@pytest.mark.parametrize(
    ("seed", "eps", "critic", "rel"),
    [
        (0, 0.8, "mlp", 0.015),
        (1, 0.05, "mlp", 1e-3),
        (0, 0.8, "linear", 1e-8),
        (1, 0.05, "linear", 1e-3),
    ],
)
def test_fit_critic_reaches_the_sample_primal(
    seed: int, eps: float, critic: str, rel: float
) -> None:
    """RBFM-Heavy's objective at a z (and the Heavy certificate) with one-hot (s, a)
    features, so that Q can be any table: its value bounds the exact robust primal of
    the same transitions from above and comes within `rel` of it. The linear critic's
    LP is exact where the ball constrains nothing (eps 0.8) and within its tangents' gap
    where it binds; the MLP fit (tau = floor + exp(param)) within 1.5% / 0.1% (the former
    parametrisation, log tau raised to the floor in place, stopped 13-33% above it)."""
    loss, pair, nxt = _closed_loop(seed)
    primal = _sample_primal(loss, pair, nxt, eps)
    eye = torch.eye(10)
    solver = "adam" if critic == "mlp" else "lbfgs"  # the MLP is fitted by Adam
    cfg = method_config("rbfm-heavy", eps=eps, critic=critic, solver=solver)
    value, tau, _, converged = fit_critic(
        torch.tensor(loss, dtype=torch.float32), eye[pair], eye[nxt], cfg
    )
    binds = eps < get_divergence("soft_tv").largest(len(loss))  # else the LP's tau is 0
    assert converged and (tau > 0) == (critic == "mlp" or binds)
    assert primal - 1e-4 <= value <= primal * (1 + rel)


@pytest.mark.parametrize("name", ["soft_tv", "kl", "chi2"])
def test_largest_divergence_is_that_of_a_point_mass(name: str) -> None:
    div, n = get_divergence(name), 7
    largest = div.largest(n)

    def d_f(q: np.ndarray) -> float:  # D_f(q || uniform) = mean f(n q)
        return float(div.f(torch.tensor(n * q, dtype=torch.float64)).mean())

    assert largest == pytest.approx(d_f(np.eye(n)[0]), rel=1e-12)
    qs = np.random.default_rng(0).dirichlet(np.full(n, 0.3), size=2000)
    assert max(d_f(q) for q in qs) < largest
    assert {"soft_tv": 0.7169, "kl": math.log(10**6), "chi2": 10**6 - 1}[name] == pytest.approx(
        div.largest(10**6), rel=1e-4
    )


def test_the_soft_tv_ball_at_the_papers_eps_constrains_nothing() -> None:
    """At eps 0.8 >= SoftTV's largest divergence on 300 samples (0.713), the robust
    primal equals the worst case under the flow constraints alone, and RBFM-Heavy says
    so; at eps 0.05 the ball binds."""
    loss, pair, nxt = _closed_loop(0)
    flow_only = _sample_primal(loss, pair, nxt, None)
    assert _sample_primal(loss, pair, nxt, 0.8) == pytest.approx(flow_only, rel=1e-5)
    assert _sample_primal(loss, pair, nxt, 0.05) < flow_only - 1e-3
    div = get_divergence("soft_tv")
    with pytest.warns(InactiveBallWarning, match="eps 0.8 is at least 0.713"):
        assert ball_inactive("test", div, 0.8, len(loss))
    assert not ball_inactive("test", div, 0.7, len(loss))
    # Once per method and process: a grid's every inference would repeat it.
    with warnings.catch_warnings():
        warnings.simplefilter("error", InactiveBallWarning)
        assert ball_inactive("test", div, 0.9, len(loss))


def test_the_flow_lp_re_solves_from_its_basis_as_from_scratch() -> None:
    """A descent's next losses re-solve from the last basis: same value and weights as a
    fresh solve, and weights with mean 1 that satisfy the flow constraints."""
    loss, pair, nxt = _closed_loop(2)
    eye, div = torch.eye(10), get_divergence("soft_tv")
    feat, next_feat = eye[pair][:, :-1], eye[nxt][:, :-1]  # the constant is the LP's own
    warm = FlowLP(feat, next_feat, 0.99, 0.8, div)
    warm.solve(torch.tensor(loss))
    other = torch.tensor(loss[::-1].copy())
    value, w = warm.solve(other)
    cold_value, _ = FlowLP(feat, next_feat, 0.99, 0.8, div).solve(other)
    assert value == pytest.approx(cold_value, rel=1e-9)
    assert value == pytest.approx(float((w.double() * other).mean()), rel=1e-6)
    assert float(w.mean()) == pytest.approx(1.0, abs=1e-6)
    inflow = (w[:, None] * (eye[pair] - 0.99 * eye[nxt])).mean(0)
    torch.testing.assert_close(inflow, 0.01 * eye[pair].mean(0), atol=1e-6, rtol=0)
    with pytest.raises(FlowLPError, match="finite losses"):
        warm.solve(torch.full((len(loss),), math.nan))


@pytest.mark.parametrize("eps", [0.3, 0.8])
def test_smoothed_light_objective_is_within_its_bound_of_the_exact_one(eps: float) -> None:
    """min over lambda of the smoothed g lies in [V, V + T ((1 + eps) log 2 + eps log n)],
    and approaches the exact TV worst case V as the temperature T falls."""
    losses = torch.tensor(np.random.default_rng(3).gamma(2.0, 0.3, 50))
    exact = float(light_objective(losses, eps)[0])
    gaps = []
    for t in (0.1, 0.01, 0.001):
        res = minimize_scalar(
            lambda lam, t=t: float(light_smoothed(losses, torch.tensor(lam), eps, t)),
            bounds=(float(losses.min()) - 1, float(losses.max()) + 1),
            method="bounded",
            options={"xatol": 1e-10},
        )
        bound = t * ((1 + eps) * math.log(2) + eps * math.log(len(losses)))
        assert exact - 1e-9 <= res.fun <= exact + bound
        gaps.append(res.fun - exact)
    assert gaps[0] > gaps[1] > gaps[2] and gaps[2] < 2e-3


def _min_over_beta(
    losses: torch.Tensor, feat: torch.Tensor, next_feat: torch.Tensor, t: float
) -> float:
    beta = torch.zeros(feat.shape[1], dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS(
        [beta], max_iter=500, tolerance_grad=1e-12, history_size=50, line_search_fn="strong_wolfe"
    )

    def closure() -> torch.Tensor:
        opt.zero_grad()
        value = flow_smoothed(losses, beta, feat, next_feat, 0.99, t)
        value.backward()
        return value

    for _ in range(5):
        opt.step(closure)
    return float(flow_smoothed(losses, beta.detach(), feat, next_feat, 0.99, t))


def test_smoothed_flow_dual_is_within_its_bound_of_the_lp() -> None:
    """min over beta of the smoothed linear-critic dual lies in [LP - T log n, LP] (the
    ball inactive) and approaches the LP's exact value as T falls."""
    loss, pair, nxt = _closed_loop(0)
    eye = torch.eye(10, dtype=torch.float64)
    feat, next_feat = eye[pair][:, :-1], eye[nxt][:, :-1]
    losses = torch.tensor(loss)
    exact, _ = FlowLP(feat, next_feat, 0.99, 0.8, get_divergence("soft_tv")).solve(losses)
    gaps = []
    for t in (0.05, 0.005):
        value = _min_over_beta(losses, feat, next_feat, t)
        assert exact - t * math.log(len(loss)) - 1e-9 <= value <= exact + 1e-6
        gaps.append(abs(value - exact))
    assert gaps[1] < gaps[0] and gaps[1] < 0.005 * math.log(len(loss))
