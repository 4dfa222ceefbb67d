"""Grid evaluation throughput of the experiment runner against the raw dm_control rate.

    python benchmarks/experiment_eval.py [--domains cheetah walker quadruped] [--workers 2]

For each domain: raw single-process `dm_control.suite` steps/s (random actions), then the
runner's evaluation jobs (`rbfm.experiments.jobs.run_eval`, the code `rbfm experiment`
runs) over `--workers` processes of the local executor: every task of the domain x the
levels of one perturbation family x `--vectors` task vectors, `--episodes` episodes each,
packed into jobs of up to `--batch` episodes as the runner packs them, one batched actor call
per step per job. Steps/s counts environment steps over all episodes, after one warm-up
job per worker. Target: >= 80% of raw x workers (a job's overhead under a fifth).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

from rbfm.envs import PERTURBATIONS, get_domain, get_perturbation
from rbfm.experiments.executors import LocalExecutor
from rbfm.experiments.jobs import EvalEntry, EvalJob, run_eval
from rbfm.experiments.runner import EVAL_BATCH
from rbfm.fb import FBModel, fb_config
from rbfm.fb.checkpoint import save_checkpoint

sys.path.insert(0, str(Path(__file__).parent))
from rollout import raw_rate


def jobs_for(
    domain: str, checkpoint: str, z_dim: int, vectors: int, episodes: int, batch: int
) -> list[EvalJob]:
    spec = get_domain(domain)
    family = next(f for d, f in PERTURBATIONS if d == domain)
    rng = np.random.default_rng(0)
    entries = []
    for task in spec.tasks:
        for level in get_perturbation(domain, family).levels:
            for v in range(vectors):
                z = rng.standard_normal(z_dim)
                z *= np.sqrt(z_dim) / np.linalg.norm(z)
                cell = f"{task}-{level}-{v}"
                entries.append(
                    EvalEntry(cell, domain, task, family, level, episodes, 0, z.tolist(), None)
                )
    per_job = max(1, batch // episodes)
    return [EvalJob(checkpoint, entries[i : i + per_job]) for i in range(0, len(entries), per_job)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domains", nargs="+", default=["cheetah", "walker", "quadruped"])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--vectors", type=int, default=5, help="task vectors per task and level")
    parser.add_argument("--episodes", type=int, default=10, help="per task vector and level")
    parser.add_argument(
        "--batch", type=int, default=EVAL_BATCH, help="episodes per job (default: the runner's)"
    )
    parser.add_argument("--preset", default="cpu", help="FB model size (random weights)")
    parser.add_argument("--out", default="runs/bench", help="where the random model is saved")
    args = parser.parse_args()
    print(
        f"{'domain':<10} {'raw env/s':>10} {'workers':>8} {'episodes':>9} {'jobs':>5} "
        f"{'grid steps/s':>13} {'ratio':>6}"
    )
    executor = LocalExecutor(args.workers)
    for domain in args.domains:
        spec = get_domain(domain)
        torch.manual_seed(0)
        model = FBModel(spec.obs_dim, spec.action_dim, fb_config(args.preset)).eval()
        stem = Path(args.out) / f"{domain}-{args.preset}"
        stem.parent.mkdir(parents=True, exist_ok=True)
        save_checkpoint(stem, model, {"domain": domain})
        jobs = jobs_for(domain, str(stem), model.cfg.z_dim, args.vectors, args.episodes, args.batch)
        warm = [EvalJob(str(stem), jobs[0].entries[:1])] * max(args.workers, 1)
        list(executor.map_unordered(run_eval, warm))
        raw = raw_rate(domain, spec.tasks[1])
        start = time.perf_counter()
        steps = 0
        for _, outputs in executor.map_unordered(run_eval, jobs):
            steps += sum(len(o.returns) for o in outputs) * spec.episode_length
        rate = steps / (time.perf_counter() - start)
        raw = (raw + raw_rate(domain, spec.tasks[1])) / 2  # before and after: the VM drifts
        episodes = sum(len(e.entries) for e in jobs) * args.episodes
        print(
            f"{domain:<10} {raw:>10.0f} {args.workers:>8} {episodes:>9} {len(jobs):>5} "
            f"{rate:>13.0f} {rate / (raw * max(args.workers, 1)):>6.0%}",
            flush=True,
        )
    executor.close()


if __name__ == "__main__":
    main()
