"""Milliseconds per FB update: rbfm's trainer against a straightforward reference.

    python benchmarks/fb_update.py [--presets cpu paper] [--updates 10] [--device cuda] [--compile]

The reference below is the update as the public codebases write it, at the same
sizes: two separate F networks called in a Python loop, an off-diagonal mask
built every step, the orthonormality term on the N x N matrix, the actor step
back-propagating into F's weights, and non-fused Adam. rbfm's update batches the
two heads into one network, uses fused Adam, builds no mask, and skips gradients
nobody uses. Both run fp32 and bf16 autocast, side by side, on the same batches.
A last table checks whether bf16 changes results: losses after the same updates
from the same initial weights. On a GPU (`--device cuda`) only rbfm's update is
timed (the reference is written for the CPU), with the device synchronised.
`--compile` adds rows for rbfm's update with torch.compile'd networks (`rbfm pretrain
--compile`), their compilation excluded from the timing.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from rbfm.device import pick_device
from rbfm.fb import FBConfig, FBModel, FBTrainer, fb_config


def _mlp(inp: int, hidden: tuple[int, ...], out: int) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Linear(inp, hidden[0]), nn.LayerNorm(hidden[0]), nn.Tanh()]
    for a, b in itertools.pairwise(hidden):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(hidden[-1], out))


class RefForward(nn.Module):
    def __init__(self, o: int, a: int, c: FBConfig) -> None:
        super().__init__()
        self.sa = _mlp(o + a, c.preprocessor_hidden, c.embed_dim)
        self.sz = _mlp(o + c.z_dim, c.preprocessor_hidden, c.embed_dim)
        self.head = _mlp(2 * c.embed_dim, c.forward_hidden, c.z_dim)

    def forward(self, s: torch.Tensor, a: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        x = torch.cat([self.sa(torch.cat([s, a], -1)), self.sz(torch.cat([s, z], -1))], -1)
        return self.head(x)  # type: ignore[no-any-return]


class RefActor(nn.Module):
    def __init__(self, o: int, a: int, c: FBConfig) -> None:
        super().__init__()
        self.s = _mlp(o, c.preprocessor_hidden, c.embed_dim)
        self.sz = _mlp(o + c.z_dim, c.preprocessor_hidden, c.embed_dim)
        self.head = _mlp(2 * c.embed_dim, c.actor_hidden, a)

    def forward(self, s: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.head(torch.cat([self.s(s), self.sz(torch.cat([s, z], -1))], -1)))


class Reference:
    """A plain, single-file FB update (the straightforward way)."""

    def __init__(self, o: int, a: int, c: FBConfig) -> None:
        self.c = c
        self.F1, self.F2 = RefForward(o, a, c), RefForward(o, a, c)
        self.B = _mlp(o, c.backward_hidden, c.z_dim)
        self.actor = RefActor(o, a, c)
        self.tF1, self.tF2, self.tB = (copy.deepcopy(n) for n in (self.F1, self.F2, self.B))
        fb = [*self.F1.parameters(), *self.F2.parameters(), *self.B.parameters()]
        self.fb_opt = torch.optim.Adam(fb, lr=c.lr)
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=c.lr)

    def b(self, net: nn.Module, s: torch.Tensor) -> torch.Tensor:
        return self.c.z_dim**0.5 * F.normalize(net(s), dim=-1)

    def noisy(self, mu: torch.Tensor) -> torch.Tensor:
        noise = (torch.randn_like(mu) * 0.2).clamp(-0.3, 0.3)
        return (mu + noise).clamp(-1, 1)

    def update(
        self, s: torch.Tensor, a: torch.Tensor, s2: torch.Tensor, d: torch.Tensor, bf16: bool
    ) -> None:
        c, n = self.c, s.shape[0]
        with torch.autocast("cpu", torch.bfloat16, enabled=bf16):
            z = c.z_dim**0.5 * F.normalize(torch.randn(n, c.z_dim), dim=-1)
            with torch.no_grad():
                zb = self.b(self.B, s2[torch.randperm(n)])
            z = torch.where(torch.rand(n, 1) < 0.5, zb.float(), z)
            with torch.no_grad():
                a2 = self.noisy(self.actor(s2, z))
                tb = self.b(self.tB, s2).float()
                tms = [(f(s2, a2, z).float() @ tb.T) for f in (self.tF1, self.tF2)]
                target = torch.min(tms[0], tms[1])
            b = self.b(self.B, s2).float()
            ms = [f(s, a, z).float() @ b.T for f in (self.F1, self.F2)]
        mask = 1 - torch.eye(n)
        loss = torch.zeros(())
        for m in ms:
            diff = m - c.gamma * d[:, None] * target
            loss = loss + 0.5 * ((diff * mask) ** 2).sum() / mask.sum() - m.diag().mean()
        cov = b @ b.T
        loss = loss + ((cov * mask) ** 2).sum() / mask.sum() - 2 * cov.diag().mean()
        self.fb_opt.zero_grad()
        loss.backward()
        self.fb_opt.step()
        with torch.autocast("cpu", torch.bfloat16, enabled=bf16):
            pi = self.noisy(self.actor(s, z))
            q = torch.min(*[(f(s, pi, z).float() * z).sum(-1) for f in (self.F1, self.F2)])
        self.actor_opt.zero_grad()
        (-q.mean()).backward()
        self.actor_opt.step()
        with torch.no_grad():
            for net, tnet in ((self.F1, self.tF1), (self.F2, self.tF2), (self.B, self.tB)):
                for p, tp in zip(net.parameters(), tnet.parameters(), strict=True):
                    tp.mul_(1 - c.tau).add_(c.tau * p)


def _batch(n: int, seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    batch = {
        "observation": torch.randn(n, 17, generator=g),
        "action": torch.rand(n, 6, generator=g) * 2 - 1,
        "next_observation": torch.randn(n, 17, generator=g),
        "discount": torch.ones(n),
    }
    return {k: v.to(device) for k, v in batch.items()}


def _time(fn: Callable[[], object], updates: int, device: torch.device) -> float:
    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for _ in range(3):
        fn()
    sync()
    start = time.perf_counter()
    for _ in range(updates):
        fn()
    sync()
    return (time.perf_counter() - start) / updates * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=["cpu", "paper"])
    parser.add_argument("--updates", type=int, default=10)
    parser.add_argument("--device", default=None, help="default: CUDA when present, else CPU")
    parser.add_argument("--compile", action="store_true", help="also time compiled updates")
    args = parser.parse_args()
    device = pick_device(args.device)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(
        f"torch {torch.__version__}, {where}, {torch.get_num_threads()} threads; "
        "cheetah-sized inputs"
    )
    header = f"{'preset':<7} {'precision':<9} {'rbfm ms':>9}"
    print(header + (f" {'reference ms':>13} {'speed-up':>9}" if device.type == "cpu" else ""))
    runs = [(bf16, False) for bf16 in (False, True)]
    runs += [(bf16, True) for bf16 in (False, True)] if args.compile else []
    for preset in args.presets:
        for bf16, compiled in runs:
            cfg = replace(fb_config(preset), bf16=bf16)
            b = _batch(cfg.batch_size, 0, device)
            torch.manual_seed(0)
            if compiled:  # dynamo's per-function cache limit would otherwise fall back to eager
                torch._dynamo.reset()
            trainer = FBTrainer(FBModel(17, 6, cfg).to(device), seed=0, compile=compiled)
            ours = _time(partial(trainer.update, b), args.updates, device)
            precision = ("bf16" if bf16 else "fp32") + ("+c" if compiled else "")
            row = f"{preset:<7} {precision:<9} {ours:>9.1f}"
            if device.type == "cpu" and not compiled:
                ref = Reference(17, 6, cfg)
                r = (b["observation"], b["action"], b["next_observation"], b["discount"], bf16)
                theirs = _time(partial(ref.update, *r), args.updates, device)
                row += f" {theirs:>13.1f} {theirs / ours:>8.2f}x"
            print(row, flush=True)

    print("\nbf16 vs fp32, cpu preset, 300 updates from the same weights and batches:")
    for bf16 in (False, True):
        torch.manual_seed(0)
        cfg = replace(fb_config("cpu"), bf16=bf16)
        trainer = FBTrainer(FBModel(17, 6, cfg).to(device), seed=0)
        for i in range(300):
            out = trainer.update(_batch(cfg.batch_size, i, device))
        print(
            f"  {'bf16' if bf16 else 'fp32'}: "
            + ", ".join(f"{k} {float(v):.4f}" for k, v in out.items())
        )


if __name__ == "__main__":
    main()
