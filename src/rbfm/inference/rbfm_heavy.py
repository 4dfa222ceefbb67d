"""RBFM-Heavy (Section 3.2, Algorithm 3 with the critic loss of Section 3.2).

A critic Q(s, a) = MLP(64, 64) on the frozen features F(s, a, z_w) (both heads,
concatenated) and tau >= 0 minimise the dual
    (1 - gamma) E_mu[Q(s0, a0)] + eps tau + E[w* c - tau f(w*)],
c = l_z(s) + gamma Q(s', a') - Q(s, a), w* = max(0, (f')^{-1}(c / tau)); then z
takes a step on E[sg(w*) l_z(s)]. The two alternate 1:1. Every demonstration state
is an initial state (mu). The features do not depend on z, so they are computed
once; each step costs one actor pass, like FB-IL.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch import nn

from rbfm.checks import in_range
from rbfm.fb.model import FBModel
from rbfm.fb.networks import project
from rbfm.inference.common import (
    InferenceResult,
    batches,
    imitation_losses,
    prepare,
    sphere,
    steps_bar,
)
from rbfm.inference.demos import Demos
from rbfm.inference.divergences import Divergence, get_divergence
from rbfm.inference.duals import heavy_critic_loss, heavy_policy_loss, heavy_residual
from rbfm.inference.fbil import FBILConfig

_MIN_TAU = 1e-6  # tau is projected onto [_MIN_TAU, inf): w* needs c / tau


@dataclass(frozen=True)
class HeavyConfig(FBILConfig):
    """Table 7: FB-IL's settings with the robust dual's."""

    steps: int = 5000
    lr: float = 3e-4
    eps: float = 0.8
    gamma: float = 0.99
    divergence: str = "soft_tv"
    hidden: int = 64
    tau_init: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_heavy("HeavyConfig", self.eps, self.gamma, self.divergence, self.tau_init)
        in_range("HeavyConfig", "hidden", self.hidden, 1, integer=True)


def check_heavy(owner: str, eps: float, gamma: float, divergence: str, tau_init: float) -> None:
    """The dual's own settings (RBFM-Heavy and BE-DROIL)."""
    in_range(owner, "eps", eps, 0, 100)
    in_range(owner, "gamma", gamma, 0, 1, open_low=True, open_high=True)
    in_range(owner, "tau_init", tau_init, 0, open_low=True)
    get_divergence(divergence)  # unknown names are refused with the valid ones


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
    also weights this iteration's z (or, in BE-DROIL, policy) step. Shared by RBFM-Heavy
    and BE-DROIL."""
    c = heavy_residual(losses.detach(), q_s, q_next, gamma)
    value, w = heavy_critic_loss(q_init, c, tau, eps, gamma, divergence)
    opt.zero_grad(set_to_none=True)
    value.backward()
    opt.step()
    with torch.no_grad():
        tau.clamp_(min=_MIN_TAU)
    return value, w


def _critic(inp: int, hidden: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(inp, hidden),
        nn.ReLU(),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, 1),
    )


def infer(
    model: FBModel, demos: Demos, cfg: HeavyConfig, seed: int, progress: bool = False
) -> InferenceResult:
    divergence = get_divergence(cfg.divergence)
    data = prepare(model, demos, cfg.bf16)
    device = data.obs.device
    gen = torch.Generator(device).manual_seed(seed)
    with torch.no_grad():
        zw = data.z_w.expand(len(data.obs), -1)
        feat = model.forward_map(data.obs, data.action, zw)
        next_feat = model.forward_map(data.next_obs, data.next_action, zw)
        feat = torch.cat(list(feat), -1)  # (N, heads * d)
        next_feat = torch.cat(list(next_feat), -1)
    torch.manual_seed(seed)
    q = _critic(feat.shape[-1], cfg.hidden).to(device)
    tau = torch.tensor(cfg.tau_init, device=device, requires_grad=True)
    critic_opt = torch.optim.Adam([*q.parameters(), tau], lr=cfg.lr)
    z = data.z_w.clone().requires_grad_(True)
    z_opt = torch.optim.Adam([z], lr=cfg.lr)
    result = InferenceResult("rbfm-heavy", z)
    result.setup_seconds = time.perf_counter() - data.started
    n = len(data.obs)
    idx_all = batches(n, cfg.batch_size, cfg.steps, gen, device)
    init_all = batches(n, cfg.batch_size, cfg.steps, gen, device)  # every state is initial
    for step in steps_bar(range(cfg.steps), "rbfm-heavy", progress):
        idx, init = idx_all[step], init_all[step]
        losses = imitation_losses(data, idx, z, model.radius, cfg.noise_std, gen)

        value, w = critic_step(
            q(feat[idx])[:, 0],
            q(next_feat[idx])[:, 0],
            q(feat[init])[:, 0],
            losses,
            tau,
            critic_opt,
            cfg.eps,
            cfg.gamma,
            divergence,
        )
        z_loss = heavy_policy_loss(w, losses)
        z_opt.zero_grad(set_to_none=True)
        z_loss.backward(inputs=[z])  # the networks are frozen: no weight gradients
        z_opt.step()
        sphere(z, model.radius)
        if step % cfg.trace_every == 0:
            result.trace.append(float(value.detach()))
    result.z = project(z.detach(), model.radius)
    result.steps, result.seconds = cfg.steps, time.perf_counter() - data.started
    result.extra.update(tau=float(tau.detach()), mean_w=float(w.mean()))
    return result
