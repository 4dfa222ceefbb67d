"""Zero-shot evaluation of a model's reward-inferred policies, task by task, next to a
uniform random policy on the same initial states."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from rbfm.evaluation.fb_policy import fb_policy
from rbfm.evaluation.rollout import EnvSpec, RolloutEngine
from rbfm.evaluation.stats import mean_ci, stratified_iqm
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
