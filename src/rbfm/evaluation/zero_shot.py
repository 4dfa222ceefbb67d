"""Zero-shot evaluation of a model's reward-inferred policies, task by task, next to a
uniform random policy on the same initial states."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from rbfm import checks
from rbfm.atomic import atomic_csv
from rbfm.evaluation.aggregate import mean_ci, stratified_iqm
from rbfm.evaluation.fb_policy import fb_policy
from rbfm.evaluation.rollout import EnvSpec, RolloutEngine
from rbfm.fb.model import FBModel


@dataclass(frozen=True)
class ZeroShotRow:
    task: str
    mean: float  # over episodes, with its 95% Student-t CI half-width
    ci95: float
    episodes: int
    unstable: int  # episodes ended by a physics failure
    returns: np.ndarray = field(repr=False)
    random_mean: float | None = None  # the uniform random policy, same initial states
    random_ci95: float | None = None

    @property
    def above_random(self) -> bool | None:
        """Whether the CIs of the model and the random policy are disjoint, model above."""
        if self.random_mean is None or self.random_ci95 is None:
            return None
        return self.mean - self.ci95 > self.random_mean + self.random_ci95


def zero_shot(
    model: FBModel,
    domain: str,
    task_z: dict[str, torch.Tensor],
    episodes: int,
    seed: int,
    perturbation: str | None = None,
    level: float | None = None,
    random: bool = False,
    workers: int = 0,
) -> list[ZeroShotRow]:
    """Each task's pi_z on `episodes` episodes (initial states of `seed`), and with
    `random` a uniform random policy on the same states."""
    rng = np.random.default_rng(seed)

    def random_policy(obs: np.ndarray, ep: np.ndarray) -> np.ndarray:
        return rng.uniform(-1, 1, (len(obs), model.action_dim)).astype(np.float32)

    rows = []
    with RolloutEngine(workers) as engine:
        for task, z in task_z.items():
            spec = EnvSpec(domain, task, perturbation, level)
            res = engine.run(spec, fb_policy(model, z), episodes, seed=seed)
            m, h = mean_ci(res.returns)
            rm = rh = None
            if random:
                rm, rh = mean_ci(engine.run(spec, random_policy, episodes, seed).returns)
            unstable = int(res.unstable.sum())
            rows.append(ZeroShotRow(task, m, h, episodes, unstable, res.returns, rm, rh))
    return rows


def zero_shot_iqm(rows: list[ZeroShotRow]) -> tuple[float, float, float]:
    """IQM over every episode of every task, with rliable's stratified bootstrap 95% CI
    over episodes per task (pretraining's selection metric): (iqm, low, high)."""
    score = stratified_iqm({"zero-shot": np.stack([r.returns for r in rows], axis=1)})
    return score["zero-shot"]


def zero_shot_table(rows: list[ZeroShotRow]) -> str:
    """The rows as printed: each task's mean +- 95% CI (beside the random policy's, and
    whether the model is above it), and the IQM over every episode when several tasks."""
    random = rows[0].random_mean is not None
    lines = [
        f"{'task':<14} {'zero-shot':>16}"
        + (f" {'random':>16}  above random (disjoint CIs)" if random else "")
    ]
    for r in rows:
        line = f"{r.task:<14} {r.mean:>8.1f} +- {r.ci95:<5.1f}"
        if r.random_mean is not None:
            line += f" {r.random_mean:>8.1f} +- {r.random_ci95:<5.1f}  "
            line += "yes" if r.above_random else "no"
        lines.append(line + (f"  ({r.unstable} unstable)" if r.unstable else ""))
    if len(rows) > 1:
        score, low, high = zero_shot_iqm(rows)
        lines.append(
            f"IQM over the {sum(r.episodes for r in rows)} episodes: {score:.1f} (95% CI "
            f"{low:.1f} to {high:.1f}, rliable's stratified bootstrap over episodes per task)"
        )
    return "\n".join(lines)


def zero_shot_csv(path: str | os.PathLike[str], rows: list[ZeroShotRow]) -> None:
    """The rows as a CSV table, written atomically."""
    table = []
    for r in rows:
        row: dict[str, object] = {"task": r.task, "mean": r.mean, "ci95": r.ci95}
        if r.random_mean is not None:
            row |= {
                "random_mean": r.random_mean,
                "random_ci95": r.random_ci95,
                "above_random": r.above_random,
            }
        table.append(row | {"episodes": r.episodes, "unstable": r.unstable})
    atomic_csv(Path(path), table)


def zero_shot_report(
    checkpoint: str,
    tasks: list[str] | None = None,
    episodes: int = 10,
    seed: int = 0,
    perturbation: str | None = None,
    level: float | None = None,
    random: bool = False,
    workers: int = 0,
    dataset: str | None = None,
    device: str | None = None,
    out: str | None = None,
) -> str:
    """`rbfm zero-shot`: a model's reward-inferred policies (every task by default) on
    `episodes` episodes each, as a table (and a CSV at `out`)."""
    from rbfm.checks import in_range
    from rbfm.envs import TASKS, check_pair, checked_tasks, get_perturbation
    from rbfm.fb.checkpoint import load_checkpoint
    from rbfm.fb.reward_inference import task_vectors

    in_range("zero-shot", "episodes", episodes, 1, integer=True)
    checks.seed("zero-shot", seed)
    in_range("zero-shot", "workers", workers, 0, integer=True)
    model, meta = load_checkpoint(checkpoint, device=device)
    domain = meta["domain"]
    tasks = checked_tasks(domain, tasks or list(TASKS[domain]))
    if perturbation is not None and level is None:  # the family's nominal value, its sweep's first
        level = get_perturbation(domain, perturbation).levels[0]
    check_pair(domain, perturbation, level)
    task_z, source = task_vectors(model, meta, tasks, checkpoint, dataset, seed, progress=True)
    dynamics = "nominal" if perturbation is None else f"{perturbation}={level:g}"
    head = (
        f"{domain} model at step {meta.get('step')}, {dynamics}, {episodes} episodes, "
        f"mean return +- 95% CI over episodes; task vectors {source}"
    )
    rows = zero_shot(model, domain, task_z, episodes, seed, perturbation, level, random, workers)
    if out:
        zero_shot_csv(out, rows)
    return "\n".join([head, zero_shot_table(rows), *([f"wrote {out}"] if out else [])])
