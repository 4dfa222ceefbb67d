"""A robust method's settings (RBFM-Light's by default) against its time and accuracy,
on the five shipped models.

    python benchmarks/light_variants.py '{"off": {"working_set": 0}, "on": {}}' --seeds 0 1 2

Each variant is a dict of `infer(..., METHOD, **overrides)` arguments (`--method`,
default rbfm-light). Per model
(cheetah run, walker flip on RND / APS / ProtoRL, quadruped jump), 20 noisy
demonstrations (the model's expert, action noise std 0.3) are rolled out once and cached
under runs/light_variants/; each seed draws 4, as `benchmarks/robust_descent.py` does.
One line per (model, seed, variant): FB-IL's evaluations and seconds, the method's own
evaluations, its wall time over FB-IL's, its exact objective (Light: the TV-0.8 worst
case; Heavy: the LP's value), convergence, and
the exact value after each stage. docs/inference.md, "RBFM-Light's time against its
accuracy".
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from rbfm.data.demos import Demos
from rbfm.fb.checkpoint import load_checkpoint
from rbfm.fb.model import FBModel
from rbfm.inference import generate_demos, infer

MODELS = [
    ("cheetah", "run"),
    ("walker:rnd-v1", "flip"),  # the walker measured in docs/inference.md
    ("walker:aps", "flip"),
    ("walker:proto", "flip"),
    ("quadruped:rnd-v1", "jump"),  # likewise the quadruped
]
CACHE = Path("runs/light_variants")


def _pool(model: FBModel, meta: dict[str, object], name: str, task: str) -> Demos:
    path = CACHE / f"{name.replace(':', '_')}_{task}.pt"
    if path.exists():
        pool: Demos = torch.load(path, weights_only=False)
        return pool
    z_e = torch.tensor(meta["task_z"][task])  # type: ignore[index]
    pool = generate_demos(model, str(meta["domain"]), task, z_e, 20, 0, action_noise=0.3)
    CACHE.mkdir(parents=True, exist_ok=True)
    torch.save(pool, path)
    return pool


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("variants", type=json.loads, help='{"name": {overrides}, ...}')
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--method", default="rbfm-light", help="the robust method the variants configure"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    for name, task in MODELS:
        model, meta = load_checkpoint(name)
        pool = _pool(model, meta, name, task)
        for seed in args.seeds:
            demos = pool.sample(4, seed)
            start = time.perf_counter()
            fbil = infer(model, demos, "fbil", seed=seed)
            fbil_s = time.perf_counter() - start
            for variant, overrides in args.variants.items():
                start = time.perf_counter()
                res = infer(model, demos, args.method, seed=seed, **overrides)
                light_s = time.perf_counter() - start
                stages = " ".join(f"{v:.4f}" for v in res.trace)
                print(
                    f"{name:<13} s{seed} {variant:<8} fbil {fbil.steps:4d} {fbil_s:5.1f}s | "
                    f"{args.method} {res.steps:4d} {light_s:5.1f}s x{light_s / fbil_s:.2f} "
                    f"objective {res.objective:.4f} converged {res.converged} "
                    f"set_changes {res.extra.get('set_changes', 0):.0f} stages {stages}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
