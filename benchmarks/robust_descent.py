"""How close RBFM-Light's z descent gets to the optimum of its own objective.

    python benchmarks/robust_descent.py --demos DEMOS.npz [--checkpoint cheetah] \
        [--draw 4] [--seed 0] [--variants paper full-batch lr-2e-3 steps-20k]

For the task vector of FB-IL and of RBFM-Light (paper settings and variants of its
optimiser), prints the imitation loss on every drawn demonstration transition (the
deterministic policy's squared action error) and its exact worst case over the TV
ball of radius eps = 0.8 (`certificate.tv_certificates`), the quantity Light minimises.
Any z is a feasible point of that problem, so a z with a lower worst case than Light's
shows how far Light's descent stopped from the optimum (docs/experiments.md,
"Robustness certificates"). Each variant runs the full inference (minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import torch

from rbfm.experiments.certificate import tv_certificates
from rbfm.fb.checkpoint import load_checkpoint
from rbfm.inference import infer, load_demos
from rbfm.inference.common import prepare

EPS = 0.8

VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "fbil": ("fbil", {}),
    "paper": ("rbfm-light", {}),
    "full-batch": ("rbfm-light", {"batch_size": 0, "noise_std": 0.0}),  # 0: every transition
    "lr-2e-3": ("rbfm-light", {"lr": 2e-3}),
    "steps-20k": ("rbfm-light", {"steps": 20_000}),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--demos", required=True, help="demonstrations file (rbfm demos)")
    parser.add_argument("--checkpoint", default="cheetah", help="model (default: shipped)")
    parser.add_argument("--draw", type=int, default=4, help="demonstrations drawn, as a cell")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    args = parser.parse_args()
    torch.set_num_threads(1)
    model, _ = load_checkpoint(args.checkpoint)
    demos = load_demos(args.demos).sample(args.draw, args.seed)
    data = prepare(model, demos)
    n = len(data.obs)

    def losses(z: torch.Tensor) -> tuple[float, float]:
        with torch.no_grad():
            pi = model.actor(data.obs, z.expand(n, -1))
            loss = (pi - data.action).square().sum(-1)
        (cert,) = tv_certificates(loss, (EPS,))
        return cert.nominal, cert.worst_case

    print(f"{demos.domain}: {args.draw} demonstrations, {n} transitions, TV radius {EPS}")
    print(f"{'z':<12} {'nominal':>9} {'worst case':>11} {'seconds':>8}")
    print(f"{'warm start':<12} {losses(data.z_w)[0]:>9.3f} {losses(data.z_w)[1]:>11.3f}")
    for name in args.variants:
        method, overrides = VARIANTS[name]
        if overrides.get("batch_size") == 0:
            overrides = {**overrides, "batch_size": n}
        start = time.perf_counter()
        result = infer(model, demos, method, seed=args.seed, **overrides)
        nominal, worst = losses(result.z)
        print(f"{name:<12} {nominal:>9.3f} {worst:>11.3f} {time.perf_counter() - start:>8.0f}")


if __name__ == "__main__":
    main()
