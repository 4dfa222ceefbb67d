"""Smoothed quasi-Newton descents for the robust worst cases (the default settings).

RBFM-Light's TV worst case and RBFM-Heavy's linear-critic worst case are maxima over
the demonstration transitions, not differentiable where the maximiser changes: Adam with
halving step sizes settles there, slowly (hundreds of steps after its last progress).
Each has a smooth approximation at a temperature T, within about T log n of it and
smooth jointly in z and its dual variables (`duals.light_smoothed`,
`flow_lp.flow_smoothed`). L-BFGS with a strong Wolfe line search minimises it over
(v, dual variables), z = sqrt(d) v / ||v||, for T = smoothing x cooling^-k x the mean
loss at the start (cooling 3 by default), k = 0, 1, ..., each stage from the best exact
iterate so far (z and dual variables), in rounds of
`stage_iters` iterations until a round improves the smoothed value by less than `tol`.
Each stage first fits the dual variables alone at its start (`_fit_duals`, no actor
pass). After each stage the exact objective is evaluated at its z. A stage that ends
more than max(tol x value, atol) above its start says its temperature was too high (the
smoothed minimiser lies elsewhere), not that the descent converged: the next, cooler
stage starts again from the best iterate. The continuation has converged when
`settle_stages` stages in a row (2) end within that tolerance of their start, and stops
at `stages` stages or after `steps` loss evaluations (actor passes, `steps` in
results). The best exact iterate is returned, the start included: from FB-IL's z,
never worse than it.

Working sets: at a low temperature most transitions weigh nothing in the smoothed
objective (Light: losses far below lambda; Heavy: residuals far below their maximum).
Each stage runs the actor only on the transitions whose weight, the surrogate's
derivative in their loss at the stage's start, is within e^-`working_set` of the
largest; the others keep their losses from the stage's start (exact, no gradient). The
exact objective is still evaluated on every transition after each stage. A stage at
whose end the excluded transitions carry more than `tol` of the weight counts as a set
change, not as convergence: the next stage starts from the refreshed set.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import torch
from tqdm import tqdm

from rbfm.checks import in_range
from rbfm.errors import ConfigError
from rbfm.fb.model import FBModel
from rbfm.fb.networks import project
from rbfm.inference.common import InferenceResult, Prepared, full_losses, imitation_losses
from rbfm.inference.fbil import FULL_BATCH_MAX, FBILConfig, budget, check_start, lbfgs_optimizer

# The smooth objective at a temperature, from every transition's loss (dual variables
# are closed over by the caller, and passed as `duals` to be optimised with z).
Surrogate = Callable[[torch.Tensor, float], torch.Tensor]
# L-BFGS iterations fitting the dual variables alone at a stage's start (no actor pass).
DUAL_ITERS = 200


@dataclass(frozen=True)
class SmoothedConfig(FBILConfig):
    """FB-IL's settings with the continuation's, shared by LightConfig and HeavyConfig."""

    start: str = "fbil"  # "fbil": from FB-IL's converged z (`fbil.robust_start`); "warm": z_w
    # The first temperature, relative to the mean loss at the start, divided by `cooling`
    # at each of at most `stages`.
    smoothing: float = 0.3
    cooling: float = 3.0  # the temperature's divisor from one stage to the next
    stages: int = 8  # 6 until settle_stages was 2: the last one now confirms
    # A stage's actor passes cover only the transitions weighing more than e^-30 of the
    # heaviest in the smoothed objective (module docstring); 0 runs every stage on all.
    working_set: float = 30.0
    # L-BFGS iterations per round of a stage (FB-IL's start keeps `patience`): each stage
    # starts from the last one's end, near its optimum. Each method sets its own.
    stage_iters: int = 20
    # Stages in a row that must end within tolerance of their start before the
    # continuation counts as converged. One is not evidence: at the first temperatures the
    # surrogate is far from the exact objective (its bound ~50% of the value at the
    # first), and on walker:aps flip (noisy expert, seed 0) Light's first stage left
    # FB-IL's z where it was, then the next five lowered the worst case by 3.2%.
    settle_stages: int = 2

    def __post_init__(self) -> None:
        super().__post_init__()
        owner = type(self).__name__
        check_start(owner, self.start)
        in_range(owner, "smoothing", self.smoothing, 0, 100, open_low=True)
        in_range(owner, "cooling", self.cooling, 1, 1000, open_low=True)
        in_range(owner, "working_set", self.working_set, 0, 700)
        in_range(owner, "stages", self.stages, 1, 30, integer=True)
        in_range(owner, "stage_iters", self.stage_iters, 1, integer=True)
        in_range(owner, "settle_stages", self.settle_stages, 1, 30, integer=True)


def smoothed_descent(
    model: FBModel,
    data: Prepared,
    start: torch.Tensor,
    method: str,
    surrogate: Surrogate,
    duals: Sequence[torch.Tensor],
    objective: Callable[[torch.Tensor], float],
    cfg: SmoothedConfig,
    progress: bool = False,
) -> InferenceResult:
    """Minimises `objective` (the method's exact objective, of every transition's loss)
    by L-BFGS on `surrogate` at decreasing temperatures, from `start` (see the module's
    docstring)."""
    smoothing, cooling, stages, steps = cfg.smoothing, cfg.cooling, cfg.stages, cfg.steps
    tol, atol = cfg.tol, cfg.atol

    def exact(z: torch.Tensor) -> tuple[float, torch.Tensor]:
        losses = full_losses(data, z, model.radius, FULL_BATCH_MAX)
        return objective(losses), losses

    n = len(data.obs)
    if n > FULL_BATCH_MAX:
        raise ConfigError(
            f"{method}: the smoothed L-BFGS descent holds all {n:,} transitions in one "
            f"graph (at most {FULL_BATCH_MAX:,}); solver 'adam' takes batches"
        )
    result = InferenceResult(method, start)
    result.setup_seconds = time.perf_counter() - data.started
    v = start.detach().clone().requires_grad_(True)
    params = [v, *duals]
    best, losses = exact(start.detach())
    scale = max(float(losses.mean()), atol)
    best_z = start.detach().clone()
    # The iterate every stage starts from: the best one's z parameter and dual variables.
    best_params = [p.detach().clone() for p in params]
    best_losses = losses
    result.trace.append(best)
    evals, settled = 0, 0
    bar = tqdm(total=steps, desc=method, unit="eval", disable=not progress, leave=False)
    for stage in range(stages):
        temperature = smoothing * cooling**-stage * scale
        with torch.no_grad():
            for p, b in zip(params, best_params, strict=True):
                p.copy_(b)
        losses = best_losses
        _fit_duals(surrogate, losses, duals, temperature)
        members = _working_set(surrogate, losses, temperature, cfg.working_set)
        stage_losses = _stage_losses(data, members, losses, model.radius)
        evals = _stage(v, params, surrogate, stage_losses, temperature, evals, cfg, method, bar)
        z = project(v.detach(), model.radius)
        now, losses = exact(z)
        result.trace.append(now)
        previous, threshold = best, max(tol * abs(best), atol)
        if now < best:
            best, best_z, best_losses = now, z, losses
            best_params = [p.detach().clone() for p in params]
        moved = members is not None and _set_changed(surrogate, losses, temperature, members, tol)
        if moved:
            result.extra["set_changes"] = result.extra.get("set_changes", 0.0) + 1
        if now > previous + threshold:
            result.extra["restarts"] = result.extra.get("restarts", 0.0) + 1
            settled = 0
        elif not moved and not now < previous - threshold:
            settled += 1
            if settled >= cfg.settle_stages:
                result.converged = True
                break
        else:
            settled = 0
        if evals >= steps:
            break
    bar.close()
    result.stage_capped = not result.converged and evals < steps
    if not torch.isfinite(best_z).all():
        raise FloatingPointError(f"{method}: the task vector is not finite; nothing written")
    result.z, result.objective = best_z, best
    result.steps, result.seconds = evals, time.perf_counter() - data.started
    return result


def _stage(
    v: torch.Tensor,
    params: list[torch.Tensor],
    surrogate: Surrogate,
    stage_losses: Callable[[torch.Tensor], torch.Tensor],
    temperature: float,
    evals: int,
    cfg: SmoothedConfig,
    method: str,
    bar: tqdm,
) -> int:
    """One temperature's L-BFGS: rounds of `stage_iters` iterations until a round stops
    improving the surrogate or the evaluation budget is spent; returns the evaluations
    counted so far."""
    opt = lbfgs_optimizer(params, cfg.stage_iters)

    def closure() -> torch.Tensor:
        nonlocal evals
        evals += 1
        opt.zero_grad(set_to_none=True)
        value = surrogate(stage_losses(v), temperature)
        if not math.isfinite(float(value.detach())):
            raise FloatingPointError(
                f"{method}: the smoothed objective is {float(value.detach())} after "
                f"{evals} evaluations; the demonstrations or the model give non-finite losses"
            )
        value.backward()
        return value.detach()

    ref = math.inf
    while evals < cfg.steps:
        before = evals
        budget(opt, cfg.stage_iters, cfg.steps - evals)
        value = float(opt.step(closure))  # type: ignore[arg-type]
        bar.update(evals - before)
        if not value < ref - max(cfg.tol * abs(ref), cfg.atol):
            break
        ref = value
    return evals


def _fit_duals(
    surrogate: Surrogate, losses: torch.Tensor, duals: Sequence[torch.Tensor], temperature: float
) -> None:
    """Minimises the surrogate over the dual variables alone at fixed losses (no actor
    pass), so that a stage starts where its smoothed value is within its bound of the
    exact one at the start's z. From duals fitted at another z or temperature (or zero),
    the joint descent would first lower the smoothed value by fitting the duals and move z
    on the way, far from a start already near the optimum (FB-IL's z)."""
    if not duals:
        return
    fixed = losses.detach()
    opt = lbfgs_optimizer(list(duals), DUAL_ITERS)

    def closure() -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        value = surrogate(fixed, temperature)
        value.backward()
        return value.detach()

    opt.step(closure)  # type: ignore[arg-type]


def _weights(surrogate: Surrogate, losses: torch.Tensor, temperature: float) -> torch.Tensor:
    """How much each transition's loss moves the smoothed objective, at these losses."""
    every = losses.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        (grad,) = torch.autograd.grad(surrogate(every, temperature), every)
    return grad.abs()


def _working_set(
    surrogate: Surrogate, losses: torch.Tensor, temperature: float, margin: float
) -> torch.Tensor | None:
    """The transitions whose weight is within e^-margin of the largest (None: all of them,
    or working sets are off, margin 0). Below a fifth of the set left out, the indexing
    costs more than the smaller actor pass saves."""
    if margin <= 0:
        return None
    w = _weights(surrogate, losses, temperature)
    keep = w >= math.exp(-margin) * w.max()
    if int(keep.sum()) > 0.8 * len(losses):
        return None
    return keep.nonzero().squeeze(1)


def _set_changed(
    surrogate: Surrogate,
    losses: torch.Tensor,
    temperature: float,
    members: torch.Tensor,
    tol: float,
) -> bool:
    """Whether the transitions left out of a stage carry more than `tol` of the smoothed
    objective's weight at its end: then the stage's descent followed a gradient wrong by
    more than the tolerance the convergence test applies."""
    w = _weights(surrogate, losses, temperature)
    out = w.sum() - w[members].sum()
    return bool(out > tol * w.sum())


def _stage_losses(
    data: Prepared, members: torch.Tensor | None, losses: torch.Tensor, radius: float
) -> Callable[[torch.Tensor], torch.Tensor]:
    """Every transition's loss at z for a stage: the actor's on `members` (None: all), the
    stage's starting `losses` elsewhere."""
    if members is None:
        return lambda v: imitation_losses(data, None, v, radius, 0.0, None)
    sub = replace(
        data,
        obs=data.obs[members],
        action=data.action[members],
        actor_obs=data.actor_obs[members],
        s_embed=data.s_embed[members],
    )
    frozen = losses.detach()
    return lambda v: frozen.index_put((members,), imitation_losses(sub, None, v, radius, 0.0, None))
