"""`rbfm quickstart`: the whole pipeline on cheetah at a small scale, in minutes.

collect -> pretrain (skipped when a reference checkpoint is shipped or given) ->
expert demonstrations -> FB-IL, RBFM-Light, RBFM-Heavy -> a perturbation sweep ->
a table (printed, CSV) and a plot (PNG).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from rbfm.evaluation.plots import plot_sweep
from rbfm.evaluation.sweep import SweepRow, sweep, write_csv
from rbfm.fb.checkpoint import load_checkpoint, read_meta, shipped_model


@dataclass(frozen=True)
class QuickstartConfig:
    out: str = "runs/quickstart"
    checkpoint: str | None = None  # default: the shipped cheetah model, else train one
    task: str = "walk"
    perturbation: str = "joint_friction"
    demos: int = 10  # generated; 4 are drawn per inference seed
    seeds: int = 3
    inference_steps: int = 1000
    episodes: int = 5  # per task vector and level
    collect_transitions: int = 50_000
    pretrain_steps: int = 8_000


def _log(start: float, message: str) -> None:
    print(f"[{time.perf_counter() - start:6.0f} s] {message}", flush=True)


def _model_path(cfg: QuickstartConfig, start: float, progress: bool) -> Path:
    from rbfm.exploration import CollectConfig, collect
    from rbfm.fb.pretrain import PretrainConfig, pretrain

    if cfg.checkpoint:
        return Path(cfg.checkpoint)
    # The cheetah model shipped with rbfm, found by domain name as `--checkpoint cheetah`
    # finds it (docs/models.md); without one the quickstart trains its own, smaller one.
    shipped = shipped_model("cheetah")
    if shipped is not None:
        _log(start, f"using the shipped model {shipped.name}")
        return shipped
    out = Path(cfg.out)
    _log(start, f"no reference model: collecting {cfg.collect_transitions:,} RND transitions")
    collect(CollectConfig("cheetah", "rnd", cfg.collect_transitions, str(out / "data")), progress)
    _log(start, f"pretraining an FB model for {cfg.pretrain_steps:,} updates (cpu preset)")
    run = pretrain(
        PretrainConfig(
            dataset=str(out / "data"),
            out=str(out / "fb"),
            steps=cfg.pretrain_steps,
            eval_every=cfg.pretrain_steps,
        ),
        progress,
    )
    return run / "best"


def quickstart(cfg: QuickstartConfig, progress: bool = True) -> list[SweepRow]:
    from rbfm.envs import get_perturbation
    from rbfm.inference import METHODS, generate_demos, infer

    start = time.perf_counter()
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    path = _model_path(cfg, start, progress)
    model, meta = load_checkpoint(path)
    task_z = read_meta(path).get("task_z", {})
    if cfg.task not in task_z:
        raise ValueError(f"{path} holds no reward-inferred z for {cfg.task!r}")
    z_expert = torch.tensor(task_z[cfg.task])
    _log(start, f"generating {cfg.demos} expert demonstrations of cheetah/{cfg.task}")
    demos = generate_demos(model, "cheetah", cfg.task, z_expert, cfg.demos, 0, progress=progress)
    _log(start, f"expert return {demos.returns.mean():.1f}")
    zs = []
    for method in METHODS:
        for seed in range(cfg.seeds):
            res = infer(
                model, demos.sample(4, seed), method, seed, progress, steps=cfg.inference_steps
            )
            zs.append((method, res.z))
            _log(start, f"{method} seed {seed}: {res.steps} steps in {res.seconds:.1f} s")
    pert = get_perturbation("cheetah", cfg.perturbation)
    _log(start, f"evaluating under {cfg.perturbation} at {', '.join(map(str, pert.levels))}")
    rows = sweep(
        model,
        zs,
        "cheetah",
        cfg.task,
        cfg.perturbation,
        list(pert.levels),
        cfg.episodes,
        progress=progress,
    )
    write_csv(out / "sweep.csv", rows, {"task": cfg.task, "perturbation": cfg.perturbation})
    png = plot_sweep(
        rows,
        f"cheetah {cfg.task}: {cfg.seeds} seeds x {cfg.episodes} episodes",
        f"{cfg.perturbation} ({pert.unit})",
        out / "sweep.png",
    )
    (out / "summary.json").write_text(
        json.dumps(
            {
                "checkpoint": str(path),
                "step": meta.get("step"),
                "seconds": time.perf_counter() - start,
                "expert_return": float(demos.returns.mean()),
            },
            indent=2,
        )
    )
    _log(start, f"wrote {out / 'sweep.csv'} and {png}")
    return rows
