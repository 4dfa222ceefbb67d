"""RBFM-Light (Section 3.1, Proposition 2, Algorithm 2).

Per batch: imitation losses l_i; the dual variable lambda minimised exactly (the
objective is convex piecewise linear in it, solved by sorting the losses); a
gradient step on z of g(lambda*) = the worst case of E[l] over a TV ball of radius
eps_l around the demonstrations' state distribution.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

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
from rbfm.inference.duals import light_objective


@dataclass(frozen=True)
class LightConfig:
    """Table 6."""

    eps: float = 0.8
    steps: int = 5000
    lr: float = 5e-4
    batch_size: int = 512
    noise_std: float = 0.1
    bf16: bool = False  # a bfloat16 copy of the actor (off: the paper's precision)
    trace_every: int = 10


def infer(
    model: FBModel, demos: Demos, cfg: LightConfig, seed: int, progress: bool = False
) -> InferenceResult:
    data = prepare(model, demos, cfg.bf16)
    gen = torch.Generator(data.obs.device).manual_seed(seed)
    z = data.z_w.clone().requires_grad_(True)
    opt = torch.optim.Adam([z], lr=cfg.lr)
    result = InferenceResult("rbfm-light", z)
    result.setup_seconds = time.perf_counter() - data.started
    lam = torch.zeros(())
    indices = batches(len(data.obs), cfg.batch_size, cfg.steps, gen, data.obs.device)
    for step, idx in enumerate(steps_bar(indices, "rbfm-light", progress)):
        losses = imitation_losses(data, idx, z, model.radius, cfg.noise_std, gen)
        value, lam = light_objective(losses, cfg.eps)
        opt.zero_grad(set_to_none=True)
        value.backward(inputs=[z])  # the networks are frozen: no weight gradients
        opt.step()
        sphere(z, model.radius)
        if step % cfg.trace_every == 0:
            result.trace.append(float(value.detach()))
    result.z = project(z.detach(), model.radius)
    result.steps, result.seconds = cfg.steps, time.perf_counter() - data.started
    result.extra["lambda"] = float(lam)
    return result
