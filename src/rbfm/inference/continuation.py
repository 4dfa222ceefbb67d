"""Smoothed quasi-Newton descents for the robust worst cases (the default settings).

RBFM-Light's TV worst case and RBFM-Heavy's linear-critic worst case are maxima over
the demonstration transitions, not differentiable where the maximiser changes: Adam with
halving step sizes settles there, slowly (hundreds of steps after its last progress).
Each has a smooth approximation at a temperature T, within about T log n of it and
smooth jointly in z and its dual variables (`duals.light_smoothed`,
`flow_lp.flow_smoothed`). L-BFGS with a strong Wolfe line search minimises it over
(v, dual variables), z = sqrt(d) v / ||v||, for T = smoothing x 3^-k x the mean loss at
the start, k = 0, 1, ..., each stage from where the last one ended, in rounds of
`stage_iters` iterations until a round improves the smoothed value by less than `tol`.
After each stage the exact objective is evaluated at its z; the continuation has
converged when a stage improved it by less than max(tol x value, atol), and stops at
`stages` stages or after `steps` loss evaluations (actor passes, `steps` in results).
The best exact iterate is returned, the start included: from FB-IL's z, never worse
than it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Protocol

import torch
from tqdm import tqdm

from rbfm.errors import ConfigError
from rbfm.fb.model import FBModel
from rbfm.fb.networks import project
from rbfm.inference.common import InferenceResult, Prepared, full_losses, imitation_losses
from rbfm.inference.fbil import FULL_BATCH_MAX, budget

# The smooth objective at a temperature, from every transition's loss (dual variables
# are closed over by the caller, and passed as `duals` to be optimised with z).
Surrogate = Callable[[torch.Tensor, float], torch.Tensor]


class Settings(Protocol):
    """The continuation's fields of a method's config (LightConfig, HeavyConfig)."""

    @property
    def smoothing(self) -> float: ...
    @property
    def stages(self) -> int: ...
    @property
    def stage_iters(self) -> int: ...
    @property
    def steps(self) -> int: ...
    @property
    def tol(self) -> float: ...
    @property
    def atol(self) -> float: ...


def smoothed_descent(
    model: FBModel,
    data: Prepared,
    start: torch.Tensor,
    method: str,
    surrogate: Surrogate,
    duals: Sequence[torch.Tensor],
    objective: Callable[[torch.Tensor], float],
    cfg: Settings,
    progress: bool = False,
) -> InferenceResult:
    """Minimises `objective` (the method's exact objective, of every transition's loss)
    by L-BFGS on `surrogate` at decreasing temperatures, from `start` (see the module's
    docstring)."""
    smoothing, stages, stage_iters, steps = cfg.smoothing, cfg.stages, cfg.stage_iters, cfg.steps
    tol, atol = cfg.tol, cfg.atol

    def exact(z: torch.Tensor) -> float:
        return objective(full_losses(data, z, model.radius, FULL_BATCH_MAX))

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
    with torch.no_grad():
        scale = max(float(imitation_losses(data, None, v, model.radius, 0.0, None).mean()), atol)
    best_z, best = start.detach().clone(), exact(start.detach())
    result.trace.append(best)
    previous, evals = best, 0
    bar = tqdm(total=steps, desc=method, unit="eval", disable=not progress, leave=False)
    for stage in range(stages):
        temperature = smoothing * 3.0**-stage * scale
        opt = torch.optim.LBFGS(
            params,
            lr=1,
            max_iter=stage_iters,
            history_size=20,
            tolerance_grad=1e-10,
            tolerance_change=1e-12,
            line_search_fn="strong_wolfe",
        )

        def closure(temperature: float = temperature, opt: torch.optim.LBFGS = opt) -> torch.Tensor:
            nonlocal evals
            evals += 1
            opt.zero_grad(set_to_none=True)
            value = surrogate(imitation_losses(data, None, v, model.radius, 0.0, None), temperature)
            if not math.isfinite(float(value.detach())):
                raise FloatingPointError(
                    f"{method}: the smoothed objective is {float(value.detach())} after "
                    f"{evals} evaluations; the demonstrations or the model give non-finite losses"
                )
            value.backward()
            return value.detach()

        ref = math.inf
        while evals < steps:  # rounds of `stage_iters` iterations until the stage settles
            before = evals
            budget(opt, stage_iters, steps - evals)
            value = float(opt.step(closure))  # type: ignore[arg-type]
            bar.update(evals - before)
            if not value < ref - max(tol * abs(ref), atol):
                break
            ref = value
        z = project(v.detach(), model.radius)
        now = exact(z)
        result.trace.append(now)
        if now < best:
            best, best_z = now, z
        if not now < previous - max(tol * abs(previous), atol):
            result.converged = True
            break
        previous = now
        if evals >= steps:
            break
    bar.close()
    if not torch.isfinite(best_z).all():
        raise FloatingPointError(f"{method}: the task vector is not finite; nothing written")
    result.z, result.objective = best_z, best
    result.steps, result.seconds = evals, time.perf_counter() - data.started
    return result
