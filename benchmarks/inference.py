"""Seconds per task of each inference method, and per-step cost relative to FB-IL.

    python benchmarks/inference.py [--presets paper cpu] [--settings paper default]
        [--measure 100] [--repeats 3] [--full]

Models have random weights (the cost is the same), demonstrations are 4 synthetic
cheetah episodes of 1000 steps. Each method runs under each named settings ("paper":
Tables 5-7, batches of 512; "default": every transition at each step); by default
`--measure` steps are timed after a warm-up, `--repeats` times with the methods
alternating, and the median is projected to the settings' step cap (`--full` runs
every step instead). The default settings stop by their convergence rule, usually
well before the cap: `benchmarks/robust_descent.py` reports the steps and seconds of
real runs, so the projection here is an upper bound.
Targets on 2 CPU cores, paper-size model: FB-IL <= 60 s, RBFM-Light <= 100 s,
RBFM-Heavy <= 120 s; Light and Heavy per step <= 1.25x FB-IL. DRBC and BE-DROIL
(paper presets) are timed the same way and projected to their 2M and 1M updates,
which regenerates the paper's Table 1 as ratios.
"""

from __future__ import annotations

import argparse
import itertools

import numpy as np
import torch

from rbfm.baselines import bedroil, drbc, train_baseline
from rbfm.fb import FBModel, fb_config
from rbfm.inference import METHODS, Demos, infer, method_config

PAPER_STEPS = {
    "drbc": drbc.drbc_config("paper", "cheetah").steps,
    "bedroil": bedroil.bedroil_config("paper").steps,
}


def synthetic_demos(episodes: int = 4, steps: int = 1000) -> Demos:
    """Random cheetah episodes (no reward, no physics): inference reads only their
    observations and actions."""
    rng = np.random.default_rng(0)
    observations = rng.standard_normal((episodes, steps + 1, 17))
    actions = rng.uniform(-1, 1, (episodes, steps, 6))
    return Demos.from_arrays("cheetah", "run", list(observations), list(actions))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=["paper", "cpu"])
    parser.add_argument("--measure", type=int, default=100, help="timed steps per repeat")
    parser.add_argument("--repeats", type=int, default=3, help="alternated; median reported")
    parser.add_argument("--full", action="store_true", help="run the paper's step counts")
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16"])
    parser.add_argument("--settings", nargs="+", default=["paper", "default"])
    args = parser.parse_args()
    demos = synthetic_demos()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(
        f"{'preset':<7} {'settings':<9} {'precision':<9} {'method':<11} {'cap':>6} "
        f"{'ms/step':>8} {'x FB-IL':>8} {'s/task':>8}"
    )
    for preset in args.presets:
        torch.manual_seed(0)
        model = FBModel(17, 6, fb_config(preset)).eval()
        for settings, precision in itertools.product(args.settings, args.precisions):
            bf16 = precision == "bf16"
            # Timing every step: no early stop.
            run = {"settings": settings, "bf16": bf16, "schedule": "constant"}
            for method in METHODS:
                infer(model, demos, method, steps=20, **run)  # warm-up
            # Methods alternate over repeats (this VM's speed drifts by tens of percent
            # within a minute); each reports its median.
            per_step: dict[str, list[float]] = {m: [] for m in METHODS}
            setup: dict[str, float] = {}
            for _ in range(1 if args.full else args.repeats):
                for method in METHODS:
                    cap = method_config(method, settings).steps
                    steps = cap if args.full else min(args.measure, cap)
                    res = infer(model, demos, method, seed=0, steps=steps, **run)
                    per_step[method].append(res.ms_per_step)
                    setup[method] = res.setup_seconds
            base = float(np.median(per_step["fbil"]))
            for method in METHODS:
                cap, ms = method_config(method, settings).steps, float(np.median(per_step[method]))
                total = setup[method] + ms * cap / 1000
                print(
                    f"{preset:<7} {settings:<9} {precision:<9} {method:<11} {cap:>6} "
                    f"{ms:>8.2f} {ms / base:>7.2f}x {total:>8.1f}",
                    flush=True,
                )

    # The single-task baselines train a policy per task: time some updates, project
    # to their paper step counts (Tables 8-9), and compare with the RBFM methods.
    print(f"\n{'baseline':<9} {'steps':>9} {'ms/update':>10} {'projected':>10}")
    for method in ("drbc", "bedroil"):
        train_baseline(method, demos, "paper", 0, {"steps": 20})  # warm-up
        paper_steps = PAPER_STEPS[method]
        result, _ = train_baseline(method, demos, "paper", 0, {"steps": args.measure})
        hours = result.ms_per_step * paper_steps / 3.6e6
        print(
            f"{method:<9} {paper_steps:>9,} {result.ms_per_step:>10.2f} {hours:>9.1f}h", flush=True
        )


if __name__ == "__main__":
    main()
