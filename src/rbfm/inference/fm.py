"""Feature matching through F (FM-FB of Pirotta et al., ICLR 2024).

FB models the successor measure M^pi_z(s, a, ds') = F(s, a, z)^T B(s') rho(ds') with
E_rho[B B^T] = I (the orthonormality loss's target), so the successor features of pi_z
for the features B are F itself: E[sum_t gamma^t B(s_{t+1}) | s, a, pi_z] = F(s, a, z).
Feature matching asks pi_z to collect the demonstrator's discounted features from the
demonstrated states:

    min_z  E_k || F(s_k, pi_z(s_k), z) - e_k ||^2 / d,
    e_k = sum_{t < H} gamma^t B(s_{k+t+1})   (H steps of the same demonstration).

Every demonstrated state with H states after it is a start, so one demonstration gives
hundreds of terms. H = ceil(log(0.01) / log(gamma)) drops less than 1% of the features'
weight (228 steps at gamma = 0.98); a demonstration shorter than H + 1 steps is refused.

Distribution matching through F in the rho-weighted L2 distance between occupancy
densities, ||F^T B - d_E / rho||^2_rho = F^T E_rho[B B^T] F - 2 F^T E_{d_E}[B] + c, is this
objective up to constants under E_rho[B B^T] = I: it is not a separate method here.

The objective is an expectation over the demonstrated states, so RBFM-Light's TV ball
applies to it unchanged: with eps > 0 the mean becomes the worst case over the ball,
`duals.light_objective` of the per-start losses (exact, by one sort).
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass

import numpy as np
import torch

from rbfm.checks import in_range
from rbfm.data.demos import Demos
from rbfm.errors import DatasetError
from rbfm.fb.model import FBModel
from rbfm.inference.common import InferenceResult
from rbfm.inference.expert_demos import demo_features, warm_start
from rbfm.robust.duals import light_objective


@dataclass(frozen=True)
class FMConfig:
    # L-BFGS loss evaluations: its iterations stop there, a line search under way finishes
    # (so 1 gives 2: the start's evaluation and the search's first).
    steps: int = 200
    starts: int = 2048  # demonstrated states used as starts, drawn by the seed
    eps: float = 0.0  # TV radius of the robust variant (0: the mean)
    coverage: float = 0.99  # the share of the discounted weight the targets keep

    def __post_init__(self) -> None:
        in_range("FMConfig", "steps", self.steps, 1, integer=True)
        in_range("FMConfig", "starts", self.starts, 1, integer=True)
        in_range("FMConfig", "eps", self.eps, 0, 1)
        in_range("FMConfig", "coverage", self.coverage, 0.5, 0.9999)


def horizon(gamma: float, coverage: float) -> int:
    """Steps whose discounted weight sums to `coverage` of the infinite sum."""
    return math.ceil(math.log(1 - coverage) / math.log(gamma))


def discounted_targets(embeddings: torch.Tensor, gamma: float, steps: int) -> torch.Tensor:
    """e_k = sum_{t < steps} gamma^t b_{k+t} for every k with `steps` rows after it, from
    one demonstration's (T, d) embeddings b_t = B(s_{t+1}): (T - steps + 1, d)."""
    n = len(embeddings) - steps + 1
    if n < 1:
        raise DatasetError(
            f"fm: a demonstration of {len(embeddings)} steps is shorter than the "
            f"{steps}-step horizon of its discounted features (valid: >= {steps} steps)"
        )
    weights = gamma ** torch.arange(steps, dtype=embeddings.dtype, device=embeddings.device)
    # conv1d is a cross-correlation: out[k] = sum_t w[t] x[k + t], every feature at once.
    x = embeddings.T[:, None]  # (d, 1, T)
    return torch.nn.functional.conv1d(x, weights[None, None]).squeeze(1).T


def fm_losses(features: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per-start ||F - e||^2 / d for (N, d) successor features and targets."""
    return (features - targets).square().mean(-1)


def fm_objective(losses: torch.Tensor, eps: float) -> torch.Tensor:
    """The mean of the per-start losses, or their TV-ball worst case for eps > 0."""
    return losses.mean() if eps == 0 else light_objective(losses, eps)[0]


def successor_features(
    actor: torch.nn.Module, forward_map: torch.nn.Module, obs: torch.Tensor, z: torch.Tensor
) -> torch.Tensor:
    """F(s, pi_z(s), z), the mean of F's heads, for a z of shape (d,)."""
    zb = z.expand(len(obs), -1)
    return forward_map(obs, actor(obs, zb), zb).mean(0)


def starts_and_targets(
    model: FBModel, demos: Demos, cfg: FMConfig, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """The demonstrated states used as starts (at most `cfg.starts`, drawn by `seed`) and
    each one's discounted features e_k: the objective's data."""
    if model.cfg.context:
        raise DatasetError("fm: models with a context are not supported (F reads a window)")
    device = next(model.parameters()).device
    steps = horizon(model.cfg.gamma, cfg.coverage)
    starts, targets = [], []
    with torch.no_grad():
        for i, episode in enumerate(demos.observations()):
            obs = torch.as_tensor(episode, device=device)
            e = discounted_targets(demo_features(model, episode[1:], i), model.cfg.gamma, steps)
            starts.append(obs[: len(e)])
            targets.append(e)
    obs, target = torch.cat(starts), torch.cat(targets)
    if len(obs) > cfg.starts:
        pick = np.random.default_rng(seed).choice(len(obs), cfg.starts, replace=False)
        index = torch.as_tensor(np.sort(pick), device=device)
        obs, target = obs[index], target[index]
    return obs, target


def score(model: FBModel, obs: torch.Tensor, target: torch.Tensor, z: torch.Tensor) -> float:
    """The objective (eps = 0) at a given z: how far the model's own prediction of pi_z's
    discounted features from the starts is from the demonstrated ones (lower: closer)."""
    with torch.no_grad():
        features = successor_features(model.actor, model.forward_map, obs, z.to(obs.device))
        return float(fm_losses(features, target).mean())


def infer(
    model: FBModel, demos: Demos, cfg: FMConfig, seed: int = 0, progress: bool = False
) -> InferenceResult:
    """L-BFGS on z = sqrt(d) v / ||v|| from the reward-based z (`er`)."""
    del progress
    started = time.perf_counter()
    obs, target = starts_and_targets(model, demos, cfg, seed)
    # Frozen copies: only z is differentiated, and the caller's model is left untouched.
    actor = copy.deepcopy(model.actor).requires_grad_(False)
    forward_map = copy.deepcopy(model.forward_map).requires_grad_(False)
    v = warm_start(model, demos).detach().clone().requires_grad_(True)
    opt = torch.optim.LBFGS(
        [v], lr=1, max_iter=cfg.steps, max_eval=cfg.steps, line_search_fn="strong_wolfe"
    )
    trace: list[float] = []

    def z_of(v: torch.Tensor) -> torch.Tensor:
        return model.radius * v / v.norm()

    def closure() -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        value = fm_objective(
            fm_losses(successor_features(actor, forward_map, obs, z_of(v)), target), cfg.eps
        )
        value.backward()
        trace.append(float(value.detach()))
        return value

    setup = time.perf_counter() - started
    opt.step(closure)
    z = z_of(v.detach())
    if not torch.isfinite(z).all():
        raise FloatingPointError("fm: the task vector is not finite; nothing written")
    with torch.no_grad():
        final = float(
            fm_objective(fm_losses(successor_features(actor, forward_map, obs, z), target), cfg.eps)
        )
    result = InferenceResult("fm", z, trace, final, converged=len(trace) < cfg.steps)
    result.setup_seconds, result.steps = setup, len(trace)
    result.seconds = time.perf_counter() - started
    return result
