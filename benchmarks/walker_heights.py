"""Where a walker spends its steps: the torso height of the planner's demonstrations and of
ER-FB's policy imitating them, beside the model's own reward-inferred z.

    python benchmarks/walker_heights.py [--task stand] [--model walker] [--seeds 5]

ER-FB matches the demonstrations' state distribution; on walker stand most of the
planner's steps are fallen (torso height about 0.37; standing is 1.2), and this prints
whether the imitating policy stands or lies there. Each ER-FB z is inferred from the 4
episodes seed k draws (as the stages and `external_nominal.py` do) and runs one episode at
nominal physics from the evaluation's first initial state (seed `EVAL_SEED`, episode 0). Reads
`runs/demos/mpc/walker_TASK.npz` (`docs/results/external/make_demos.sh`).
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from external_files import demonstrated
from rbfm import EVAL_SEED
from rbfm.envs import DOMAINS
from rbfm.fb.checkpoint import load_checkpoint
from rbfm.inference import infer, load_demos
from rbfm.inference.expert_demos import generate_demos

# The torso height's column in walker's observation (orientations 14, height 1, velocity 9).
HEIGHT = 14


def _row(name: str, ret: float, height: np.ndarray) -> str:
    late = height[len(height) // 2 :]
    return f"| {name} | {ret:.1f} | {height.mean():.2f} | {late.mean():.2f} |"


def _episode(model, z: torch.Tensor, task: str) -> tuple[float, np.ndarray]:  # type: ignore[no-untyped-def]
    """One recorded episode of pi_z (the evaluation's first initial state): its return
    and its torso height at every state."""
    episode = generate_demos(model, "walker", task, z, 1, EVAL_SEED)
    return float(episode.returns[0]), episode.observation[:, HEIGHT]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="stand", choices=DOMAINS["walker"].tasks)
    parser.add_argument("--model", default="walker", help="a walker model's name (rbfm models)")
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()
    if args.seeds < 1:
        parser.error(f"--seeds {args.seeds}: at least 1")
    found = list(demonstrated([f"walker:{args.task}"]))
    if not found:
        raise SystemExit(f"walker:{args.task}: no planner demonstrations to read")
    demos = load_demos(found[0][2])
    model, meta = load_checkpoint(args.model)
    print("| episodes | return | torso height, mean | second half |\n|---|---|---|---|")
    starts = np.concatenate([[0], np.cumsum(demos.lengths + 1)])
    for i in range(demos.num_episodes):
        height = demos.observation[starts[i] : starts[i + 1], HEIGHT]
        print(_row(f"demonstration {i}", float(demos.returns[i]), height))
    for seed in range(args.seeds):
        z = infer(model, demos.sample(4, seed), "er", seed=seed).z
        print(_row(f"ER-FB, seed {seed}", *_episode(model, z, args.task)))
    stored = torch.tensor(meta["task_z"][args.task])
    print(_row("stored z (the reward's)", *_episode(model, stored, args.task)))


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
