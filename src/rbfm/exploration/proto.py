"""ProtoRL exploration (Yarats et al. 2021) on URLB's DDPG backbone, reward-free.

States are embedded (a linear predictor, L2-normalised) and softly assigned to 512
learnable prototypes; the online projection of s learns to predict the Sinkhorn-
balanced assignment of s' under a Polyak-averaged target (SwAV, temperature 0.1).
Each update, every prototype enqueues one batch embedding sampled by its softmax
scores; the intrinsic reward at s' is the distance to its 3rd nearest neighbour in
that queue (2048 entries). As in URLB, the rewards are computed at s' after the
prototype step.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from rbfm.checks import check_fields
from rbfm.errors import unknown
from rbfm.exploration.ddpg import DDPGAgent, DDPGConfig, agent_presets, polyak
from rbfm.exploration.replay import EpisodeReplay


@dataclass(frozen=True)
class ProtoConfig(DDPGConfig):
    """URLB's ProtoRL hyperparameters (the `paper` preset)."""

    pred_dim: int = 128
    proj_dim: int = 512
    num_protos: int = 512
    tau: float = 0.1  # softmax temperature
    topk: int = 3
    queue_size: int = 2048
    encoder_target_tau: float = 0.05
    sinkhorn_iters: int = 3

    def __post_init__(self) -> None:
        super().__post_init__()
        counts = ("pred_dim", "proj_dim", "num_protos", "queue_size", "sinkhorn_iters")
        # topk neighbours among the queue's
        check_fields(self, {**dict.fromkeys(counts, (1, None)), "topk": (1, self.queue_size)})
        check_fields(
            self, {"tau": (0, 1e6), "encoder_target_tau": (0, 1)}, integer=False, open_low=True
        )


# Prototypes as URLB's but in the tiny preset.
PROTO_PRESETS: dict[str, ProtoConfig] = agent_presets(
    ProtoConfig(), {"tiny": {"pred_dim": 16, "proj_dim": 32, "num_protos": 16, "queue_size": 64}}
)


def proto_config(preset: str) -> ProtoConfig:
    if preset not in PROTO_PRESETS:
        raise unknown("ProtoRL preset", preset, PROTO_PRESETS)
    return PROTO_PRESETS[preset]


def sinkhorn_knopp(scores: torch.Tensor, iters: int) -> torch.Tensor:
    """SwAV's balanced soft assignment of a batch (B, K) of scores: each row sums to 1,
    and the prototypes' total mass is pushed towards uniform by `iters` rescalings."""
    q = torch.exp(scores - scores.max()).T  # (K, B)
    q = q / q.sum()
    k, b = q.shape
    for _ in range(iters):
        q = q * ((1 / k) / q.sum(dim=1, keepdim=True))
        q = q * ((1 / b) / q.sum(dim=0, keepdim=True))
    return (q / q.sum(dim=0, keepdim=True)).T


class Projector(nn.Module):
    def __init__(self, pred_dim: int, proj_dim: int) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(pred_dim, proj_dim), nn.ReLU(), nn.Linear(proj_dim, pred_dim)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)  # type: ignore[no-any-return]


class ProtoModule(nn.Module):
    """Predictor, projector, prototypes, their targets and the candidate queue."""

    queue: torch.Tensor
    queue_ptr: torch.Tensor

    def __init__(self, obs_dim: int, cfg: ProtoConfig) -> None:
        super().__init__()
        self.predictor = nn.Linear(obs_dim, cfg.pred_dim)
        self.projector = Projector(cfg.pred_dim, cfg.proj_dim)
        self.protos = nn.Linear(cfg.pred_dim, cfg.num_protos, bias=False)
        # URLB also keeps a target projector, but no loss reads it: only the predictor's.
        self.predictor_target = copy.deepcopy(self.predictor).requires_grad_(False)
        self.register_buffer("queue", torch.zeros(cfg.queue_size, cfg.pred_dim))
        self.register_buffer("queue_ptr", torch.zeros((), dtype=torch.long))

    @torch.no_grad()
    def normalize_protos(self) -> None:
        self.protos.weight.copy_(F.normalize(self.protos.weight, dim=1))

    def online(self) -> list[nn.Parameter]:
        return [
            *self.predictor.parameters(),
            *self.projector.parameters(),
            *self.protos.parameters(),
        ]


class ProtoAgent(DDPGAgent):
    """Reward-free DDPG + ProtoRL (prototypes and a kNN novelty reward)."""

    name = "proto"
    saved = (*DDPGAgent.saved, "proto", "proto_opt")

    def __init__(
        self, obs_dim: int, action_dim: int, cfg: ProtoConfig, seed: int, device: str | None = None
    ) -> None:
        if cfg.num_protos > cfg.queue_size or cfg.queue_size % cfg.num_protos:
            raise ValueError("queue_size must be a multiple of num_protos")
        super().__init__(obs_dim, action_dim, cfg, seed, device)
        self.cfg: ProtoConfig = cfg
        self.proto = ProtoModule(obs_dim, cfg).to(self.device)
        self.proto_opt = torch.optim.Adam(self.proto.online(), lr=cfg.lr, fused=True)

    def _proto_step(self, obs: torch.Tensor, next_obs: torch.Tensor) -> torch.Tensor:
        m, cfg = self.proto, self.cfg
        m.normalize_protos()
        s = F.normalize(m.projector(m.predictor(obs)), dim=1)
        log_p = F.log_softmax(m.protos(s) / cfg.tau, dim=1)
        with torch.no_grad():
            t = F.normalize(m.predictor_target(next_obs), dim=1)
            q = sinkhorn_knopp(m.protos(t) / cfg.tau, cfg.sinkhorn_iters)
        loss = -(q * log_p).sum(1).mean()
        self.proto_opt.zero_grad(set_to_none=True)
        loss.backward()
        self.proto_opt.step()
        return loss.detach()

    @torch.no_grad()
    def _novelty(self, next_obs: torch.Tensor) -> torch.Tensor:
        m, cfg = self.proto, self.cfg
        m.normalize_protos()
        z = F.normalize(m.predictor(next_obs), dim=1)
        prob = F.softmax(m.protos(z).T, dim=1)  # (K, B): each prototype's candidates
        candidates = torch.multinomial(prob, 1, generator=self.gen)[:, 0]
        ptr = int(m.queue_ptr)
        m.queue[ptr : ptr + cfg.num_protos] = z[candidates]
        m.queue_ptr.fill_((ptr + cfg.num_protos) % cfg.queue_size)
        dist = torch.cdist(z, m.queue)
        return dist.topk(cfg.topk, dim=1, largest=False).values[:, -1:]

    def update(self, replay: EpisodeReplay) -> dict[str, float]:
        cfg = self.cfg
        raw = replay.sample(self.rng, cfg.batch_size, cfg.nstep, cfg.discount)
        b = {k: torch.as_tensor(v, device=self.device) for k, v in raw.items()}
        obs, next_obs = b["observation"], b["next_observation"]
        proto_loss = self._proto_step(obs, next_obs)
        reward = self._novelty(next_obs)
        metrics = self.td_update(obs, b["action"], reward, b["discount"][:, None], next_obs)
        polyak(self.proto.predictor, self.proto.predictor_target, cfg.encoder_target_tau)
        return {"proto_loss": float(proto_loss), **metrics}
