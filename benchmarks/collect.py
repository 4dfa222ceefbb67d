"""Collection throughput against the raw dm_control step rate, measured in one run.

    python benchmarks/collect.py [--domains cheetah walker quadruped] [--episodes 3]

Prints, per domain: raw `dm_control.suite` steps/s with uniform random actions,
random-agent collection transitions/s (episodes written to disk, ExORL format) and
RND, APS and ProtoRL cpu-preset transitions/s after their random seed phase. Rates include
everything a `collect` call does (start-up, resume checks, writing) over the timed
episodes, after one untimed call. Targets: random >= 80% of
raw; RND (cpu) >= 500 transitions/s on cheetah.
"""

from __future__ import annotations

import argparse
import tempfile
import time

import numpy as np

from rbfm.envs import get_domain
from rbfm.exploration import CollectConfig, collect, rnd_config


def raw_rate(domain: str, task: str, episodes: int) -> float:
    from dm_control import suite  # after rbfm, which turns off dm_control's OpenGL probing

    env = suite.load(domain, task, task_kwargs={"random": 0})
    spec = env.action_spec()
    rng = np.random.default_rng(0)
    steps, start = 0, time.perf_counter()
    for _ in range(episodes):
        ts = env.reset()
        actions = rng.uniform(spec.minimum, spec.maximum, (1000, *spec.shape))
        while not ts.last():
            ts = env.step(actions[steps % 1000])
            steps += 1
    return steps / (time.perf_counter() - start)


def collect_rate(domain: str, agent: str, episodes: int, warmup: int, out: str) -> float:
    """Transitions/s of `episodes` episodes collected after `warmup` episodes."""
    length = get_domain(domain).episode_length
    if warmup:
        collect(CollectConfig(domain, agent, warmup * length, out), progress=False)
    start = time.perf_counter()
    collect(CollectConfig(domain, agent, (warmup + episodes) * length, out), progress=False)
    return episodes * length / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domains", nargs="+", default=["cheetah", "walker", "quadruped"])
    parser.add_argument("--episodes", type=int, default=30, help="timed random episodes")
    parser.add_argument("--rnd-episodes", type=int, default=4, help="timed learning-agent episodes")
    parser.add_argument("--repeats", type=int, default=3, help="median of this many")
    args = parser.parse_args()
    seed_episodes = rnd_config("cpu").num_seed_frames // 1000
    print(
        f"{'domain':<10} {'raw env/s':>10} {'random tr/s':>12} {'ratio':>6} "
        f"{'rnd cpu tr/s':>13} {'aps cpu tr/s':>13} {'proto cpu tr/s':>15}"
    )
    for domain in args.domains:
        task = {"walker": "walk", "quadruped": "walk", "cheetah": "run"}[domain]
        with tempfile.TemporaryDirectory() as out:
            # Alternated and repeated: this VM's speed drifts by tens of percent.
            raws, rands = [], []
            for rep in range(args.repeats):
                raws.append(raw_rate(domain, task, args.episodes))
                run_dir = f"{out}/random{rep}"
                rands.append(collect_rate(domain, "random", args.episodes, 1, run_dir))
            raw, rand = float(np.median(raws)), float(np.median(rands))
            rnd = collect_rate(domain, "rnd", args.rnd_episodes, seed_episodes, out)
            aps = collect_rate(domain, "aps", args.rnd_episodes, seed_episodes, out)
            proto = collect_rate(domain, "proto", args.rnd_episodes, seed_episodes, out)
        print(
            f"{domain:<10} {raw:>10.0f} {rand:>12.0f} {rand / raw:>6.0%} {rnd:>13.0f} "
            f"{aps:>13.0f} {proto:>15.0f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
