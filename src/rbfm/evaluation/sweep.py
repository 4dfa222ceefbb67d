"""Perturbation sweeps: mean return and 95% CI per method and level.

FB task vectors (from `rbfm infer`) and stand-alone policies (the baselines) run in
the same lockstep batch; all task vectors share one batched actor call per step.
"""

from __future__ import annotations

import csv
import math
import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rbfm.atomic import atomic_csv
from rbfm.errors import ConfigError
from rbfm.evaluation.aggregate import mean_ci
from rbfm.evaluation.fb_policy import fb_policy
from rbfm.evaluation.rollout import EnvSpec, Policy, RolloutEngine, begin, executed
from rbfm.fb.model import FBModel


@dataclass(frozen=True)
class SweepRow:
    method: str
    level: float | None
    mean: float
    ci95: float
    seeds: int
    episodes: int
    unstable: int


class Dispatch:
    """One policy over a batch whose rows [start, stop) belong to each group's policy."""

    def __init__(self, groups: list[tuple[int, int, Policy]]) -> None:
        self.groups = groups

    def begin(self, n: int) -> None:
        for start, stop, pol in self.groups:
            begin(pol, stop - start)

    def __call__(self, obs: np.ndarray, episodes: np.ndarray) -> np.ndarray:
        out: np.ndarray | None = None
        for start, stop, pol in self.groups:
            mine = (episodes >= start) & (episodes < stop)
            if mine.any():
                a = pol(obs[mine], episodes[mine] - start)
                if out is None:
                    out = np.zeros((len(obs), a.shape[-1]), np.float32)
                out[mine] = a
        assert out is not None
        return out

    def executed(self, obs: np.ndarray, episodes: np.ndarray, actions: np.ndarray) -> None:
        for start, stop, pol in self.groups:
            mine = (episodes >= start) & (episodes < stop)
            if mine.any():
                executed(pol, obs[mine], episodes[mine] - start, actions[mine])


def dispatch(groups: list[tuple[int, int, Policy]]) -> Policy:
    """`Dispatch` over the groups."""
    return Dispatch(groups)


def sweep(
    model: FBModel | None,
    zs: list[tuple[str, torch.Tensor]],
    domain: str,
    task: str,
    perturbation: str | None,
    levels: list[float | None],
    episodes: int,
    seed: int = 0,
    engine: RolloutEngine | None = None,
    policies: list[tuple[str, Policy]] | None = None,
    progress: bool = False,
) -> list[SweepRow]:
    """Every (method, z) of the FB model and every (method, policy) at every level.

    Several entries of one method (inference seeds) are aggregated as the paper does:
    the mean of per-seed mean returns with a 95% CI across seeds (across episodes when
    there is a single seed). Episode k of every entry starts from the same state.
    """
    entries = [m for m, _ in zs] + [m for m, _ in (policies or [])]
    groups: list[tuple[int, int, Policy]] = []
    if zs:
        if model is None:
            raise ValueError("task vectors need the FB model they were inferred for")
        z_all = torch.stack([z for _, z in zs]).repeat_interleave(episodes, 0)
        groups.append((0, len(zs) * episodes, fb_policy(model, z_all)))
    for i, (_, pol) in enumerate(policies or [], start=len(zs)):
        groups.append((i * episodes, (i + 1) * episodes, pol))
    own = engine is None
    engine = engine or RolloutEngine(0)
    rows: list[SweepRow] = []
    try:
        for level in levels:
            # Paired comparison: every entry's episode k starts from seed (seed, k).
            specs = [EnvSpec(domain, task, perturbation, level)] * (len(entries) * episodes)
            seeds = [(seed, k) for _ in entries for k in range(episodes)]
            label = f"{perturbation}={level:g}" if level is not None else "nominal"
            res = engine.run(
                specs, dispatch(groups), seeds=seeds, progress=label if progress else None
            )
            by_method: dict[str, list[np.ndarray]] = defaultdict(list)
            unstable: dict[str, int] = defaultdict(int)
            for i, method in enumerate(entries):
                part = slice(i * episodes, (i + 1) * episodes)
                by_method[method].append(res.returns[part])
                unstable[method] += int(res.unstable[part].sum())
            for method, runs in by_method.items():
                per_seed = np.array([r.mean() for r in runs])
                m, h = mean_ci(per_seed if len(runs) > 1 else runs[0])
                rows.append(SweepRow(method, level, m, h, len(runs), episodes, unstable[method]))
    finally:
        if own:
            engine.close()
    return rows


def write_csv(path: str | os.PathLike[str], rows: list[SweepRow], extra: dict[str, Any]) -> None:
    """The sweep's table, whole or not at all (`atomic_csv`); `extra`'s columns lead."""
    columns = [*extra, "method", "level", "mean", "ci95", "seeds", "episodes", "unstable"]
    table = [
        {
            **extra,
            "method": r.method,
            "level": r.level,
            "mean": f"{r.mean:.3f}",
            "ci95": f"{r.ci95:.3f}",
            "seeds": r.seeds,
            "episodes": r.episodes,
            "unstable": r.unstable,
        }
        for r in rows
    ]
    atomic_csv(Path(path), table, columns)


def read_csv(path: str | os.PathLike[str]) -> tuple[list[SweepRow], dict[str, str]]:
    """The rows of a table written by `write_csv`, and its leading descriptive columns."""
    try:
        with open(path, newline="") as f:
            records = list(csv.DictReader(f))
        rows = [
            SweepRow(
                r["method"],
                float(r["level"]) if r["level"] else None,
                float(r["mean"]),
                float(r["ci95"]),
                int(r["seeds"]),
                int(r["episodes"]),
                int(r["unstable"]),
            )
            for r in records
        ]
    except (OSError, KeyError, ValueError) as e:
        raise ConfigError(f"{path}: not a table written by `rbfm evaluate` ({e!r})") from e
    if not rows:
        raise ConfigError(f"{path}: the table is empty")
    for i, r in enumerate(rows, 2):  # line 1 is the header
        numbers = [r.mean, r.ci95, 0.0 if r.level is None else r.level]
        if not all(map(math.isfinite, numbers)) or r.ci95 < 0:
            raise ConfigError(f"{path}: line {i}'s level, mean or ci95 is not a finite number")
        if r.seeds < 1 or r.episodes < 1 or r.unstable < 0:
            raise ConfigError(f"{path}: line {i}'s seeds, episodes or unstable is out of range")
    fields = {f.name for f in SweepRow.__dataclass_fields__.values()}
    return rows, {k: v for k, v in records[0].items() if k not in fields}


def sweep_table(rows: list[SweepRow]) -> str:
    """The rows as printed: method, level, mean return +- 95% CI, seeds, unstable episodes."""
    lines = [f"{'method':<12} {'level':>8} {'return':>18} {'seeds':>6} {'unstable':>9}"]
    for r in rows:
        level = "-" if r.level is None else f"{r.level:g}"
        lines.append(
            f"{r.method:<12} {level:>8} {r.mean:>9.1f} +- {r.ci95:<6.1f} {r.seeds:>6} "
            f"{r.unstable:>9}"
        )
    return "\n".join(lines)
