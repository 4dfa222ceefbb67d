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
  model's Q (inverse RL in the model's reward family) cannot identify the task.

Rows are appended to runs/reward_free_signals/rows.csv (columns: `HEADER`) and printed.
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
from rbfm.inference.expert_demos import demo_embedding, warm_start

sys.path.insert(0, str(Path(__file__).parent))
from external_files import appending, demonstrated, start

ROWS = Path("runs/reward_free_signals/rows.csv")
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", nargs="+", default=["cheetah:run"])
    args = p.parse_args()
    start(p, args)
    with appending(ROWS, HEADER) as add, RolloutEngine(0) as engine:
        for domain, task, path in demonstrated(args.tasks):
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
            mu = [episodes_mean_b(model, res.trajectories[i * EPISODES : (i + 1) * EPISODES])
                  for i in range(len(zs))]  # fmt: skip
            targets = [demo_embedding(model, d) for d in picked]
            d_stored = [float((mu[0] - t).norm()) for t in targets]
            d_er = [float((mu[1 + s] - t).norm()) for s, t in enumerate(targets)]
            closer = sum(a < b for a, b in zip(d_stored, d_er, strict=True))
            cos = torch.nn.functional.cosine_similarity
            to_stored = [float(cos(zs[1 + s], stored, 0)) for s in range(SEEDS)]
            along = [float(cos(t - mu[1 + s], stored - zs[1 + s], 0))
                     for s, t in enumerate(targets)]  # fmt: skip
            row = [domain, task, resolve(domain).name,
                   f"{returns[0]:.1f}", f"{returns[1:].mean():.1f}", f"{np.mean(d_stored):.3f}",
                   f"{np.mean(d_er):.3f}", closer, SEEDS,
                   f"{np.mean(to_stored):.2f}", f"{np.mean(along):.2f}",
                   f"{beats_uniform(model, demos, stored):.1f}",
                   f"{beats_uniform(model, demos, zs[1]):.1f}"]  # fmt: skip
            add(row)
            print(dict(zip(HEADER, row, strict=True)), flush=True)


if __name__ == "__main__":
    main()
