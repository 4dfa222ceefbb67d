"""Reward-based imitation (ER-FB of Pirotta et al., "Fast Imitation via Behavior
Foundation Models", ICLR 2024): the demonstrator's reward is the density ratio
r = d_E / rho of its state distribution to the data's, and FB's zero-shot inference for a
reward, z = E_rho[r(s) B(s)], turns it into z = E_{d_E}[B(s)]: the mean of B over the
demonstrated states, projected onto the sqrt(d) sphere.

It reads no action, so a demonstrator whose actions no pi_z takes (a planner, a person)
costs it nothing that behavioural cloning pays. Over uniform-length episodes it is FB-IL's
warm start z_w.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from rbfm.data.demos import Demos
from rbfm.fb.model import FBModel
from rbfm.inference.common import InferenceResult
from rbfm.inference.expert_demos import warm_start


@dataclass(frozen=True)
class ERConfig:
    """Closed form: nothing to set."""


def infer(
    model: FBModel, demos: Demos, cfg: ERConfig, seed: int = 0, progress: bool = False
) -> InferenceResult:
    """z from the demonstrated states alone (episodes weighted equally)."""
    del cfg, seed, progress  # closed form, deterministic
    started = time.perf_counter()
    z = warm_start(model, demos)
    if not torch.isfinite(z).all():
        raise FloatingPointError("er: the task vector is not finite; nothing written")
    result = InferenceResult("er", z, objective=0.0, converged=True)
    result.seconds = result.setup_seconds = time.perf_counter() - started
    return result
