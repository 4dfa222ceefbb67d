"""Perturbation sweeps of inferred task vectors: mean return and 95% CI per method and level."""

from __future__ import annotations

import csv
import json
import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rbfm.errors import ConfigError
from rbfm.evaluation.rollout import EnvSpec, RolloutEngine
from rbfm.evaluation.stats import mean_ci
from rbfm.fb.model import FBModel
from rbfm.fb.zero_shot import policy


def save_z(path: str | os.PathLike[str], z: torch.Tensor, meta: dict[str, Any]) -> Path:
    path = Path(path)
    tmp = path.with_name(f".{path.name}.part")
    tmp.write_text(json.dumps({"z": z.detach().cpu().tolist(), **meta}, indent=2))
    os.replace(tmp, path)
    return path


def load_z(path: str | os.PathLike[str]) -> tuple[torch.Tensor, dict[str, Any]]:
    try:
        data = json.loads(Path(path).read_text())
        return torch.tensor(data.pop("z"), dtype=torch.float32), data
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as e:
        raise ConfigError(f"{path}: not a task-vector file written by `rbfm infer` ({e})") from e


@dataclass(frozen=True)
class SweepRow:
    method: str
    level: float | None
    mean: float
    ci95: float
    seeds: int
    episodes: int
    unstable: int


def sweep(
    model: FBModel,
    zs: list[tuple[str, torch.Tensor]],
    domain: str,
    task: str,
    perturbation: str | None,
    levels: list[float | None],
    episodes: int,
    seed: int = 0,
    engine: RolloutEngine | None = None,
) -> list[SweepRow]:
    """Every (method, z) at every level, all z of a level in one lockstep batch.

    Several z of one method (inference seeds) are aggregated as the paper does: the
    mean of per-seed mean returns with a 95% CI across seeds (across episodes when
    there is a single seed).
    """
    own = engine is None
    engine = engine or RolloutEngine(0)
    rows: list[SweepRow] = []
    try:
        z_all = torch.stack([z for _, z in zs]).repeat_interleave(episodes, 0)
        for level in levels:
            spec = EnvSpec(domain, task, perturbation, level)
            res = engine.run([spec] * (len(zs) * episodes), policy(model, z_all), seed=seed)
            by_method: dict[str, list[np.ndarray]] = defaultdict(list)
            unstable: dict[str, int] = defaultdict(int)
            for i, (method, _) in enumerate(zs):
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
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(
            [*extra, "method", "level", "mean", "ci95", "seeds", "episodes", "unstable"]
        )
        for r in rows:
            writer.writerow(
                [
                    *extra.values(),
                    r.method,
                    r.level,
                    f"{r.mean:.3f}",
                    f"{r.ci95:.3f}",
                    r.seeds,
                    r.episodes,
                    r.unstable,
                ]
            )
