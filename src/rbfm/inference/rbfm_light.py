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
from rbfm.fb.model import FBModel
from rbfm.inference.common import InferenceResult
from rbfm.inference.demos import Demos
from rbfm.inference.duals import light_objective
from rbfm.inference.fbil import FBILConfig, descend


@dataclass(frozen=True)
class LightConfig(FBILConfig):
    """Table 6: FB-IL's settings with the TV radius, more and smaller steps."""

    steps: int = 5000
    lr: float = 5e-4
    eps: float = 0.8

    def __post_init__(self) -> None:
        super().__post_init__()
        # The adversary moves at most all the mass: beyond 1 the worst case no longer grows.
        in_range("LightConfig", "eps", self.eps, 0, 1)


def infer(
    model: FBModel, demos: Demos, cfg: LightConfig, seed: int, progress: bool = False
) -> InferenceResult:
    def worst_case(losses: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        value, lam = light_objective(losses, cfg.eps)
        return value, {"lambda": lam}

    return descend(model, demos, cfg, seed, progress, "rbfm-light", worst_case)
