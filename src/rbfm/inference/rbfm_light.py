"""RBFM-Light (Section 3.1, Proposition 2, Algorithm 2).

The objective: g(lambda*) = the worst case of E[l] over a TV ball of radius eps_l around
the demonstrations' state distribution, lambda* exact (g is convex piecewise linear in
it, minimised by sorting the losses).

Default settings (`solver="lbfgs"`): from FB-IL's z, L-BFGS on g smoothed at decreasing
temperatures, jointly in z and lambda (`continuation`), the exact worst case tracked
after each stage. Paper settings (`solver="adam"`): per batch, the losses, lambda*, and
an Adam step on z of g(lambda*) (Algorithm 2).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rbfm.checks import in_range
from rbfm.data.demos import Demos
from rbfm.fb.model import FBModel
from rbfm.inference.common import InferenceResult, Prepared, full_losses, prepare
from rbfm.inference.continuation import SmoothedConfig, smoothed_descent
from rbfm.inference.fbil import (
    FULL_BATCH_MAX,
    Descent,
    descend,
    robust_start,
)
from rbfm.inference.fbil import PAPER as FBIL_PAPER
from rbfm.robust.duals import light_objective, light_smoothed


@dataclass(frozen=True)
class LightConfig(SmoothedConfig):
    """FB-IL's default settings with the TV radius; SETTINGS["paper"]: Table 6."""

    eps: float = 0.8
    # 100 iterations per round: a round that improves the
    # smoothed value by < 0.1% ends its stage, and 20 iterations are too few to see the
    # slow progress along the minimax's valley. On the five models (noisy expert, seed 0)
    # 20 stopped 3-11% above what 500-iteration stages reach, 100 within 0.2-1.8%; 100
    # took 1.5-4.1x FB-IL's time over seeds 0-2 (the paper's Table 1: 5x).
    # docs/inference.md, "Rounds long enough to see the valley".
    stage_iters: int = 100

    def __post_init__(self) -> None:
        super().__post_init__()
        # The adversary moves at most all the mass: past 1 the worst case stays the same.
        in_range("LightConfig", "eps", self.eps, 0, 1)


PAPER = {**FBIL_PAPER, "steps": 5000, "lr": 5e-4, "start": "warm"}


def infer(
    model: FBModel, demos: Demos, cfg: LightConfig, seed: int, progress: bool = False
) -> InferenceResult:
    def worst_case(
        losses: torch.Tensor, _: torch.Tensor | None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        value, lam = light_objective(losses, cfg.eps)
        return value, {"lambda": lam}

    data = prepare(model, demos, cfg.bf16)
    start, info = robust_start(model, data, cfg, cfg.start, seed, progress)
    if cfg.solver == "lbfgs":
        result = _smoothed(model, data, cfg, data.z_w if start is None else start, progress)
    else:
        result = descend(model, data, cfg, seed, progress, "rbfm-light", Descent(worst_case), start)
    result.extra.update(info)
    return result


def _smoothed(
    model: FBModel, data: Prepared, cfg: LightConfig, start: torch.Tensor, progress: bool
) -> InferenceResult:
    """The default descent: `continuation.smoothed_descent` on `duals.light_smoothed`,
    lambda started at its exact value at the start."""

    _, lam0 = light_objective(full_losses(data, start, model.radius, FULL_BATCH_MAX), cfg.eps)
    lam = lam0.detach().clone().requires_grad_(True)
    return smoothed_descent(
        model,
        data,
        start,
        "rbfm-light",
        lambda losses, t: light_smoothed(losses, lam, cfg.eps, t),
        [lam],
        lambda losses: float(light_objective(losses, cfg.eps)[0]),
        cfg,
        progress,
    )
