"""`rbfm quickstart`: the whole pipeline on cheetah at a small scale, in minutes.

collect -> pretrain (skipped when a reference checkpoint is shipped or given) ->
expert demonstrations -> FB-IL, RBFM-Light, RBFM-Heavy -> a perturbation sweep ->
a table (printed, CSV), a plot (PNG) and a one-line reading of the table.

The expert is the model's own task policy with Gaussian action noise (std 0.3): a
model reproduces its own deterministic policy exactly, and then every method's
objective is minimised by that policy's z and converged methods all return it (no
robustness can show). Real users' demonstrations are never the model's own.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rbfm import EVAL_SEED
from rbfm.checks import in_range
from rbfm.errors import ConfigError
from rbfm.evaluation.sweep import SweepRow, sweep, write_csv
from rbfm.fb.checkpoint import load_checkpoint, shipped_model
from rbfm.fb.model import FBModel
from rbfm.methods import FB_METHODS, display_name
from rbfm.reporting.plots import plot_sweep
from rbfm.threads import torch_threads


@dataclass(frozen=True)
class QuickstartConfig:
    out: str = "runs/quickstart"
    checkpoint: str | None = None  # default: the shipped cheetah:rnd-v1, else train one
    task: str = "walk"
    perturbation: str = "joint_friction"
    demos: int = 10  # generated; each inference seed takes `num_demos` of its own
    num_demos: int = 1  # one demonstration per seed keeps the quickstart to minutes
    seeds: int = 3
    action_noise: float = 0.3
    settings: str = "default"  # inference settings (rbfm.inference.SETTINGS)
    inference_steps: int | None = None  # the step cap (None: the settings' own)
    episodes: int = 5  # per task vector and level
    collect_transitions: int = 50_000
    pretrain_steps: int = 8_000

    def __post_init__(self) -> None:
        for name in ("demos", "num_demos", "seeds", "episodes"):
            in_range("quickstart", name, getattr(self, name), 1, integer=True)
        # The table's CI is across seeds: it means something only where each seed imitates
        # demonstrations of its own (disjoint draws), so they must be enough for all seeds.
        if self.seeds * self.num_demos > self.demos:
            raise ConfigError(
                f"quickstart: {self.seeds} seeds x {self.num_demos} demonstrations need "
                f"{self.seeds * self.num_demos} distinct episodes, more than demos={self.demos}"
            )


def _log(start: float, message: str) -> None:
    print(f"[{time.perf_counter() - start:6.0f} s] {message}", flush=True)


def _cheetah_model(path: Path, task: str) -> tuple[FBModel, dict[str, Any], torch.Tensor]:
    """The quickstart's model and its expert's z: a cheetah model that stores the task's."""
    model, meta = load_checkpoint(path, domain="cheetah")
    task_z = meta.get("task_z", {})
    if task not in task_z:
        raise ConfigError(
            f"{path} stores no reward-inferred z for {task!r} (it has: "
            f"{', '.join(task_z) or 'none'}); the quickstart's expert acts by it"
        )
    return model, meta, torch.tensor(task_z[task])


def _model_path(cfg: QuickstartConfig, start: float, progress: bool) -> Path:
    from rbfm.exploration import CollectConfig, collect
    from rbfm.training.pretrain import PretrainConfig, pretrain

    if cfg.checkpoint:
        return Path(cfg.checkpoint)
    # The `cpu`-sized cheetah shipped with rbfm (`--checkpoint cheetah:rnd-v1`,
    # docs/models.md): the default cheetah has the paper's sizes, ~24x the arithmetic per
    # step (actor 5.3M parameters against 0.22M), which would take the quickstart from
    # about a minute to many on two cores.
    # Without it the quickstart trains its own, smaller one.
    shipped = shipped_model("cheetah", "rnd-v1")
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
    """Run the quickstart on one torch thread. Its tensors are small, so more threads
    only spin: on a 2-core machine whose other core was busy, torch's default of 2
    threads took 10m54s against 54 s on one. One thread also makes the table the same
    on every machine, whatever its core count (summation order follows the threads)."""
    with torch_threads(1):
        return _quickstart(cfg, progress)


def _quickstart(cfg: QuickstartConfig, progress: bool) -> list[SweepRow]:
    from rbfm.envs import get_perturbation
    from rbfm.inference import generate_demos, infer

    start = time.perf_counter()
    out = Path(cfg.out)
    if cfg.checkpoint:  # a given model is checked before the output folder is made
        path = Path(cfg.checkpoint)
        model, meta, z_expert = _cheetah_model(path, cfg.task)
        out.mkdir(parents=True, exist_ok=True)
    else:
        out.mkdir(parents=True, exist_ok=True)
        path = _model_path(cfg, start, progress)
        model, meta, z_expert = _cheetah_model(path, cfg.task)
    _log(
        start,
        f"generating {cfg.demos} expert demonstrations of cheetah/{cfg.task} "
        f"(the model's policy with action noise {cfg.action_noise})",
    )
    demos = generate_demos(
        model,
        "cheetah",
        cfg.task,
        z_expert,
        cfg.demos,
        0,
        progress=progress,
        action_noise=cfg.action_noise,
    )
    _log(start, f"expert return {demos.returns.mean():.1f}")
    zs = []
    # Seed i imitates its own episodes: the i-th slice of one shuffle, no seed shares one.
    order = np.random.default_rng(0).permutation(cfg.demos)
    for method in FB_METHODS:
        for seed in range(cfg.seeds):
            draw = demos.episodes(order[seed * cfg.num_demos : (seed + 1) * cfg.num_demos])
            cap = {} if cfg.inference_steps is None else {"steps": cfg.inference_steps}
            res = infer(model, draw, method, seed, progress, settings=cfg.settings, **cap)
            zs.append((method, res.z))
            state = "converged" if res.converged else f"NOT converged ({res.cap})"
            _log(
                start,
                f"{method} seed {seed}: {res.steps} steps in {res.seconds:.1f} s, {state}, "
                f"objective {res.objective:.3f}, ||z - z_expert|| "
                f"{float((res.z.cpu() - z_expert).norm()):.2f}",
            )
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
        seed=EVAL_SEED,  # not the demonstrations' initial states (seed 0)
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


def reading(rows: list[SweepRow]) -> str:
    """One line on what the table shows at the largest perturbation level: the best
    method, and whether its 95% CI is clear of every other method's."""
    top = max(r.level for r in rows if r.level is not None)
    last = sorted((r for r in rows if r.level == top), key=lambda r: -r.mean)
    best, rest = last[0], last[1:]
    clear = all(best.mean - best.ci95 > r.mean + r.ci95 for r in rest)
    others = ", ".join(f"{display_name(r.method)} {r.mean:.0f}" for r in rest)
    verdict = (
        "its CI is clear of the others'"
        if clear
        else "the CIs overlap, so these seeds cannot order the methods"
    )
    return (
        f"At the largest level ({top:g}) {display_name(best.method)} scores {best.mean:.0f} "
        f"({others}): {verdict}."
    )


def table(cfg: QuickstartConfig, rows: list[SweepRow]) -> str:
    """The sweep as printed: a column per method, a row per level, and the reading."""
    levels = list(dict.fromkeys(r.level for r in rows))
    methods = list(dict.fromkeys(r.method for r in rows))
    lines = [
        f"cheetah/{cfg.task} under {cfg.perturbation}: mean return +- 95% CI across "
        f"{cfg.seeds} inference seeds, each on {cfg.num_demos} demonstration(s) of its own",
        f"{'level':>8} " + " ".join(f"{display_name(m):>18}" for m in methods),
    ]
    for level in levels:
        cells = {r.method: f"{r.mean:7.1f} +- {r.ci95:<6.1f}" for r in rows if r.level == level}
        lines.append(f"{level:>8g} " + " ".join(f"{cells[m]:>18}" for m in methods))
    return "\n".join([*lines, reading(rows)])
