"""The FB model (F, B, actor and target networks) and one training update (Algorithm 1)."""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

import torch
from torch import nn

from rbfm.errors import ConfigError
from rbfm.fb.config import FBConfig
from rbfm.fb.context import slot_width
from rbfm.fb.losses import (
    actor_loss,
    behaviour_cloned_actor_loss,
    conservative_penalty,
    fb_loss,
    orthonormality_loss,
    pessimistic,
    reward_z,
)
from rbfm.fb.networks import Actor, BackwardMap, ForwardMap, ObsNorm, Sizes, project


def noisy(mu: torch.Tensor, std: float, clip: float, gen: torch.Generator | None) -> torch.Tensor:
    """mu + clip(N(0, std)), kept in [-1, 1] (TD3 target-policy smoothing).

    The final clamp passes gradients straight through, as both references' truncated
    normal does: with a plain clamp, samples beyond the box give the actor no gradient,
    so an actor near saturation is only pulled by the samples inside and cannot recover.
    """
    noise = torch.randn(mu.shape, generator=gen, device=mu.device, dtype=mu.dtype) * std
    x = mu + noise.clamp(-clip, clip)
    return x + (x.clamp(-1, 1) - x).detach()


class FBModel(nn.Module):
    """Forward map (two heads), backward map, actor, and the targets of F and B."""

    def __init__(self, obs_dim: int, action_dim: int, cfg: FBConfig) -> None:
        super().__init__()
        self.obs_dim, self.action_dim, self.cfg = obs_dim, action_dim, cfg
        # F and the actor read [s, window] with a context (`rbfm.fb.context`); B reads s.
        self.input_dim = obs_dim + cfg.context * slot_width(obs_dim, action_dim)
        sizes = Sizes(
            self.input_dim,
            action_dim,
            cfg.z_dim,
            cfg.preprocessor_hidden,
            cfg.embed_dim,
            cfg.obs_norm,
        )
        self.forward_map = ForwardMap(sizes, cfg.forward_hidden, heads=2)
        self.backward_map = BackwardMap(obs_dim, cfg.z_dim, cfg.backward_hidden, cfg.obs_norm)
        self.actor = Actor(sizes, cfg.actor_hidden)
        self.target_forward_map = copy.deepcopy(self.forward_map).requires_grad_(False)
        self.target_backward_map = copy.deepcopy(self.backward_map).requires_grad_(False)
        # E_rho[B B^T] of the training states, where the description stores it
        # (`rbfm.fb.moment`): not a weight, so the weights' file and hash stay the model's.
        self.b_moment: torch.Tensor | None = None

    @torch.no_grad()
    def set_obs_stats(self, mean: torch.Tensor, std: torch.Tensor) -> None:
        """Every network's (targets' too) observation statistics; needs cfg.obs_norm.
        Features that do not vary in the data keep a scale of 1."""
        norms = [m for m in self.modules() if isinstance(m, ObsNorm)]
        if not norms:
            raise ValueError("set_obs_stats: this model has no observation normaliser")
        std = torch.where(std > 1e-6, std, torch.ones_like(std))
        # A window's slots hold states (the same statistics), actions and a flag (as is).
        k, a = self.cfg.context, self.action_dim
        slot_mean = torch.cat([mean, mean.new_zeros(a + 1)])
        slot_std = torch.cat([std, std.new_ones(a + 1)])
        wide_mean = torch.cat([mean, slot_mean.repeat(k)])
        wide_std = torch.cat([std, slot_std.repeat(k)])
        for norm in norms:
            wide = len(norm.mean) > len(mean)
            norm.mean.copy_(wide_mean if wide else mean)
            norm.std.copy_(wide_std if wide else std)

    @property
    def radius(self) -> float:
        return math.sqrt(self.cfg.z_dim)

    @torch.no_grad()
    def act(self, obs: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """The deterministic policy pi_z(s) (mean action); z is (d,), (1, d) or (N, d);
        `obs` is [s, window] for a model with a context (`input_dim` wide)."""
        return self.actor(obs, z.expand(obs.shape[0], -1))

    @torch.no_grad()
    def reward_z(self, obs: torch.Tensor, reward: torch.Tensor) -> torch.Tensor:
        """Zero-shot z for a reward given at states `obs` (eq. 4 with the sqrt(d) projection)."""
        return reward_z(self.backward_map(obs), reward)


def _autocast(
    enabled: bool, device: torch.device, cache: bool = True
) -> AbstractContextManager[object]:
    if not enabled:
        return nullcontext()
    # A CUDA graph must not capture autocast's cache of cast weights (PyTorch's CUDA
    # graphs notes): without the cache the weights are cast inside the graph each replay.
    return torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=cache)


# Eager updates before a CUDA graph is captured: the optimizers' lazy state and cuBLAS's
# workspaces must exist first, made on a side stream (PyTorch's CUDA graphs notes).
GRAPH_WARMUP = 3


class FBTrainer:
    """Optimisers, random generator and the update step of FB pretraining."""

    def __init__(
        self, model: FBModel, seed: int, compile: bool = False, cuda_graph: bool = False
    ) -> None:
        self.model, self.cfg = model, model.cfg
        self.device = next(model.parameters()).device
        check_cuda_graph(cuda_graph, self.device, compile, self.cfg.average_tau)
        # With `cuda_graph`, after GRAPH_WARMUP eager updates the whole update (both
        # optimizer steps and the Polyak step) is captured once and replayed: on a GPU the
        # eager update is bound by launching its ~460 kernels one by one, the GPU busy a
        # third of the time (docs/benchmarks.md, "Where a GPU update's time goes").
        self.cuda_graph = cuda_graph
        self._graph: torch.cuda.CUDAGraph | None = None
        self._static_in: dict[str, torch.Tensor] = {}
        self._static_out: dict[str, torch.Tensor] = {}
        self._eager_left = GRAPH_WARMUP if cuda_graph else 0
        # The update calls these; with `compile`, torch.compile'd views of the same
        # modules (same parameters), so evaluation and export keep the eager modules and
        # never recompile for their batch shapes. bf16 on one busy CPU core: 33.2 -> 29.1 ms
        # per update at the cpu preset; fp32: no gain (docs/benchmarks.md).
        nets = (model.forward_map, model.backward_map, model.actor)
        targets = (model.target_forward_map, model.target_backward_map)
        if compile:
            nets = tuple(torch.compile(n) for n in nets)  # type: ignore[assignment]
            targets = tuple(torch.compile(n) for n in targets)  # type: ignore[assignment]
        self._forward, self._backward, self._actor = nets
        self._target_forward, self._target_backward = targets
        fb_params = [*model.forward_map.parameters(), *model.backward_map.parameters()]
        fused = self.device.type in ("cpu", "cuda")
        self.fb_opt, self.actor_opt = (
            # In a graph the step counter and the learning rate live on the GPU, the rate
            # a tensor that the schedule fills in place between replays.
            torch.optim.Adam(
                params,
                lr=torch.tensor(self.cfg.lr, device=self.device),
                fused=True,
                capturable=True,
            )
            if cuda_graph
            else torch.optim.Adam(params, lr=self.cfg.lr, fused=fused)
            for params in (fb_params, list(model.actor.parameters()))
        )
        self.gen = torch.Generator(self.device).manual_seed(seed)
        self._online: list[torch.Tensor] = [
            *model.forward_map.parameters(),
            *model.backward_map.parameters(),
        ]
        self._target: list[torch.Tensor] = [
            *model.target_forward_map.parameters(),
            *model.target_backward_map.parameters(),
        ]
        self.updates = 0
        self.schedules = (
            [
                torch.optim.lr_scheduler.CosineAnnealingLR(
                    opt, T_max=self.cfg.steps, eta_min=self.cfg.lr * self.cfg.lr_end
                )
                for opt in (self.fb_opt, self.actor_opt)
            ]
            if self.cfg.lr_end < 1
            else []
        )
        # Everything evaluation and export read; averaged when average_tau > 0.
        self._served: list[torch.Tensor] = [p for p in model.parameters() if p.requires_grad]
        self.average: list[torch.Tensor] | None = (
            [p.detach().clone() for p in self._served] if self.cfg.average_tau > 0 else None
        )

    def sample_z(self, next_obs: torch.Tensor) -> torch.Tensor:
        """Uniform on the sqrt(d) sphere, or with probability z_mix_ratio B(s') of a
        shuffled batch state."""
        n, d = next_obs.shape[0], self.cfg.z_dim
        g = self.gen
        z = project(torch.randn(n, d, generator=g, device=self.device), math.sqrt(d))
        perm = torch.randperm(n, generator=g, device=self.device)
        with torch.no_grad():
            z_b = self._backward(next_obs[perm])
        use_b = torch.rand(n, 1, generator=g, device=self.device) < self.cfg.z_mix_ratio
        return torch.where(use_b, z_b.float(), z)

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """One FB step, one actor step, one Polyak step. Returns detached metrics."""
        if not self.cuda_graph:
            metrics = self._step(batch)
        elif self._eager_left > 0:
            self._eager_left -= 1
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                metrics = self._step(batch)
            torch.cuda.current_stream(self.device).wait_stream(side)
        else:
            if self._graph is None:
                self._capture(batch)
            for name, buffer in self._static_in.items():
                buffer.copy_(batch[name])
            assert self._graph is not None
            self._graph.replay()
            # The graph's outputs are overwritten by the next replay.
            metrics = {k: v.clone() for k, v in self._static_out.items()}
        with torch.no_grad():
            self.updates += 1
            if self.average is not None:
                weight = max(self.cfg.average_tau, 1 / self.updates)
                torch._foreach_lerp_(self.average, self._served, weight)
        for schedule in self.schedules:
            schedule.step()
        return metrics

    def _capture(self, batch: dict[str, torch.Tensor]) -> None:
        """Records `_step` on static copies of the batch's tensors as one CUDA graph;
        nothing runs until it is replayed. The generator is registered, so that each
        replay draws fresh numbers and advances its state as an eager update would."""
        self._static_in = {k: v.clone() for k, v in batch.items()}
        graph = torch.cuda.CUDAGraph()
        graph.register_generator_state(self.gen)
        self.fb_opt.zero_grad(set_to_none=True)
        self.actor_opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            self._static_out = self._step(self._static_in)
        self._graph = graph

    def _step(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The update's tensor work, all of it on the device (what a graph captures)."""
        cfg, m, g = self.cfg, self.model, self.gen
        actor, forward = self._actor, self._forward
        obs, action = batch["observation"], batch["action"]
        next_obs, discount = batch["next_observation"], batch["discount"]
        # With a context, F and the actor read [s, window] and B the state alone.
        next_state = batch.get("next_state", next_obs)
        cache = not self.cuda_graph
        with _autocast(cfg.bf16, self.device, cache):
            z = self.sample_z(next_state)
            with torch.no_grad():
                next_action = noisy(actor(next_obs, z), cfg.actor_noise, cfg.actor_noise_clip, g)
                target_f = self._target_forward(next_obs, next_action, z).float()
                target_b = self._target_backward(next_state).float()
            f = forward(obs, action, z).float()
            b = self._backward(next_state).float()
        # The N x N matrices and the losses in fp32, outside autocast, even with --bf16.
        target_M = pessimistic(torch.matmul(target_f, target_b.T), cfg.target_pessimism)
        M = torch.matmul(f, b.T)
        off, diag = fb_loss(M, target_M, discount, cfg.gamma)
        ortho = orthonormality_loss(b)
        loss = off + diag + cfg.ortho_coef * ortho
        q_data = (f * z).sum(-1)
        metrics = {}
        if cfg.conservative_coef > 0:
            # Drawn only when on, so the paper's recipe keeps its random stream.
            penalty = self.conservative_penalty(obs, z, q_data)
            loss = loss + cfg.conservative_coef * penalty
            metrics["conservative"] = penalty.detach()
        self.fb_opt.zero_grad(set_to_none=True)
        loss.backward()
        self.fb_opt.step()

        with _autocast(cfg.bf16, self.device, cache):
            mu = actor(obs, z)
            pi = noisy(mu, cfg.actor_noise, cfg.actor_noise_clip, g)
            f_pi = forward(obs, pi, z).float()
        if cfg.actor_bc > 0:
            a_loss = behaviour_cloned_actor_loss(
                f_pi, z, mu.float(), action, cfg.actor_bc, cfg.actor_pessimism
            )
            metrics["bc"] = (mu.detach().float() - action).square().mean()
        else:
            a_loss = actor_loss(f_pi, z, cfg.actor_pessimism)
        self.actor_opt.zero_grad(set_to_none=True)
        # Only the actor's gradients: F's weight gradients would be discarded anyway.
        a_loss.backward(inputs=list(m.actor.parameters()))
        self.actor_opt.step()

        with torch.no_grad():
            torch._foreach_lerp_(self._target, self._online, cfg.tau)
        return {
            "fb_offdiag": off.detach(),
            "fb_diag": diag.detach(),
            "ortho": ortho.detach(),
            "actor_loss": a_loss.detach(),
            "q": pessimistic((f_pi.detach() * z).sum(-1), cfg.actor_pessimism).mean(),
            # Q at the data's actions with the actor's pessimism: a growing gap to "q"
            # is the actor exploiting F where the data says nothing.
            "q_data": pessimistic(q_data.detach(), cfg.actor_pessimism).mean(),
            **metrics,
        }

    def conservative_penalty(
        self, obs: torch.Tensor, z: torch.Tensor, q_data: torch.Tensor
    ) -> torch.Tensor:
        """`losses.conservative_penalty` over half uniform, half noisy actor actions."""
        cfg, m, g = self.cfg, self.model, self.gen
        k, n = cfg.conservative_actions, obs.shape[0]
        n_uniform = k // 2
        with torch.no_grad():
            uniform = (
                torch.rand(n_uniform * n, m.action_dim, generator=g, device=self.device)
                .mul_(2)
                .sub_(1)
            )
            mu = self._actor(obs, z).float().repeat(k - n_uniform, 1)
            actions = torch.cat([uniform, noisy(mu, cfg.actor_noise, cfg.actor_noise_clip, g)])
        obs_k, z_k = obs.repeat(k, 1), z.repeat(k, 1)
        with _autocast(cfg.bf16, self.device, not self.cuda_graph):
            f = self._forward(obs_k, actions, z_k).float()
        q = (f * z_k).sum(-1).unflatten(1, (k, n))
        return conservative_penalty(q, q_data)

    @contextmanager
    def served(self) -> Iterator[FBModel]:
        """The model with its averaged weights in place (the online ones without
        averaging); the online weights come back bitwise on exit."""
        if self.average is None:
            yield self.model
            return
        with torch.no_grad():
            online = [p.detach().clone() for p in self._served]
            torch._foreach_copy_(self._served, self.average)
        try:
            yield self.model
        finally:
            with torch.no_grad():
                torch._foreach_copy_(self._served, online)

    def state_dict(self) -> dict[str, object]:
        state: dict[str, object] = {
            "fb_opt": self.fb_opt.state_dict(),
            "actor_opt": self.actor_opt.state_dict(),
            "gen": self.gen.get_state(),
            "updates": self.updates,
            "schedules": [s.state_dict() for s in self.schedules],
        }
        if self.average is not None:
            state["average"] = self.average
        return state

    def load_state_dict(self, state: dict[str, object]) -> None:
        self.fb_opt.load_state_dict(state["fb_opt"])  # type: ignore[arg-type]
        self.actor_opt.load_state_dict(state["actor_opt"])  # type: ignore[arg-type]
        # A generator's state is a CPU byte tensor whatever its device, but a checkpoint
        # loaded with map_location="cuda" moves it there.
        self.gen.set_state(state["gen"].cpu())  # type: ignore[attr-defined]
        if self.cuda_graph:  # an eager run saved float rates; the graph reads tensors
            for opt in (self.fb_opt, self.actor_opt):
                for group in opt.param_groups:
                    if not isinstance(group["lr"], torch.Tensor):
                        group["lr"] = torch.tensor(group["lr"], device=self.device)
        # Runs saved before these fields existed had neither schedule nor average.
        self.updates = int(state.get("updates", 0))  # type: ignore[call-overload]
        for schedule, saved in zip(self.schedules, state.get("schedules", []), strict=True):  # type: ignore[call-overload]
            schedule.load_state_dict(saved)
        if self.average is not None:
            torch._foreach_copy_(self.average, state["average"])  # type: ignore[arg-type]


def check_cuda_graph(on: bool, device: torch.device, compile: bool, average_tau: float) -> None:
    """Rejects a CUDA graph where it cannot run, before any update."""
    if not on:
        return
    if compile:
        raise ConfigError("cuda_graph and compile are exclusive: choose one")
    if average_tau > 0:
        # The average's weight changes every update; a graph would replay the first one.
        raise ConfigError("cuda_graph needs average_tau 0 (weight averaging is eager only)")
    if device.type != "cuda":
        raise ConfigError(f"cuda_graph needs a CUDA device (the model is on {device})")
