"""Forward, backward and actor networks of an FB model.

Architecture of the reference implementations (zero-shot-rl, metamotivo): every
MLP starts with Linear -> LayerNorm -> Tanh and continues with Linear -> ReLU.
F(s, a, z) embeds (s, a) and (s, z) separately, concatenates the two embeddings
and maps them to R^d; its two heads are one batched ("parallel") network, so the
pair costs a few batched matmuls instead of a Python loop over networks.
B(s) is normalised to the sphere of radius sqrt(d). The actor embeds s and
(s, z) the same way and ends in tanh; the s-only embedding does not depend on z,
which lets task inference compute it once for all demonstration states.
Weights start orthogonal and biases at zero, as both references initialise them
(their `weight_init`); PyTorch's default uniform init starts F's two heads further
apart and changes how fast the Q estimate grows early in training.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F


class ParallelLinear(nn.Module):
    """`n` independent linear layers applied to a (n, batch, in) input in one bmm."""

    def __init__(self, n: int, inp: int, out: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n, inp, out))
        self.bias = nn.Parameter(torch.zeros(n, 1, out))
        for w in self.weight:  # orthogonal per member, like nn.Linear layers in `mlp`
            nn.init.orthogonal_(w)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(self.bias, x, self.weight)


class ParallelLayerNorm(nn.Module):
    """LayerNorm over the last dimension with separate affine parameters per member."""

    def __init__(self, n: int, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n, 1, dim))
        self.bias = nn.Parameter(torch.zeros(n, 1, dim))
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.addcmul(self.bias, F.layer_norm(x, (self.dim,)), self.weight)


class ObsNorm(nn.Module):
    """(s - mean) / std with the training data's statistics, kept as buffers so that
    they travel with the weights (`FBModel.set_obs_stats`)."""

    mean: torch.Tensor
    std: torch.Tensor

    def __init__(self, obs_dim: int) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(obs_dim))
        self.register_buffer("std", torch.ones(obs_dim))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return (obs - self.mean) / self.std


def obs_norm(obs_dim: int, enabled: bool) -> nn.Module:
    return ObsNorm(obs_dim) if enabled else nn.Identity()


def mlp(inp: int, hidden: tuple[int, ...], out: int, parallel: int = 0) -> nn.Sequential:
    """Linear-LayerNorm-Tanh, then Linear-ReLU per further hidden layer, then Linear;
    orthogonal weights, zero biases.

    With `parallel` > 0 the layers are batched over that many independent members
    and expect inputs of shape (parallel, batch, inp).
    """

    def linear(i: int, o: int) -> nn.Module:
        if parallel:
            return ParallelLinear(parallel, i, o)
        layer = nn.Linear(i, o)
        nn.init.orthogonal_(layer.weight)
        nn.init.zeros_(layer.bias)
        return layer

    def norm(d: int) -> nn.Module:
        return ParallelLayerNorm(parallel, d) if parallel else nn.LayerNorm(d)

    layers: list[nn.Module] = [linear(inp, hidden[0]), norm(hidden[0]), nn.Tanh()]
    for a, b in itertools.pairwise(hidden):
        layers += [linear(a, b), nn.ReLU()]
    layers.append(linear(hidden[-1], out))
    return nn.Sequential(*layers)


@dataclass(frozen=True)
class Sizes:
    """What F and the actor share: input sizes, the (s, .) embeddings' preprocessor
    widths and embedding size, and whether observations are normalised."""

    obs_dim: int
    action_dim: int
    z_dim: int
    preprocessor: tuple[int, ...]
    embed: int
    normalise: bool = False


class ForwardMap(nn.Module):
    """F(s, a, z) -> (heads, batch, d)."""

    def __init__(self, sizes: Sizes, hidden: tuple[int, ...], heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm = obs_norm(sizes.obs_dim, sizes.normalise)
        pre, e = sizes.preprocessor, sizes.embed
        self.sa = mlp(sizes.obs_dim + sizes.action_dim, pre, e, parallel=heads)
        self.sz = mlp(sizes.obs_dim + sizes.z_dim, pre, e, parallel=heads)
        self.head = mlp(2 * e, hidden, sizes.z_dim, parallel=heads)

    def forward(self, obs: torch.Tensor, action: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        obs = self.norm(obs)
        sa = torch.cat([obs, action], -1).expand(self.heads, -1, -1)
        sz = torch.cat([obs, z], -1).expand(self.heads, -1, -1)
        return self.head(torch.cat([self.sa(sa), self.sz(sz)], -1))  # type: ignore[no-any-return]


class BackwardMap(nn.Module):
    """B(s) on the sphere of radius sqrt(d)."""

    def __init__(
        self, obs_dim: int, z_dim: int, hidden: tuple[int, ...], normalise: bool = False
    ) -> None:
        super().__init__()
        self.norm = obs_norm(obs_dim, normalise)
        self.net = mlp(obs_dim, hidden, z_dim)
        self.radius = math.sqrt(z_dim)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return project(self.net(self.norm(obs)), self.radius)


class Actor(nn.Module):
    """pi(s, z): tanh(head([embed(s), embed(s, z)]))."""

    def __init__(self, sizes: Sizes, hidden: tuple[int, ...]) -> None:
        super().__init__()
        o, d, pre, e = sizes.obs_dim, sizes.z_dim, sizes.preprocessor, sizes.embed
        self.norm = obs_norm(o, sizes.normalise)
        self.s = mlp(o, pre, e)
        self.sz = mlp(o + d, pre, e)
        self.head = mlp(2 * e, hidden, sizes.action_dim)

    def embed_state(self, obs: torch.Tensor) -> torch.Tensor:
        """The z-independent part, computed once when z is optimised over fixed states."""
        return self.s(self.norm(obs))  # type: ignore[no-any-return]

    def from_embedding(
        self, s_embed: torch.Tensor, obs: torch.Tensor, z: torch.Tensor
    ) -> torch.Tensor:
        h = torch.cat([s_embed, self.sz(torch.cat([self.norm(obs), z], -1))], -1)
        return torch.tanh(self.head(h))

    def forward(self, obs: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return self.from_embedding(self.embed_state(obs), obs, z)


def project(z: torch.Tensor, radius: float) -> torch.Tensor:
    """Scales each row of z onto the sphere of the given radius."""
    return radius * F.normalize(z, dim=-1)
