"""FB-IL: behavioural cloning in the task space of a frozen FB model.

Minimises E||pi_z(s) + noise - a||^2 over z alone, with z kept on the sqrt(d)
sphere (the actor only saw such z in pretraining), from the warm start z_w.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

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


@dataclass(frozen=True)
class FBILConfig:
    """Table 5; RBFM-Light and RBFM-Heavy extend it (Tables 6-7 share these fields)."""

    steps: int = 3000
    lr: float = 1e-3
    batch_size: int = 512
    noise_std: float = 0.1
    bf16: bool = False  # a bfloat16 copy of the actor (off: the paper's precision)
    trace_every: int = 10

    def __post_init__(self) -> None:
        owner = type(self).__name__
        in_range(owner, "steps", self.steps, 1, integer=True)
        in_range(owner, "lr", self.lr, 0, 1, open_low=True)
        in_range(owner, "batch_size", self.batch_size, 1, integer=True)
        in_range(owner, "noise_std", self.noise_std, 0, 10)
        in_range(owner, "trace_every", self.trace_every, 1, integer=True)


# Maps a batch's per-sample imitation losses to the value to minimise and named
# tensors reported (as floats, from the last step) in the result's `extra`.
Objective = Callable[[torch.Tensor], tuple[torch.Tensor, dict[str, torch.Tensor]]]


def descend(
    model: FBModel,
    demos: Demos,
    cfg: FBILConfig,
    seed: int,
    progress: bool,
    method: str,
    objective: Objective,
) -> InferenceResult:
    """Projected Adam on z alone, from the warm start, of `objective` of the imitation
    losses of random demonstration batches."""
    data = prepare(model, demos, cfg.bf16)
    gen = torch.Generator(data.obs.device).manual_seed(seed)
    z = data.z_w.clone().requires_grad_(True)
    opt = torch.optim.Adam([z], lr=cfg.lr)
    result = InferenceResult(method, z)
    result.setup_seconds = time.perf_counter() - data.started
    extra: dict[str, torch.Tensor] = {}
    indices = batches(len(data.obs), cfg.batch_size, cfg.steps, gen, data.obs.device)
    for step, idx in enumerate(steps_bar(indices, method, progress)):
        losses = imitation_losses(data, idx, z, model.radius, cfg.noise_std, gen)
        value, extra = objective(losses)
        opt.zero_grad(set_to_none=True)
        value.backward(inputs=[z])  # the networks are frozen: no weight gradients
        opt.step()
        sphere(z, model.radius)
        if step % cfg.trace_every == 0:
            result.trace.append(float(value.detach()))
    result.z = project(z.detach(), model.radius)
    result.steps, result.seconds = cfg.steps, time.perf_counter() - data.started
    result.extra.update({k: float(v) for k, v in extra.items()})
    return result


def infer(
    model: FBModel, demos: Demos, cfg: FBILConfig, seed: int, progress: bool = False
) -> InferenceResult:
    return descend(model, demos, cfg, seed, progress, "fbil", lambda losses: (losses.mean(), {}))
