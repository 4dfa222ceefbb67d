"""What the inference methods share: the result type, data preparation, the loss."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from rbfm.errors import DatasetError
from rbfm.fb.model import FBModel
from rbfm.fb.networks import project
from rbfm.inference.demos import Demos, warm_start


@dataclass
class InferenceResult:
    method: str
    z: torch.Tensor  # on the sqrt(d) sphere
    trace: list[float] = field(default_factory=list)  # objective, every `trace_every` steps
    seconds: float = 0.0  # everything, preparation included
    setup_seconds: float = 0.0  # the once-per-run part: tensors, embeddings, features
    steps: int = 0
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def ms_per_step(self) -> float:
        return 1000 * (self.seconds - self.setup_seconds) / max(self.steps, 1)


@dataclass
class Prepared:
    """Demonstration tensors and the z-independent work done once per run."""

    obs: torch.Tensor
    action: torch.Tensor
    next_obs: torch.Tensor
    next_action: torch.Tensor
    s_embed: torch.Tensor  # the actor's state-only embedding of obs
    z_w: torch.Tensor
    started: float  # perf_counter at the start of preparation (timings include it)


def prepare(model: FBModel, demos: Demos) -> Prepared:
    started = time.perf_counter()
    if demos.observation.shape[1] != model.obs_dim or demos.action.shape[1] != model.action_dim:
        raise DatasetError(
            f"demonstrations of {demos.domain} ({demos.observation.shape[1]}-dim observations, "
            f"{demos.action.shape[1]}-dim actions) do not fit this model "
            f"({model.obs_dim}/{model.action_dim})"
        )
    device = next(model.parameters()).device
    t = {k: torch.as_tensor(v, device=device) for k, v in demos.transitions().items()}
    with torch.no_grad():
        s_embed = model.actor.embed_state(t["observation"])
    return Prepared(
        t["observation"],
        t["action"],
        t["next_observation"],
        t["next_action"],
        s_embed,
        warm_start(model, demos),
        started,
    )


def imitation_losses(
    model: FBModel,
    data: Prepared,
    idx: torch.Tensor,
    z: torch.Tensor,
    noise_std: float,
    gen: torch.Generator,
    bf16: bool = False,
) -> torch.Tensor:
    """Per-sample ||pi_z(s) + noise - a||^2 on a batch (policy smoothing noise, Tables 5-7).

    With bf16 the actor runs under bfloat16 autocast (2.3x faster per step at paper
    size on our CPUs); the losses are computed in fp32.
    """
    zb = project(z, model.radius).expand(len(idx), -1)
    with torch.autocast(data.obs.device.type, dtype=torch.bfloat16, enabled=bf16):
        pi = model.actor.from_embedding(data.s_embed[idx], data.obs[idx], zb).float()
    noisy = pi + noise_std * torch.randn(pi.shape, generator=gen, device=pi.device)
    return (noisy - data.action[idx]).square().sum(-1)


def batches(
    n: int, size: int, steps: int, gen: torch.Generator, device: torch.device
) -> torch.Tensor:
    """(steps, size) indices drawn uniformly with replacement, in one call."""
    return torch.randint(n, (steps, size), generator=gen, device=device)


def sphere(z: torch.Tensor, radius: float) -> None:
    """Projects the optimised z back onto the sphere in place (projected gradient)."""
    with torch.no_grad():
        z.copy_(project(z, radius))
