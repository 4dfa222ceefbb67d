"""Do the model's reward-free signals prefer its limit (the stored z) to ER-FB's z?

    python benchmarks/reward_free_signals.py --tasks cheetah:run cheetah:walk walker:walk

Imitation reaches what the model returns given the task's reward (its stored z) only if
some signal without the reward tells the two apart. On each task's planner
demonstrations (`benchmarks/external_files.py`) this measures two such signals for the
stored z and for ER-FB's z of 5 seeds (4 episodes each, as `external_nominal.py` draws):

- **the B-distance** `rbfm.adapt` chooses by: || mean over episodes of mean_t B(s_t) of
  pi_z's episodes - the seed's demonstrations' mean B ||, from 20 episodes on the
  evaluation initial states (their returns beside it), and on how many seeds the stored
  z's episodes are closer to that seed's demonstrations than ER-FB's own; with the
  cosine of ER-FB's z to the stored z, and of the direction `rbfm.adapt` steps along
  from ER-FB's z (the demonstrations' mean B minus its episodes') to the stored z minus
  ER-FB's z (means over the seeds);
- **the planner's actions under the model's Q**, Q(s, a) = F(s, a, z)^T z (heads
  averaged): on 512 demonstrated states (seed 0), the share of 16 uniform actions in
  [-1, 1]^A that the planner's action beats, under the stored z and under seed 0's
  ER-FB z. Near 50% under the stored z, a likelihood of the planner's actions under the
  model's Q (inverse RL in the model's reward family) cannot identify the task;
- **other distances between the same episodes and the demonstrations** (`CRITERIA`), as
  candidates for the adaptation's criterion: the same count of seeds where the stored z's
  episodes are closer, for the observations' means standardised by the demonstrations'
  spread, and the maximum mean discrepancy (Gaussian kernel, the median heuristic's
  width) between the states themselves, in the observations' standardised space and in
  B's.

Rows are appended to runs/reward_free_signals/rows.csv (columns: `HEADER`) and
criteria.csv (`CRITERIA_HEADER`, a row per criterion), and printed; a (task, model)
already in a table is not written to it again.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

from rbfm import EVAL_SEED
from rbfm.evaluation import EnvSpec, RolloutEngine, fb_policy
from rbfm.fb.checkpoint import load_checkpoint, resolve
from rbfm.fb.context import demo_inputs
from rbfm.fb.model import FBModel
from rbfm.fb.networks import project
from rbfm.inference import Demos, load_demos
from rbfm.inference.adapt import demo_states
from rbfm.inference.expert_demos import demo_embedding, warm_start

sys.path.insert(0, str(Path(__file__).parent))
from external_files import appending, demonstrated, read_rows, start

ROWS = Path("runs/reward_free_signals/rows.csv")
CRITERIA_ROWS = ROWS.with_name("criteria.csv")
CRITERIA_HEADER = ["domain", "task", "model", "criterion", "stored_distance", "er_distance",
                   "stored_closer", "seeds"]  # fmt: skip
CRITERIA = ["b_mean", "obs_mean", "obs_mmd", "b_mmd"]
# States per side of a discrepancy: 2,000 x 2,000 kernels, a fraction of a second each.
SUBSAMPLE = 2000
HEADER = ["domain", "task", "model", "stored_return", "er_return", "stored_distance",
          "er_distance", "stored_closer", "seeds", "er_stored_cosine",
          "direction_cosine", "stored_beats_uniform", "er_beats_uniform"]  # fmt: skip
SEEDS, EPISODES, STATES, UNIFORM = 5, 20, 512, 16


@torch.no_grad()
def beats_uniform(model: FBModel, demos: Demos, z: torch.Tensor) -> float:
    """% of (state, uniform action) pairs where the planner's action has the higher Q."""
    t = demo_inputs(demos, model.cfg.context)
    gen = torch.Generator().manual_seed(0)
    idx = torch.randint(len(t["action"]), (STATES,), generator=gen)
    obs, act = torch.as_tensor(t["observation"])[idx], torch.as_tensor(t["action"])[idx]
    zb = project(z, model.radius).expand(STATES, -1)

    def q(a: torch.Tensor) -> torch.Tensor:
        return (model.forward_map(obs, a, zb).mean(0) * zb).sum(-1)

    planner = q(act)
    wins = [(planner > q(2 * torch.rand(act.shape, generator=gen) - 1)).float().mean()
            for _ in range(UNIFORM)]  # fmt: skip
    return 100 * float(torch.stack(wins).mean())


@torch.no_grad()
def episodes_mean_b(model: FBModel, trajectories: list[dict[str, np.ndarray]]) -> torch.Tensor:
    """Mean over episodes of mean_t B(s_t), t >= 1 (the adaptation criterion's term)."""
    per = [model.backward_map(torch.as_tensor(t["observation"][1:])).mean(0) for t in trajectories]
    return torch.stack(per).mean(0)


def _rows(x: torch.Tensor, seed: int) -> torch.Tensor:
    """At most SUBSAMPLE rows of x, drawn without replacement (seeded)."""
    if len(x) <= SUBSAMPLE:
        return x
    return x[torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))[:SUBSAMPLE]]


def mmd(x: torch.Tensor, y: torch.Tensor, width: float) -> float:
    """The maximum mean discrepancy between two samples under exp(-|u - v|^2 / (2 w^2)),
    the biased (V-statistic) estimate, which is >= 0."""

    def k(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.exp(-torch.cdist(a, b).square() / (2 * width**2)).mean()

    return float((k(x, x) + k(y, y) - 2 * k(x, y)).clamp_min(0).sqrt())


class Distances:
    """The CRITERIA between a set of episodes' states and one seed's demonstrations.
    Observations are standardised as criterion "states" does (`demo_states`: the
    demonstrations' per-dimension spread, floored at a tenth of its mean); each kernel's
    width is the median distance between demonstrated states."""

    def __init__(self, model: FBModel, demos: Demos) -> None:
        self.model = model
        obs = torch.as_tensor(np.concatenate(list(demos.next_states())), dtype=torch.float32)
        self.mean, self.std = demo_states(demos)  # criterion "states"'s own statistics
        self.obs, self.b = _rows(self._standard(obs), 0), _rows(self._b(obs), 0)
        self.width = {"obs": _median_distance(self.obs), "b": _median_distance(self.b)}
        self.target = demo_embedding(model, demos)

    def _standard(self, obs: torch.Tensor) -> torch.Tensor:
        return (obs - self.mean) / self.std

    @torch.no_grad()
    def _b(self, obs: torch.Tensor) -> torch.Tensor:
        return self.model.backward_map(obs)

    def __call__(self, trajectories: list[dict[str, np.ndarray]]) -> dict[str, float]:
        obs = torch.as_tensor(
            np.concatenate([t["observation"][1:] for t in trajectories]), dtype=torch.float32
        )
        return {
            "b_mean": float((episodes_mean_b(self.model, trajectories) - self.target).norm()),
            "obs_mean": float(self._standard(obs).mean(0).norm()),
            "obs_mmd": mmd(_rows(self._standard(obs), 1), self.obs, self.width["obs"]),
            "b_mmd": mmd(_rows(self._b(obs), 1), self.b, self.width["b"]),
        }


def _median_distance(x: torch.Tensor) -> float:
    return float(torch.cdist(x, x).median())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", nargs="+", default=["cheetah:run"])
    args = p.parse_args()
    start(p, args)
    done = {(r["domain"], r["task"], r["model"]) for r in read_rows(ROWS)}
    # Judged: every criterion's row written (a run stopped between rows judges again).
    written = [
        (r["domain"], r["task"], r["model"], r["criterion"]) for r in read_rows(CRITERIA_ROWS)
    ]
    judged = {k[:3] for k in written if all((*k[:3], c) in written for c in CRITERIA)}
    with (
        appending(ROWS, HEADER) as add,
        appending(CRITERIA_ROWS, CRITERIA_HEADER) as add_criterion,
        RolloutEngine(0) as engine,
    ):
        for domain, task, path in demonstrated(args.tasks):
            key = (domain, task, resolve(domain).name)
            if key in done and key in judged:
                continue
            model, meta = load_checkpoint(domain, domain)
            demos = load_demos(path)
            picked = [demos.sample(4, seed) for seed in range(SEEDS)]
            stored = project(torch.tensor(meta["task_z"][task]), model.radius)
            zs = torch.stack([stored, *(warm_start(model, d) for d in picked)])
            # One batch: each z's EPISODES episodes from the same evaluation initial states.
            res = engine.run(
                [EnvSpec(domain, task)] * (len(zs) * EPISODES),
                fb_policy(model, zs.repeat_interleave(EPISODES, 0)),
                seeds=[(EVAL_SEED, k) for _ in zs for k in range(EPISODES)],
                record=True,
            )
            assert res.trajectories is not None
            returns = res.returns.reshape(len(zs), EPISODES).mean(1)
            per_z = [res.trajectories[i * EPISODES : (i + 1) * EPISODES] for i in range(len(zs))]
            if key not in judged:
                judge = [Distances(model, d) for d in picked]
                for row in criteria_rows(key, judge, per_z):
                    add_criterion(row)
                    print(dict(zip(CRITERIA_HEADER, row, strict=True)), flush=True)
            if key in done:
                continue
            mu = [episodes_mean_b(model, t) for t in per_z]
            targets = [demo_embedding(model, d) for d in picked]
            d_stored = [float((mu[0] - t).norm()) for t in targets]
            d_er = [float((mu[1 + s] - t).norm()) for s, t in enumerate(targets)]
            closer = sum(a < b for a, b in zip(d_stored, d_er, strict=True))
            cos = torch.nn.functional.cosine_similarity
            to_stored = [float(cos(zs[1 + s], stored, 0)) for s in range(SEEDS)]
            along = [float(cos(t - mu[1 + s], stored - zs[1 + s], 0))
                     for s, t in enumerate(targets)]  # fmt: skip
            row = [*key,
                   f"{returns[0]:.1f}", f"{returns[1:].mean():.1f}", f"{np.mean(d_stored):.3f}",
                   f"{np.mean(d_er):.3f}", closer, SEEDS,
                   f"{np.mean(to_stored):.2f}", f"{np.mean(along):.2f}",
                   f"{beats_uniform(model, demos, stored):.1f}",
                   f"{beats_uniform(model, demos, zs[1]):.1f}"]  # fmt: skip
            add(row)
            print(dict(zip(HEADER, row, strict=True)), flush=True)


def criteria_rows(
    key: tuple[str, str, str],
    judge: list[Distances],
    per_z: list[list[dict[str, np.ndarray]]],
) -> list[list[object]]:
    """A row per criterion: its mean distance of the stored z's episodes (per_z[0]) and of
    each seed's ER-FB z's (per_z[1 + seed]) to that seed's demonstrations."""
    stored = [j(per_z[0]) for j in judge]
    er = [j(per_z[1 + s]) for s, j in enumerate(judge)]
    rows: list[list[object]] = []
    for c in CRITERIA:
        a, b = [d[c] for d in stored], [d[c] for d in er]
        closer = sum(x < y for x, y in zip(a, b, strict=True))
        rows.append([*key, c, f"{np.mean(a):.4f}", f"{np.mean(b):.4f}", closer, len(judge)])
    return rows


if __name__ == "__main__":
    main()
