"""RBFM-Light (Section 3.1, Proposition 2, Algorithm 2).

Per batch: imitation losses l_i; the dual variable lambda minimised exactly (the
objective is convex piecewise linear in it, solved by sorting the losses); a
gradient step on z of g(lambda*) = the worst case of E[l] over a TV ball of radius
eps_l around the demonstrations' state distribution.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rbfm.checks import in_range
from rbfm.data.demos import Demos
from rbfm.fb.model import FBModel
from rbfm.inference.common import InferenceResult, prepare
from rbfm.inference.fbil import PAPER as FBIL_PAPER
from rbfm.inference.fbil import Descent, FBILConfig, check_start, descend, robust_start
from rbfm.robust.duals import light_objective


@dataclass(frozen=True)
class LightConfig(FBILConfig):
    """FB-IL's default settings with the TV radius; SETTINGS["paper"]: Table 6."""

    eps: float = 0.8
    start: str = "fbil"  # "fbil": from FB-IL's converged z (`fbil.robust_start`); "warm": z_w

    def __post_init__(self) -> None:
        super().__post_init__()
        # The adversary moves at most all the mass: beyond 1 the worst case no longer grows.
        in_range("LightConfig", "eps", self.eps, 0, 1)
        check_start("LightConfig", self.start)


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
    result = descend(model, data, cfg, seed, progress, "rbfm-light", Descent(worst_case), start)
    result.extra.update(info)
    return result
