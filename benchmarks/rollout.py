"""Evaluation throughput of the rollout engine against the raw dm_control step rate.

    python benchmarks/rollout.py [--domains cheetah walker quadruped] [--episodes 10]

For each domain: raw single-process `dm_control.suite` steps/s (random actions),
then the engine running `--episodes` lockstep episodes of an FB actor (cpu preset,
random weights: the cost is the same) with 0 (in-process) and 2 worker processes.
Steps/s counts environment steps over all episodes. Target: >= 70% of raw.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from rbfm.envs import get_domain
from rbfm.evaluation import EnvSpec, RolloutEngine, fb_policy
from rbfm.fb import FBModel, fb_config


def raw_rate(domain: str, task: str, steps: int = 5000) -> float:
    from dm_control import suite  # after rbfm, which turns off dm_control's OpenGL probing

    env = suite.load(domain, task, task_kwargs={"random": 0})
    spec = env.action_spec()
    actions = np.random.default_rng(0).uniform(spec.minimum, spec.maximum, (steps, *spec.shape))
    env.reset()
    start = time.perf_counter()
    for a in actions:
        if env.step(a).last():
            env.reset()
    return steps / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domains", nargs="+", default=["cheetah", "walker", "quadruped"])
    parser.add_argument(
        "--episodes",
        type=int,
        nargs="+",
        default=[10, 40],
        help="lockstep batch sizes (pretraining evaluates 4 tasks x 10 = 40)",
    )
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--repeats", type=int, default=3, help="median of this many")
    args = parser.parse_args()
    print(
        f"{'domain':<10} {'raw env/s':>10} {'workers':>8} {'episodes':>9} {'eval steps/s':>13} "
        f"{'ratio':>6}"
    )
    for domain in args.domains:
        spec = get_domain(domain)
        task = spec.tasks[1]
        torch.manual_seed(0)
        model = FBModel(spec.obs_dim, spec.action_dim, fb_config(args.preset)).eval()
        z = model.radius * torch.nn.functional.normalize(torch.randn(model.cfg.z_dim), dim=0)
        # Repeated and alternated with the raw rate: this VM's speed drifts by tens of %.
        raws: list[float] = []
        rates: dict[tuple[int, int], list[float]] = {}
        engines = {w: RolloutEngine(w) for w in (0, 2)}
        for _ in range(args.repeats):
            raws.append(raw_rate(domain, task))
            for workers, engine in engines.items():
                for episodes in args.episodes:
                    engine.run(EnvSpec(domain, task), fb_policy(model, z), episodes)  # warm up
                    res = engine.run(EnvSpec(domain, task), fb_policy(model, z), episodes)
                    rates.setdefault((workers, episodes), []).append(res.env_steps / res.seconds)
        for engine in engines.values():
            engine.close()
        raw = float(np.median(raws))
        for (workers, episodes), values in rates.items():
            rate = float(np.median(values))
            print(
                f"{domain:<10} {raw:>10.0f} {workers:>8} {episodes:>9} {rate:>13.0f} "
                f"{rate / raw:>6.0%}",
                flush=True,
            )


if __name__ == "__main__":
    main()
