"""FB-IL: behavioural cloning in the task space of a frozen FB model.

Minimises E||pi_z(s) + noise - a||^2 over z alone, with z kept on the sqrt(d)
sphere (the actor only saw such z in pretraining), from the warm start z_w.

`descend` is the projected Adam that all three methods share: RBFM-Light and
RBFM-Heavy only change the objective (and Heavy adds its critic's parameters).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, fields

import torch
from tqdm import tqdm

from rbfm.checks import in_range
from rbfm.data.demos import Demos
from rbfm.errors import ConfigError
from rbfm.fb.model import FBModel
from rbfm.fb.networks import project
from rbfm.inference.common import (
    InferenceResult,
    Prepared,
    batches,
    full_losses,
    imitation_losses,
    prepare,
    sphere,
)
from rbfm.inference.convergence import SCHEDULES, Plateau
from rbfm.progress import steps_bar

# The full set is one batch up to this many transitions (4 demonstrations are ~4,000);
# beyond it, steps draw batches of this size and checks evaluate the set in chunks.
FULL_BATCH_MAX = 16_384


@dataclass(frozen=True)
class FBILConfig:
    """The default settings: what converges (docs/inference.md). `SETTINGS["paper"]`
    holds Table 5 (and Tables 6-7 for the subclasses). RBFM-Light and RBFM-Heavy extend it.

    Departures from the paper in the default, each measured in docs/inference.md:
    - every transition in each step (batch_size 0) instead of batches of 512, so that
      the objective and its gradient are exact and the descent deterministic;
    - no smoothing noise: in expectation the noise adds the constant noise_std^2 x
      action_dim to every loss, which moves none of the three objectives' minimisers
      (the TV and f-ball worst cases of l + c are those of l, plus c), while sampling
      it keeps a descent from settling;
    - a 10x larger first step size, halved on plateaus (`convergence.Plateau`), with
      the best iterate returned.
    """

    # The cap (the paper: the exact number of steps). L-BFGS counts loss evaluations and
    # stops its iterations there; a line search under way finishes (at most 25 more).
    steps: int = 3000
    # FB-IL's own descent (and the robust methods' FB-IL start): "lbfgs" or "adam".
    solver: str = "lbfgs"
    lr: float = 1e-2
    batch_size: int = 0  # 0: every transition (up to FULL_BATCH_MAX) at each step
    noise_std: float = 0.0
    bf16: bool = False  # a bfloat16 copy of the actor (off: the paper's precision)
    schedule: str = "plateau"
    tol: float = 1e-3  # relative progress of the full-set objective (`convergence`)
    atol: float = 1e-4  # absolute progress, for objectives near 0 (own demonstrations)
    patience: int = 50  # steps without progress before a halving (or, constant: "stalled")
    halvings: int = 6
    check_every: int = 1  # steps between full-set evaluations (free in full batch, noise 0)

    def __post_init__(self) -> None:
        owner = type(self).__name__
        in_range(owner, "steps", self.steps, 1, integer=True)
        in_range(owner, "lr", self.lr, 0, 1, open_low=True)
        in_range(owner, "batch_size", self.batch_size, 0, integer=True)
        in_range(owner, "noise_std", self.noise_std, 0, 10)
        in_range(owner, "tol", self.tol, 0, 1)
        in_range(owner, "atol", self.atol, 0)
        in_range(owner, "patience", self.patience, 1, integer=True)
        in_range(owner, "halvings", self.halvings, 0, 30, integer=True)
        in_range(owner, "check_every", self.check_every, 1, integer=True)
        if not isinstance(self.bf16, bool):  # "yes" from a --set would switch it on silently
            raise ConfigError(f"{owner} bf16: {self.bf16!r} is not true or false")
        if self.solver not in SOLVERS:
            raise ConfigError(f"{owner} solver: {self.solver!r} is not one of {', '.join(SOLVERS)}")
        if self.solver == "lbfgs" and (self.batch_size or self.noise_std):
            raise ConfigError(
                f"{owner} solver: 'lbfgs' needs the deterministic full-set objective "
                f"(batch_size 0 and noise_std 0; got {self.batch_size} and {self.noise_std})"
            )
        if self.schedule not in SCHEDULES:
            raise ConfigError(
                f"{owner} schedule: {self.schedule!r} is not one of {', '.join(SCHEDULES)}"
            )


STARTS = ("fbil", "warm")
SOLVERS = ("lbfgs", "adam")


def check_start(owner: str, start: str) -> None:
    if start not in STARTS:
        raise ConfigError(f"{owner} start: {start!r} is not one of {', '.join(STARTS)}")


# Table 5 as the paper runs it (with the full-set tracking every 50 steps, which
# changes no step).
PAPER = {
    "steps": 3000,
    "solver": "adam",
    "lr": 1e-3,
    "batch_size": 512,
    "noise_std": 0.1,
    "schedule": "constant",
    "patience": 500,
    "check_every": 50,
}


# Maps a batch's per-sample imitation losses (and their indices, None: every
# transition) to the value to minimise and named tensors reported in `extra`.
Objective = Callable[
    [torch.Tensor, torch.Tensor | None], tuple[torch.Tensor, dict[str, torch.Tensor]]
]


@dataclass
class Descent:
    """What a method adds to the shared descent: its objective, and for RBFM-Heavy the
    optimizer of the critic's parameters (z's group is added to it, so that a critic
    already fitted keeps its step sizes and moments) and the full-set value at a z
    (which needs the critic)."""

    objective: Objective
    optimizer: torch.optim.Optimizer | None = None
    # The deterministic objective on every transition at z (default: `objective` of the
    # full losses), and tensors to keep from the best iterate.
    full_value: Callable[[torch.Tensor], float] | None = None
    snapshot: Callable[[], dict[str, float]] | None = None


def _steps(
    n: int, cfg: FBILConfig, gen: torch.Generator, device: torch.device
) -> tuple[bool, torch.Tensor | None]:
    """(full batch, the batches' indices when not)."""
    size = cfg.batch_size or FULL_BATCH_MAX
    if cfg.batch_size == 0 and n <= FULL_BATCH_MAX:
        return True, None
    return False, batches(n, size, cfg.steps, gen, device)


def descend(
    model: FBModel,
    data: Prepared,
    cfg: FBILConfig,
    seed: int,
    progress: bool,
    method: str,
    descent: Descent,
    start: torch.Tensor | None = None,
) -> InferenceResult:
    """Projected Adam on z (and the method's own parameters) from the warm start, on
    `descent.objective` of the imitation losses; stops by `convergence.Plateau`.

    Returns the best iterate by the full-set objective (the last one under the
    `constant` schedule, as the paper), with that objective and whether it converged.
    `start` replaces the warm start z_w (a point on the sphere).
    """
    device = data.obs.device
    gen = torch.Generator(device).manual_seed(seed)
    z = (data.z_w if start is None else start).detach().clone().requires_grad_(True)
    if descent.optimizer is None:
        opt: torch.optim.Optimizer = torch.optim.Adam([z], lr=cfg.lr)
    else:
        opt = descent.optimizer
        opt.add_param_group({"params": [z], "lr": cfg.lr})
    tracker = Plateau(opt, cfg.schedule, cfg.tol, cfg.atol, cfg.patience, cfg.halvings)
    result = InferenceResult(method, z)
    result.setup_seconds = time.perf_counter() - data.started
    n = len(data.obs)
    full, indices = _steps(n, cfg, gen, device)
    exact_steps = full and cfg.noise_std == 0  # each step's value is the full-set one
    chunk = cfg.batch_size or FULL_BATCH_MAX

    def full_value(at: torch.Tensor) -> float:
        if descent.full_value is not None:
            return descent.full_value(at)
        with torch.no_grad():
            value, _ = descent.objective(full_losses(data, at, model.radius, chunk), None)
        return float(value)

    best_z, best_extra = z.detach().clone(), {}
    extra: dict[str, torch.Tensor] = {}
    steps = 0
    for step in steps_bar(range(cfg.steps), method, progress):
        idx = None if indices is None else indices[step]
        losses = imitation_losses(data, idx, z, model.radius, cfg.noise_std, gen)
        value, extra = descent.objective(losses, idx)
        if not math.isfinite(float(value.detach())):
            raise FloatingPointError(
                f"{method}: the objective is {float(value.detach())} at step {step} (a non-finite "
                "value would be written as a task vector); the demonstrations or the "
                "model give non-finite losses"
            )
        checked = step % cfg.check_every == 0
        if checked:
            tracked = float(value.detach()) if exact_steps else full_value(z.detach())
            result.trace.append(tracked)
            improved, stop = tracker.update(step, tracked)
            if improved:
                best_z = z.detach().clone()
                best_extra = descent.snapshot() if descent.snapshot else {}
                result.objective = tracked
            if stop:
                break
        opt.zero_grad(set_to_none=True)
        value.backward()  # the networks are frozen: only z and the method's own parameters
        opt.step()
        steps = step + 1
        sphere(z, model.radius)
    if cfg.schedule == "constant":  # the paper returns the last iterate
        best_z = z.detach().clone()
        result.objective = full_value(best_z)
        best_extra = descent.snapshot() if descent.snapshot else {}
    if not torch.isfinite(best_z).all():
        raise FloatingPointError(f"{method}: the task vector is not finite; nothing written")
    result.z = best_z  # an iterate: on the sphere by the descent's own projection
    result.converged = tracker.converged
    result.steps, result.seconds = steps, time.perf_counter() - data.started
    result.extra.update({k: float(v) for k, v in extra.items()})
    result.extra.update(best_extra)
    return result


def _mean(
    losses: torch.Tensor, _: torch.Tensor | None
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    return losses.mean(), {}


def lbfgs(
    model: FBModel,
    data: Prepared,
    cfg: FBILConfig,
    progress: bool,
    start: torch.Tensor | None = None,
) -> InferenceResult:
    """FB-IL by L-BFGS with a strong Wolfe line search on the deterministic full-set
    mean loss, z = sqrt(d) v / ||v|| (smooth in v, no projection step).

    The objective is smooth, and the whole set is one batch, so a quasi-Newton method
    applies; measured against the Adam descent it reaches lower losses in a tenth of
    the actor passes (docs/inference.md). Rounds of `cfg.patience` iterations run until
    one improves the loss by less than max(tol x loss, atol) (converged) or `cfg.steps`
    loss evaluations (actor passes) are spent; `steps` counts those evaluations."""
    v = (data.z_w if start is None else start).detach().clone().requires_grad_(True)
    opt = lbfgs_optimizer([v], cfg.patience)
    result = InferenceResult("fbil", v)
    result.setup_seconds = time.perf_counter() - data.started
    chunks = torch.arange(len(data.obs), device=data.obs.device).split(FULL_BATCH_MAX)
    evals = 0

    def closure() -> torch.Tensor:
        nonlocal evals
        evals += 1
        opt.zero_grad(set_to_none=True)
        total = torch.zeros((), device=v.device)
        for idx in chunks:  # the gradient of the mean, one chunk's graph at a time
            part = imitation_losses(data, idx, v, model.radius, 0.0, None).sum() / len(data.obs)
            part.backward()
            total += part.detach()
        if not math.isfinite(float(total)):
            raise FloatingPointError(
                f"fbil: the loss is {float(total)} after {evals} evaluations; the "
                "demonstrations or the model give non-finite losses"
            )
        return total

    def value() -> float:
        return float(full_losses(data, v.detach(), model.radius, FULL_BATCH_MAX).mean())

    ref = value()
    result.trace.append(ref)
    bar = tqdm(total=cfg.steps, desc="fbil", unit="eval", disable=not progress, leave=False)
    while evals < cfg.steps:
        before = evals
        budget(opt, cfg.patience, cfg.steps - evals)
        opt.step(closure)
        bar.update(evals - before)
        now = value()
        result.trace.append(now)
        if not now < ref - max(cfg.tol * abs(ref), cfg.atol):
            result.converged = True
            break
        ref = now
    bar.close()
    z = project(v.detach(), model.radius)
    if not torch.isfinite(z).all():
        raise FloatingPointError("fbil: the task vector is not finite; nothing written")
    result.z, result.objective = z, value()
    result.steps, result.seconds = evals, time.perf_counter() - data.started
    return result


def lbfgs_optimizer(params: list[torch.Tensor], max_iter: int) -> torch.optim.LBFGS:
    """The L-BFGS of every deterministic full-set descent: strong Wolfe line search, unit
    step, tolerances tight enough that only `max_iter` or the caller's test stops it."""
    return torch.optim.LBFGS(
        params,
        lr=1,
        max_iter=max_iter,
        history_size=20,
        tolerance_grad=1e-10,
        tolerance_change=1e-12,
        line_search_fn="strong_wolfe",
    )


def budget(opt: torch.optim.Optimizer, patience: int, left: int) -> None:
    """An L-BFGS round of `patience` iterations, within the `left` loss evaluations."""
    for group in opt.param_groups:
        group["max_iter"] = max(1, min(patience, left))
        group["max_eval"] = max(1, left)


def infer(
    model: FBModel, demos: Demos, cfg: FBILConfig, seed: int, progress: bool = False
) -> InferenceResult:
    return _solve(model, prepare(model, demos, cfg.bf16), cfg, seed, progress)


def _solve(
    model: FBModel, data: Prepared, cfg: FBILConfig, seed: int, progress: bool
) -> InferenceResult:
    if cfg.solver == "lbfgs":
        return lbfgs(model, data, cfg, progress)
    return descend(model, data, cfg, seed, progress, "fbil", Descent(_mean))


def robust_start(
    model: FBModel, data: Prepared, cfg: FBILConfig, start: str, seed: int, progress: bool
) -> tuple[torch.Tensor | None, dict[str, float]]:
    """Where the robust methods start: z_w (the paper), or FB-IL's converged z under
    the default settings (`start="fbil"`). FB-IL's z is a feasible point of both robust
    problems, and their descents return their best iterate, so from there they can only
    improve their own objective on FB-IL's; from z_w, RBFM-Light's descent, driven by the
    single worst transition, stalled far from it on some models (docs/inference.md)."""
    if start == "warm":
        return None, {}
    # FB-IL under the robust method's own descent settings (cap, step size, schedule...).
    shared = FBILConfig(**{f.name: getattr(cfg, f.name) for f in fields(FBILConfig)})
    first = _solve(model, data, shared, seed, progress)
    return first.z, {"start_steps": float(first.steps), "start_objective": first.objective}
