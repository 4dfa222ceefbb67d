"""What the inference methods share: the result type, data preparation, the loss."""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from rbfm.data.demos import Demos
from rbfm.device import slow_bf16
from rbfm.errors import DatasetError
from rbfm.fb.context import demo_inputs
from rbfm.fb.model import FBModel
from rbfm.fb.networks import Actor, project
from rbfm.inference.expert_demos import warm_start


@dataclass
class InferenceResult:
    method: str
    z: torch.Tensor  # on the sqrt(d) sphere
    # The method's objective on every demonstration transition, deterministic (no
    # smoothing noise): at each check during the descent, and at the returned z.
    trace: list[float] = field(default_factory=list)
    objective: float = math.nan
    converged: bool = False  # the stopping rule held (see `Plateau`), not the step cap
    # A smoothed continuation ran out of temperature stages while the last still improved
    # the objective (before its step cap).
    stage_capped: bool = False
    seconds: float = 0.0  # everything, preparation included
    setup_seconds: float = 0.0  # the once-per-run part: tensors, embeddings, features
    steps: int = 0  # steps taken (<= the config's cap)
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def cap(self) -> str | None:
        """What stopped a run that did not converge ("step cap" or "stage cap"); None
        for a converged one."""
        if self.converged:
            return None
        return "stage cap" if self.stage_capped else "step cap"

    @property
    def ms_per_step(self) -> float:
        return 1000 * (self.seconds - self.setup_seconds) / max(self.steps, 1)

    def stopped(self, settings: str) -> str:
        """How the descent ended, for a reader deciding whether to trust its z."""
        if self.converged:
            return "converged"
        if settings != "default":
            return "still improving at the end (the paper's fixed step count)"
        if self.cap == "step cap":
            return "NOT converged: the step cap came first (raise --steps)"
        return (
            "NOT converged: its last temperature stage still improved the objective "
            "(the z is its best exact iterate)"
        )


@dataclass
class Prepared:
    """Demonstration tensors and the z-independent work done once per run."""

    obs: torch.Tensor
    action: torch.Tensor
    next_obs: torch.Tensor
    next_action: torch.Tensor
    actor: Actor  # the model's actor, or a frozen bfloat16 copy of it
    actor_obs: torch.Tensor  # obs in the actor's dtype
    s_embed: torch.Tensor  # the actor's state-only embedding of obs, in its dtype
    z_w: torch.Tensor
    started: float  # perf_counter at the start of preparation (timings include it)


def prepare(model: FBModel, demos: Demos, bf16: bool = False) -> Prepared:
    """Checks the demonstrations fit the model and does the z-independent work.

    With bf16 the actor is a bfloat16 copy made once: the networks are frozen, so
    casting weights per step (what autocast does) is wasted; that cast was a third of
    a paper-size step's time.
    """
    started = time.perf_counter()
    if demos.observation.shape[1] != model.obs_dim or demos.action.shape[1] != model.action_dim:
        raise DatasetError(
            f"demonstrations of {demos.domain} ({demos.observation.shape[1]}-dim observations, "
            f"{demos.action.shape[1]}-dim actions) do not fit this model "
            f"({model.obs_dim}/{model.action_dim})"
        )
    device = next(model.parameters()).device
    # F and the actor read [s, window] when the model has a context.
    inputs = demo_inputs(demos, model.cfg.context)
    t = {k: torch.as_tensor(v, device=device) for k, v in inputs.items()}
    # A frozen copy: inference differentiates only z (and a method's own variables);
    # with the model's trainable actor every backward pass also computed the gradients
    # of all its weights, wasted work of the pass's own size.
    actor = copy.deepcopy(model.actor).requires_grad_(False)
    dtype = next(actor.parameters()).dtype
    if bf16:
        actor, dtype = actor.to(torch.bfloat16), torch.bfloat16
        if slow_bf16(device):
            _float32_linears(actor)
    actor_obs = t["observation"].to(dtype)
    with torch.no_grad():
        s_embed = actor.embed_state(actor_obs)
    return Prepared(
        t["observation"],
        t["action"],
        t["next_observation"],
        t["next_action"],
        actor,
        actor_obs,
        s_embed,
        warm_start(model, demos),
        started,
    )


class _Bf16Linear(nn.Module):
    """A frozen bfloat16 Linear computed in float32: bfloat16 inputs and weights, float32
    accumulation, one rounding of the output to bfloat16, the arithmetic of a native
    bfloat16 matmul up to the order of the sums (0.02% of the outputs one bfloat16 step
    apart). On CPUs without bfloat16 units (no avx512_bf16 or AMX) torch runs bfloat16
    matmuls in a generic kernel: on a 2-core avx2-only AMD EPYC a 4,000 x
    1,024 x 1,024 forward and backward took 109 s that way and 3.5 s this way, and a
    quadruped FB-IL inference ~100 s against ~1 s on the project's avx512_bf16 machine."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.weight = linear.weight.detach().float()
        self.bias = None if linear.bias is None else linear.bias.detach().float()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x.float(), self.weight, self.bias).to(torch.bfloat16)


def _float32_linears(module: nn.Module) -> None:
    """Replaces, in place, every Linear of a bfloat16 module by a `_Bf16Linear`."""
    for name, child in module.named_children():
        if isinstance(child, nn.Linear):
            setattr(module, name, _Bf16Linear(child))
        else:
            _float32_linears(child)


def imitation_losses(
    data: Prepared,
    idx: torch.Tensor | None,
    z: torch.Tensor,
    radius: float,
    noise_std: float,
    gen: torch.Generator | None,
) -> torch.Tensor:
    """Per-sample ||pi_z(s) + noise - a||^2 on a batch (`idx`; None: every transition),
    with the policy smoothing noise of Tables 5-7 when noise_std > 0.

    The actor runs in its own dtype (see `prepare`); the losses are computed in fp32.
    """
    s_embed, obs, action = (
        (data.s_embed, data.actor_obs, data.action)
        if idx is None
        else (data.s_embed[idx], data.actor_obs[idx], data.action[idx])
    )
    zb = project(z, radius).to(obs.dtype).expand(len(obs), -1)
    pi = data.actor.from_embedding(s_embed, obs, zb).float()
    if noise_std > 0:
        pi = pi + noise_std * torch.randn(pi.shape, generator=gen, device=pi.device)
    return (pi - action).square().sum(-1)


def full_losses(data: Prepared, z: torch.Tensor, radius: float, chunk: int) -> torch.Tensor:
    """The deterministic loss of every transition, without gradient, `chunk` at a time."""
    with torch.no_grad():
        parts = [
            imitation_losses(data, idx, z, radius, 0.0, None)
            for idx in torch.arange(len(data.obs), device=data.obs.device).split(chunk)
        ]
    return torch.cat(parts)


def batches(
    n: int, size: int, steps: int, gen: torch.Generator, device: torch.device
) -> torch.Tensor:
    """(steps, size) indices drawn uniformly with replacement, in one call."""
    return torch.randint(n, (steps, size), generator=gen, device=device)


def sphere(z: torch.Tensor, radius: float) -> None:
    """Projects the optimised z back onto the sphere in place (projected gradient)."""
    with torch.no_grad():
        z.copy_(project(z, radius))
