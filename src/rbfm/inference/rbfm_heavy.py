"""RBFM-Heavy (Section 3.2, Algorithm 3 with the critic loss of Section 3.2).

A critic Q(s, a) on the frozen features F(s, a, z_w) (both heads, concatenated) and
tau >= 0 minimise the dual
    D(z, Q, tau) = (1 - gamma) E_mu[Q(s0, a0)] + eps tau + E[w* c - tau f(w*)],
c = l_z(s) + gamma Q(s', a') - Q(s, a), w* = max(0, (f')^{-1}(c / tau)); z minimises
min over (Q, tau) of D, the worst case of the imitation loss over the occupancies the
critic's Bellman-flow constraints and the f-ball allow. Every demonstration state is an
initial state (mu). The features do not depend on z, so they are computed once.

Two critics (`HeavyConfig.critic`):
- linear in F (the default where the ball constrains nothing, as SoftTV's at the
  paper's eps 0.8 does): the minimum over (Q, tau) is a linear program, solved exactly
  (`robust.flow_lp`); z descends by L-BFGS on its smoothed form jointly with the
  critic's weights (`continuation`), the LP's exact value tracked after each stage.
- the paper's MLP(64, 64): by Danskin's theorem z's gradient of D is E[sg(w*) dl], so the
  paper's alternation (critic step, then z step with the critic step's w*) is one Adam
  step on D over (z, Q, tau) together. D is +inf where some c / tau reaches the end of
  f''s range (SoftTV: 1/2); tau is kept above `Divergence.tau_floor(c)` (the paper's
  code clamps c / tau instead, which reports a finite value where the true one is
  infinite), at the default settings as floor + exp(theta) with its own step size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from rbfm.checks import in_range
from rbfm.data.demos import Demos
from rbfm.errors import ConfigError
from rbfm.fb.model import FBModel
from rbfm.inference.common import InferenceResult, Prepared, full_losses, prepare
from rbfm.inference.continuation import SmoothedConfig, smoothed_descent
from rbfm.inference.convergence import Plateau
from rbfm.inference.fbil import (
    FULL_BATCH_MAX,
    Descent,
    descend,
    robust_start,
)
from rbfm.inference.fbil import PAPER as FBIL_PAPER
from rbfm.robust.divergences import Divergence, get_divergence
from rbfm.robust.duals import (
    MIN_TAU,
    ball_inactive,
    check_heavy,
    heavy_critic_loss,
    heavy_residual,
)
from rbfm.robust.flow_lp import FlowLP, flow_smoothed, flow_worst_case
from rbfm.seeding import seeded

TAU_PARAMS = ("floor", "log", "raw")
CRITICS = ("auto", "linear", "mlp")


@dataclass(frozen=True)
class HeavyConfig(SmoothedConfig):
    """FB-IL's default settings with the robust dual's; SETTINGS["paper"]: Table 7."""

    eps: float = 0.8
    gamma: float = 0.99
    divergence: str = "soft_tv"
    hidden: int = 64
    tau_init: float = 1.0
    critic_lr: float = 1e-3  # Q's Adam step size (paper: the same as z's)
    tau_lr: float = 5e-2  # tau's (on log tau when tau_param is "log")
    tau_param: str = "floor"
    # Q = MLP + u / (1 - gamma) with a scalar u started at the mean loss, stepped at
    # tau_lr. With a constant Q = u / (1 - gamma) the dual is the static f-ball dual in
    # (u, tau), whose u is of the losses' scale; reaching it through the MLP's last bias
    # (Q ~ mean loss / (1 - gamma) = 100x the losses) takes Adam at 3e-4 ~ 10^5 steps.
    # The function class is the same (one more bias); only the parametrisation changes.
    critic_shift: bool = True
    # "linear": Q linear in F(s, a, z_w) (and a constant), the class FB's own Q-functions
    # Q_r = F^T z_r belong to; the minimum over (Q, tau) is then a linear program solved
    # exactly (`robust.flow_lp`). "mlp": the paper's MLP critic, fitted by Adam jointly
    # with z (its fits spread 2-7% over seeds at a fixed z: docs/inference.md). "auto":
    # linear where the f-ball constrains nothing (`duals.ball_inactive`: SoftTV at
    # eps >= 0.717, the paper's 0.8 included), else the MLP: where the ball binds, the
    # exact program (`FlowLP` with tangents) took 17-58 s a solve on 3,996 transitions,
    # too slow to solve at every step.
    critic: str = "auto"
    # L-BFGS iterations per round of a stage of the smoothed descent (linear critic,
    # solver "lbfgs", the ball inactive). 50 (RBFM-Light takes 100): on
    # cheetah and walker (seed 0) 20 left Heavy's worst case 2% higher (1.0397 against
    # 1.0194) while 50 already keeps it within 3x FB-IL's time.
    stage_iters: int = 50

    def __post_init__(self) -> None:
        super().__post_init__()
        check_heavy("HeavyConfig", self.eps, self.gamma, self.divergence, self.tau_init)
        in_range("HeavyConfig", "hidden", self.hidden, 1, integer=True)
        in_range("HeavyConfig", "critic_lr", self.critic_lr, 0, 1, open_low=True)
        in_range("HeavyConfig", "tau_lr", self.tau_lr, 0, 10, open_low=True)
        if self.critic not in CRITICS:
            raise ConfigError(
                f"HeavyConfig critic: {self.critic!r} is not one of {', '.join(CRITICS)}"
            )
        if self.critic == "linear" and self.batch_size:
            raise ConfigError(
                "HeavyConfig critic: 'linear' solves the worst case over every transition "
                f"at each step, so it needs batch_size 0 (got {self.batch_size}); the "
                "'mlp' critic takes minibatches"
            )
        if self.tau_param not in TAU_PARAMS:
            raise ConfigError(
                f"HeavyConfig tau_param: {self.tau_param!r} is not one of {', '.join(TAU_PARAMS)}"
            )


PAPER = {
    **FBIL_PAPER,
    "steps": 5000,
    "lr": 3e-4,
    "critic_lr": 3e-4,
    "tau_lr": 3e-4,
    "tau_param": "raw",
    "critic_shift": False,
    "start": "warm",
    "critic": "mlp",
}


class Critic(nn.Module):
    """Q as an MLP on fixed features, and tau (raw, or as log tau)."""

    def __init__(
        self, inp: int, cfg: HeavyConfig, seed: int, device: torch.device, mean_loss: float
    ) -> None:
        super().__init__()
        self.shift_scale = 1 / (1 - cfg.gamma) if cfg.critic_shift else 0.0
        self.shift = nn.Parameter(torch.tensor(mean_loss if cfg.critic_shift else 0.0))
        with seeded(seed):
            self.q = nn.Sequential(
                nn.Linear(inp, cfg.hidden),
                nn.ReLU(),
                nn.Linear(cfg.hidden, cfg.hidden),
                nn.ReLU(),
                nn.Linear(cfg.hidden, 1),
            )
        self.tau_mode = cfg.tau_param
        start = cfg.tau_init if self.tau_mode == "raw" else math.log(cfg.tau_init)
        self.tau_param = nn.Parameter(torch.tensor(start))
        self.to(device)

    def value(self, feat: torch.Tensor) -> torch.Tensor:
        """Q on these features."""
        return self.q(feat)[:, 0] + self.shift_scale * self.shift

    def tau(self, floor: torch.Tensor, project: bool) -> torch.Tensor:
        """tau given the floor of the current residuals (`Divergence.tau_floor`).
        "floor": the floor plus exp(parameter), feasible by construction and
        differentiable through the floor, so that a step that raises the largest
        residual pays for the larger tau it forces. "log"/"raw": the parameter, raised
        in place to the (detached) floor with `project`, else a feasible copy."""
        if self.tau_mode == "floor":
            return floor + self.tau_param.exp()
        floor = floor.detach()
        log_scale = self.tau_mode == "log"
        own = self.tau_param.exp() if log_scale else self.tau_param
        if not project:
            return torch.maximum(own, floor).clamp(min=MIN_TAU)
        with torch.no_grad():
            raised = torch.maximum(own, floor).clamp(min=MIN_TAU)
            self.tau_param.copy_(raised.log() if log_scale else raised)
        return self.tau_param.exp() if log_scale else self.tau_param

    def param_groups(self, cfg: HeavyConfig) -> list[dict[str, object]]:
        groups: list[dict[str, object]] = [
            {"params": list(self.q.parameters()), "lr": cfg.critic_lr},
            {"params": [self.tau_param], "lr": cfg.tau_lr},
        ]
        if cfg.critic_shift:
            groups.append({"params": [self.shift], "lr": cfg.tau_lr})
        return groups

    def dual(
        self,
        losses: torch.Tensor,
        feat: torch.Tensor,
        next_feat: torch.Tensor,
        init_feat: torch.Tensor,
        cfg: HeavyConfig,
        divergence: Divergence,
        project: bool,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(D, w*, tau) on these transitions. With `project`, tau is first raised in place
        to where D is finite; without, D is evaluated at a feasible copy of tau, which
        leaves the parameter alone (a check of the current iterate)."""
        q_s = self.value(feat)
        c = heavy_residual(losses, q_s, self.value(next_feat), cfg.gamma)
        tau = self.tau(divergence.tau_floor(c), project)
        # Every state an initial one (the full set): Q(s0, a0) is Q(s, a), computed once.
        q0 = q_s if init_feat is feat else self.value(init_feat)
        value, w = heavy_critic_loss(q0, c, tau, cfg.eps, cfg.gamma, divergence)
        return value, w, tau.detach()


def features(model: FBModel, data: Prepared) -> tuple[torch.Tensor, torch.Tensor]:
    """F(s, a, z_w) and F(s', a', z_w), both heads concatenated: the critic's inputs."""
    with torch.no_grad():
        zw = data.z_w.expand(len(data.obs), -1)
        feat = model.forward_map(data.obs, data.action, zw)
        next_feat = model.forward_map(data.next_obs, data.next_action, zw)
    return torch.cat(list(feat), -1), torch.cat(list(next_feat), -1)


def _heavy_descent(
    model: FBModel, data: Prepared, cfg: HeavyConfig, seed: int, start: torch.Tensor | None
) -> Descent:
    """The joint descent's objective on (z, Q, tau). From a given `start` z (FB-IL's),
    the critic is first fitted at that z alone (`_fit`: critic steps cost no actor
    pass), so that the descent's first check is RBFM-Heavy's objective at FB-IL's z and
    its best iterate can only improve on it."""
    divergence = get_divergence(cfg.divergence)
    feat, next_feat = features(model, data)
    device = feat.device
    chunk = cfg.batch_size or FULL_BATCH_MAX
    losses0 = full_losses(data, data.z_w if start is None else start, model.radius, chunk)
    critic = Critic(feat.shape[-1], cfg, seed, device, float(losses0.mean()))
    opt = torch.optim.Adam(critic.param_groups(cfg))
    if start is not None:
        _fit(critic, opt, losses0, feat, next_feat, cfg)
    init_gen = torch.Generator(device).manual_seed(seed + 1)
    last: dict[str, torch.Tensor] = {}

    def objective(
        losses: torch.Tensor, idx: torch.Tensor | None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        if idx is None:  # every transition, and every state as an initial state
            f, nf, init = feat, next_feat, feat
        else:
            init_idx = torch.randint(len(feat), idx.shape, generator=init_gen, device=device)
            f, nf, init = feat[idx], next_feat[idx], feat[init_idx]
        value, w, tau = critic.dual(losses, f, nf, init, cfg, divergence, project=True)
        last.update(tau=tau, mean_w=w.mean(), max_w=w.max())
        return value, {}

    def full_value(z: torch.Tensor) -> float:
        with torch.no_grad():
            losses = full_losses(data, z, model.radius, chunk)
            value, w, tau = critic.dual(losses, feat, next_feat, feat, cfg, divergence, False)
        last.update(tau=tau, mean_w=w.mean(), max_w=w.max())
        return float(value)

    def snapshot() -> dict[str, float]:
        return {k: float(v) for k, v in last.items()}

    return Descent(objective, opt, full_value, snapshot)


def infer(
    model: FBModel, demos: Demos, cfg: HeavyConfig, seed: int, progress: bool = False
) -> InferenceResult:
    data = prepare(model, demos, cfg.bf16)
    divergence = get_divergence(cfg.divergence)
    inactive = ball_inactive("rbfm-heavy", divergence, cfg.eps, len(data.obs))
    start, info = robust_start(model, data, cfg, cfg.start, seed, progress)
    if critic_kind(cfg, len(data.obs)) == "mlp":
        descent = _heavy_descent(model, data, cfg, seed, start)
    else:
        lp = FlowLP(*features(model, data), cfg.gamma, cfg.eps, divergence)
        if cfg.solver == "lbfgs" and not lp.ball:
            result = _smoothed(model, data, cfg, lp, data.z_w if start is None else start, progress)
            result.extra.update(info, ball_inactive=1.0)
            return result
        descent = _linear_descent(data, lp)
    result = descend(model, data, cfg, seed, progress, "rbfm-heavy", descent, start)
    result.extra.update(info, ball_inactive=float(inactive))
    return result


def critic_kind(cfg: HeavyConfig, n: int) -> str:
    """The critic RBFM-Heavy uses on n transitions: `cfg.critic`, "auto" resolved (linear
    where the ball constrains nothing and every transition is in each step, else MLP)."""
    if cfg.critic != "auto":
        return cfg.critic
    inactive = cfg.eps >= get_divergence(cfg.divergence).largest(n)
    return "linear" if inactive and not cfg.batch_size else "mlp"


def _smoothed(
    model: FBModel,
    data: Prepared,
    cfg: HeavyConfig,
    lp: FlowLP,
    start: torch.Tensor,
    progress: bool,
) -> InferenceResult:
    """The default descent where the ball constrains nothing:
    `continuation.smoothed_descent` on `flow_lp.flow_smoothed` in (z, beta), the LP's
    exact value tracked after each stage."""
    feat, next_feat = features(model, data)
    beta = torch.zeros(feat.shape[-1], device=feat.device, requires_grad=True)

    return smoothed_descent(
        model,
        data,
        start,
        "rbfm-heavy",
        lambda losses, t: flow_smoothed(losses, beta, feat, next_feat, cfg.gamma, t),
        [beta],
        lambda losses: lp.solve(losses)[0],
        cfg,
        progress,
    )


def _linear_descent(data: Prepared, lp: FlowLP) -> Descent:
    """The worst case for the linear critic, exact at every step (`robust.flow_lp`): z
    descends by Adam on max_w mean(w l_z) with the worst-case weights w of its current
    losses, as RBFM-Light's paper descent does on its TV worst case; no critic is fitted.
    (Solver 'adam', or where the f-ball binds: `flow_smoothed` has no ball.)"""
    last: dict[str, torch.Tensor] = {}

    def objective(
        losses: torch.Tensor, _: torch.Tensor | None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        value, w = flow_worst_case(losses, lp)
        last.update(mean_w=w.mean(), max_w=w.max())
        return value, {}

    def snapshot() -> dict[str, float]:
        return {k: float(v) for k, v in last.items()}

    return Descent(objective, snapshot=snapshot)


def fit_critic(
    losses: torch.Tensor,
    feat: torch.Tensor,
    next_feat: torch.Tensor,
    cfg: HeavyConfig,
    seed: int = 0,
) -> tuple[float, float, int, bool]:
    """D minimised over (Q, tau) for fixed per-transition losses, on every transition
    (every state an initial one): (value, tau, steps, converged). The linear critic's
    minimum is solved exactly (`robust.flow_lp`, no steps); the MLP's is fitted by Adam
    with `cfg`'s step sizes and stopping rule. Either value bounds the f-ball worst case
    of the losses from above (weak duality, at any (Q, tau)), so it is a certificate, +inf
    where no finite tau was reached. Used for RBFM-Heavy's objective at a given z and for
    the Heavy certificates of any policy (`feat`: F features, or raw (s, a) pairs)."""
    losses = losses.detach()
    if critic_kind(cfg, len(losses)) == "linear":  # exact: no steps
        lp = FlowLP(feat, next_feat, cfg.gamma, cfg.eps, get_divergence(cfg.divergence))
        value, _ = lp.solve(losses)
        return value, lp.tau(), 0, True
    critic = Critic(feat.shape[-1], cfg, seed, feat.device, float(losses.mean()))
    return _fit(critic, torch.optim.Adam(critic.param_groups(cfg)), losses, feat, next_feat, cfg)


def _fit(
    critic: Critic,
    opt: torch.optim.Optimizer,
    losses: torch.Tensor,
    feat: torch.Tensor,
    next_feat: torch.Tensor,
    cfg: HeavyConfig,
) -> tuple[float, float, int, bool]:
    """`fit_critic` on a given critic and its optimizer (both left at their last
    iterate: step sizes halved, moments kept)."""
    divergence = get_divergence(cfg.divergence)
    tracker = Plateau(opt, cfg.schedule, cfg.tol, cfg.atol, cfg.patience, cfg.halvings)
    best, best_tau, steps = math.inf, math.nan, 0
    for step in range(cfg.steps):
        value, _, tau = critic.dual(losses, feat, next_feat, feat, cfg, divergence, True)
        improved, stop = tracker.update(step, float(value.detach()))
        if improved:
            best, best_tau = float(value.detach()), float(tau)
        if stop:
            break
        opt.zero_grad(set_to_none=True)
        value.backward()
        opt.step()
        steps = step + 1
    return best, best_tau, steps, tracker.converged


def heavy_value(
    model: FBModel, demos: Demos, z: torch.Tensor, cfg: HeavyConfig, seed: int = 0
) -> tuple[float, float, int, bool]:
    """RBFM-Heavy's objective at a given z (`fit_critic` on z's deterministic losses,
    the critic on F(s, a, z_w) as in inference), so that the z's of different methods
    compare on RBFM-Heavy's own terms."""
    data = prepare(model, demos, cfg.bf16)
    feat, next_feat = features(model, data)
    losses = full_losses(data, z.to(data.obs.device), model.radius, FULL_BATCH_MAX)
    return fit_critic(losses, feat, next_feat, cfg, seed)
