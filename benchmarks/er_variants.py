"""Screening two variants of ER-FB on the planner's demonstrations, against ER-FB itself.

    python benchmarks/er_variants.py --tasks walker:walk walker:stand --seeds 2 \
        --variants er rer late cer1 cer0.5

The models' training states do not ship (and for walker's default cannot be collected
again here: ~25 episodes an hour), so the reference sample rho' is the model's own
reachable states: pi_z for 64 z drawn uniformly on the sqrt(d) sphere (the prior the
actor was trained on; no reward and no demonstration read), one episode each at nominal
physics, initial states of seed 12345.

- `er`: z = mean of B over the demonstrated states (`rbfm.inference.er`).
- `rer`: RER-style, the density ratio learned: an MLP (d -> 256 -> 256 -> 1) on B(s)
  classifies demonstrated states against rho' (balanced batches of 256, AdamW lr 1e-3,
  weight decay 1e-4, 2,000 steps, seeded by the seed); r(s) = exp(logit), so
  z = sum_rho' r B / sum_rho' r, projected.
- `late`: ER-FB over each demonstration's states from step 100 on (the planner's start
  from the initial state left out).
- `cerK`: the ratio minus K (r - K: a shift of the reward FB's z sees, which moves z by
  -K E_rho'[B]): z = mean_demos B - K mean_rho' B, projected.

Each z runs the 20 evaluation episodes of `benchmarks/external_nominal.py` (its initial
states and per-seed demonstrations). Rows are appended to runs/er_variants/rows.csv.
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from pathlib import Path

import numpy as np
import torch

from rbfm import EVAL_SEED
from rbfm.envs import DOMAINS
from rbfm.evaluation import EnvSpec, RolloutEngine, fb_policy
from rbfm.fb.checkpoint import load_checkpoint
from rbfm.fb.model import FBModel
from rbfm.fb.networks import project
from rbfm.inference import Demos, load_demos
from rbfm.inference.expert_demos import demo_embedding, warm_start

sys.path.insert(0, str(Path(__file__).parent))
from external_files import demonstrated

ROWS = Path("runs/er_variants/rows.csv")


def _b(model: FBModel, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return torch.cat([model.backward_map(c) for c in x.split(8192)])


def reachable(model: FBModel, domain: str, task: str, engine: RolloutEngine) -> torch.Tensor:
    """rho': the states of pi_z for 64 z from the prior, one episode each."""
    g = torch.Generator().manual_seed(0)
    zs = project(torch.randn(64, model.cfg.z_dim, generator=g), model.radius)
    res = engine.run(EnvSpec(domain, task), fb_policy(model, zs), 64, seed=12345, record=True)
    assert res.trajectories is not None
    states = np.concatenate([t["observation"] for t in res.trajectories])
    return torch.as_tensor(states, dtype=torch.float32)


def rer(model: FBModel, demos: Demos, b_rho: torch.Tensor, seed: int) -> tuple[torch.Tensor, str]:
    """z from a classifier's density ratio over rho' (and the classifier's last loss and
    the weights' effective sample size, which say whether rho' overlaps the demos)."""
    b_demo = _b(model, torch.as_tensor(np.concatenate(demos.next_states()), dtype=torch.float32))
    torch.manual_seed(seed)
    d = b_rho.shape[1]
    net = torch.nn.Sequential(
        torch.nn.Linear(d, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256), torch.nn.ReLU(),
        torch.nn.Linear(256, 1),
    )  # fmt: skip
    opt = torch.optim.AdamW(net.parameters(), 1e-3, weight_decay=1e-4)
    labels = torch.cat([torch.ones(256), torch.zeros(256)])
    for _ in range(2000):
        a = b_demo[torch.randint(len(b_demo), (256,))]
        b = b_rho[torch.randint(len(b_rho), (256,))]
        logits = net(torch.cat([a, b])).squeeze(1)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        w = torch.softmax(net(b_rho).squeeze(1), 0)  # r = exp(logit), normalised over rho'
        z = project((w[:, None] * b_rho).sum(0), model.radius)
    return z, f"loss {float(loss):.3f}, effective sample {float(1 / (w**2).sum()):.0f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", nargs="+", default=["walker:walk"])
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--variants", nargs="+", default=["er", "rer", "late", "cer1", "cer0.5"])
    args = p.parse_args()
    for v in args.variants:  # before any rollout
        if v not in ("er", "rer", "late") and not re.fullmatch(r"cer\d+(\.\d+)?", v):
            p.error(f"--variants: {v} (valid: er, rer, late, cerK with K a number, e.g. cer0.5)")
    if args.seeds < 1:
        p.error(f"--seeds {args.seeds}: at least 1")
    for item in args.tasks:
        domain, _, task = item.partition(":")
        if domain not in DOMAINS or task not in DOMAINS[domain].tasks:
            p.error(f"--tasks {item}: a DOMAIN:TASK of rbfm's twelve (e.g. walker:walk)")
    torch.set_num_threads(1)
    ROWS.parent.mkdir(parents=True, exist_ok=True)
    with open(ROWS, "a", newline="") as f, RolloutEngine(0) as engine:
        writer = csv.writer(f)
        for domain, task, path in demonstrated(args.tasks):
            demos = load_demos(path)
            if "late" in args.variants and (short := int(demos.lengths.min())) <= 100:
                raise SystemExit(f"late: {path} holds an episode of {short} steps, none from "
                                 "step 100 on")  # fmt: skip
            model, meta = load_checkpoint(domain)
            b_rho = _b(model, reachable(model, domain, "walk" if domain != "cheetah" else "run",
                                        engine))  # fmt: skip
            stored = torch.tensor(meta["task_z"][task])
            for seed in range(args.seeds):
                picked = demos.sample(4, seed)
                for v in args.variants:
                    info = ""
                    if v == "er":
                        z = warm_start(model, picked)
                    elif v == "rer":
                        z, info = rer(model, picked, b_rho, seed)
                    elif v == "late":
                        with torch.no_grad():
                            per = [model.backward_map(torch.as_tensor(s[100:])).mean(0)
                                   for s in picked.next_states()]  # fmt: skip
                        z = project(torch.stack(per).mean(0), model.radius)
                    elif v.startswith("cer"):
                        shift = float(v[3:])
                        z = project(demo_embedding(model, picked) - shift * b_rho.mean(0),
                                    model.radius)  # fmt: skip
                    else:
                        raise AssertionError(v)  # checked above
                    ret = engine.run(EnvSpec(domain, task), fb_policy(model, z), 20,
                                     seed=EVAL_SEED).returns.mean()  # fmt: skip
                    share = 100 * ret / picked.returns.mean()
                    cos = float(torch.cosine_similarity(z.flatten(), stored, 0))
                    writer.writerow([domain, task, seed, v, f"{ret:.1f}", f"{share:.1f}",
                                     f"{cos:.2f}", info])  # fmt: skip
                    f.flush()
                    print(f"{domain}:{task} seed {seed} {v}: {ret:.1f} ({share:.0f}%), cosine "
                          f"to the stored z {cos:.2f} {info}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
