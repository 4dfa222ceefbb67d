"""RBFM-Heavy's worst case for a critic linear in fixed features, solved exactly.

With Q(s, a) = phi(s, a)^T beta (phi holds a constant), the dual of Section 3.2 minimised
over (beta, tau) is the Lagrangian dual of the weights' problem
    max_{w >= 0}  mean(w l)
    s.t.  mean(w (phi - gamma phi')) = (1 - gamma) mean_mu(phi)   (the Bellman flow, as far
          as a critic in the features' span sees it; mu: every state an initial one)
          mean(f(w)) <= eps                                          (the f-ball around w = 1)
with equal value (linear constraints; Slater where the ball binds), so this value is the
minimum that fitting (beta, tau) by gradient steps approaches, and its maximiser w is the
worst-case weighting: the gradient of the value in the losses (Danskin).

Where eps >= `Divergence.largest(n)` the ball holds every weighting and the problem is a
linear program, solved exactly (SoftTV at the paper's eps 0.8). Otherwise the ball is
replaced by its outer approximation with tangents of f, t_i >= f(v) + f'(v) (w_i - v) for
the points v of `TANGENTS` and mean(t) <= eps: a larger set, so the value bounds the exact
one from above (still a true certificate), by at most the tangents' gap.

HiGHS keeps its simplex basis between solves, so the losses of consecutive descent steps
re-solve in a few pivots instead of from scratch.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
from collections.abc import Iterator

import highspy
import numpy as np
import scipy.sparse as sp
import torch

from rbfm.errors import RbfmError
from rbfm.robust.divergences import Divergence
from rbfm.robust.duals import logsumexp_floored

# Where f is touched by the tangents of the ball's outer approximation (weights w, mean 1).
TANGENTS = (
    *(0.1 * k for k in range(31)),  # 0, 0.1, ..., 3: where most weights lie
    *(4.0, 6.0, 10.0, 20.0, 50.0, 100.0, 1000.0),
)


class FlowLPError(RbfmError):
    """The weights' problem has no optimum on these transitions."""


class FlowLP:
    """The worst case of mean(w l) over the weights above, for fixed features.

    `feat`, `next_feat`: phi at (s, a) and at (s', a') without the constant, which is added
    here. `solve(losses)` returns (value, w) and may be called again with other losses of
    the same transitions (a descent's steps): the constraints stay, the basis is reused."""

    def __init__(
        self,
        feat: torch.Tensor,
        next_feat: torch.Tensor,
        gamma: float,
        eps: float,
        divergence: Divergence,
    ) -> None:
        n = len(feat)
        ones = np.ones((n, 1))
        phi = np.concatenate([feat.detach().double().cpu().numpy(), ones], 1)
        phi_next = np.concatenate([next_feat.detach().double().cpu().numpy(), ones], 1)
        flow = sp.csr_matrix((phi - gamma * phi_next).T / n)  # (k, n): one row per feature
        target = (1 - gamma) * phi.mean(0)
        self.n, self.device = n, feat.device
        self.ball = eps < divergence.largest(n)
        if self.ball:  # columns [w, t]: t_i >= each tangent of f at w_i, mean(t) <= eps
            points = [v for v in TANGENTS if math.isfinite(_slope(divergence, v))]
            slopes = np.array([_slope(divergence, v) for v in points])
            heights = np.array([_value(divergence, v) for v in points]) - slopes * points
            eye = sp.identity(n, format="csr")
            tangent_rows = sp.vstack([sp.hstack([-s * eye, eye]) for s in slopes])
            rows = sp.vstack(
                [
                    sp.hstack([flow, sp.csr_matrix((flow.shape[0], n))]),
                    tangent_rows,
                    sp.hstack([sp.csr_matrix((1, n)), sp.csr_matrix(np.full((1, n), 1 / n))]),
                ]
            ).tocsc()
            lower = np.concatenate([target, np.repeat(heights, n), [-highspy.kHighsInf]])
            upper = np.concatenate([target, np.full(n * len(points), highspy.kHighsInf), [eps]])
            col_lower = np.concatenate([np.zeros(n), np.full(n, -highspy.kHighsInf)])
        else:
            rows = flow.tocsc()
            lower = upper = target
            col_lower = np.zeros(n)
        lp = highspy.HighsLp()
        lp.num_col_, lp.num_row_ = rows.shape[1], rows.shape[0]
        lp.col_cost_ = np.zeros(rows.shape[1])
        lp.col_lower_ = col_lower
        lp.col_upper_ = np.full(rows.shape[1], highspy.kHighsInf)
        lp.row_lower_, lp.row_upper_ = lower, upper
        lp.sense_ = highspy.ObjSense.kMaximize
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_ = rows.indptr
        lp.a_matrix_.index_ = rows.indices
        lp.a_matrix_.value_ = rows.data
        with _quiet_stdout():  # HiGHS prints a banner when its first instance is made
            self.highs = highspy.Highs()
        self.highs.setOptionValue("output_flag", False)
        self.highs.setOptionValue("threads", 1)
        self.highs.passModel(lp)
        self._cols = np.arange(n, dtype=np.int32)

    def solve(self, losses: torch.Tensor, restart: bool = False) -> tuple[float, torch.Tensor]:
        """(the worst case of mean(w l), the worst-case weights w, mean 1) for `losses`,
        one per transition. From the last basis, unless `restart`: for losses far from
        the last ones (after many steps), from where primal simplex can take thousands
        of pivots, a solve from scratch is faster."""
        if restart:
            self.highs.clearSolver()
            self.highs.setOptionValue("simplex_strategy", 1)
        l64 = losses.detach().double().cpu().numpy()
        if l64.shape != (self.n,) or not np.isfinite(l64).all():
            raise FlowLPError(
                f"the worst case needs {self.n} finite losses (got shape {l64.shape}, "
                f"{int((~np.isfinite(l64)).sum())} non-finite)"
            )
        self.highs.changeColsCost(self.n, self._cols, l64 / self.n)
        self.highs.run()
        # New losses change only the costs: the last basis stays feasible, and primal
        # simplex goes on from it (43 against 63 ms a re-solve on cheetah's 3,996
        # transitions; the first solve is faster with HiGHS's default choice).
        self.highs.setOptionValue("simplex_strategy", 4)
        status = self.highs.getModelStatus()
        if status != highspy.HighsModelStatus.kOptimal:
            raise FlowLPError(
                f"the worst case over the flow constraints is {status}: no weighting "
                "satisfies the critic's flow constraints on these transitions (fewer "
                "features, or the 'mlp' critic, relax them)"
            )
        w = np.asarray(self.highs.getSolution().col_value[: self.n])
        return self.highs.getInfo().objective_function_value, torch.as_tensor(
            w.clip(min=0.0), dtype=torch.float32, device=self.device
        )

    def tau(self) -> float:
        """The ball constraint's multiplier at the last solve: the dual's optimal tau (0
        where the ball holds every weighting)."""
        if not self.ball:
            return 0.0
        return abs(float(self.highs.getSolution().row_dual[-1]))


def flow_smoothed(
    losses: torch.Tensor,
    beta: torch.Tensor,
    feat: torch.Tensor,
    next_feat: torch.Tensor,
    gamma: float,
    temperature: float,
) -> torch.Tensor:
    """The linear critic's dual without the ball (the case `FlowLP.ball` is False), its
    maximum smoothed at `temperature` T, for quasi-Newton descents in (z, beta):
        (1 - gamma) mean(phi beta) + T log mean exp(c / T),  c = l + gamma phi' beta - phi beta.
    With the constant's coefficient eliminated, the LP's value is the minimum over beta of
    (1 - gamma) mean(phi beta) + max c; log-mean-exp lies in [max - T log n, max], so
        min_beta flow_smoothed in [value - T log n, value],
    smooth in (l, beta) jointly (features without the constant)."""
    c = losses + gamma * (next_feat @ beta) - feat @ beta
    soft_max = temperature * (logsumexp_floored(c / temperature) - math.log(len(c)))
    return (1 - gamma) * (feat.mean(0) @ beta) + soft_max


def flow_worst_case(losses: torch.Tensor, lp: FlowLP) -> tuple[torch.Tensor, torch.Tensor]:
    """(value, w): the worst case as `lp` solves it, as mean(w l) with w held fixed, so
    that its gradient in the losses is w / n (Danskin: the value is max_w mean(w l))."""
    _, w = lp.solve(losses)
    return (w * losses).mean(), w


def _slope(divergence: Divergence, v: float) -> float:
    return float(divergence.f_prime(torch.tensor(v, dtype=torch.float64)))


def _value(divergence: Divergence, v: float) -> float:
    return float(divergence.f(torch.tensor(v, dtype=torch.float64)))


@contextlib.contextmanager
def _quiet_stdout() -> Iterator[None]:
    """The process's stdout (file descriptor 1, where C++ code prints) goes nowhere."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
