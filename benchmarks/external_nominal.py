"""Imitating a planner: each imitation method's return at nominal physics as a fraction
of the demonstrator's, and at each family's two strongest levels, on the default models.

    python benchmarks/external_nominal.py [--methods fbil er fm goal] [--tasks walker:walk]

For every planner demonstrations file `runs/demos/mpc/DOMAIN_TASK.npz` (from
`runs/demos/mpc/make.sh`, i.e. `rbfm demos --expert mpc`), each method infers from 4 of
its episodes per seed (5 seeds) and its policy runs 20 episodes from the evaluation's
initial states (the same for every method: paired) at nominal physics and at the two
strongest levels of each of the domain's three families. Task vectors are kept in
`runs/external_nominal/z/` and rows go to `runs/external_nominal/rows.csv` as each
(task, method, seed) ends, so a rerun resumes; the tables are printed and written to
docs/results/external/nominal.md.
"""

from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path

import numpy as np
import torch

from rbfm import EVAL_SEED
from rbfm.envs import families, get_perturbation
from rbfm.evaluation import EnvSpec, RolloutEngine, fb_policy
from rbfm.evaluation.aggregate import iqm
from rbfm.evaluation.rollout import Policy
from rbfm.fb.checkpoint import load_checkpoint
from rbfm.inference import infer, load_demos
from rbfm.inference.goal import GoalConfig, GoalPolicy, infer_sequences

DEMOS = Path("runs/demos/mpc")
ROWS = Path("runs/external_nominal/rows.csv")
PAGE = Path("docs/results/external/nominal.md")
COLUMNS = (
    "domain", "task", "model", "method", "seed", "family", "level", "mean", "demonstrator",
    "seconds",
)  # fmt: skip
TASKS = [
    "cheetah:run",
    "cheetah:walk",
    "cheetah:walk_backward",
    "cheetah:run_backward",
    "walker:walk",
    "quadruped:walk",
    "quadruped:stand",
    "walker:stand",
    "walker:run",
    "quadruped:run",
    "walker:flip",
    "quadruped:jump",
]


def _policy(model, demos, method: str, seed: int, key: str) -> tuple[Policy, float]:  # type: ignore[no-untyped-def]
    if method == "goal":
        goals = infer_sequences(model, demos, GoalConfig())
        return GoalPolicy(model, goals), goals.seconds
    path = ROWS.parent / "z" / f"{key}.pt"
    if path.exists():
        z, seconds = torch.load(path)
        return fb_policy(model, z), seconds
    # bf16: the grid's inference precision (a bfloat16 actor copy; evaluation in float32).
    extra = {"bf16": True} if method in ("fbil", "rbfm-light", "rbfm-heavy") else {}
    result = infer(model, demos, method, seed=seed, **extra)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save((result.z, result.seconds), path)
    return fb_policy(model, result.z), result.seconds


def cells(domain: str) -> list[tuple[str, float | None]]:
    """Nominal, then each family's two strongest levels."""
    return [("none", None)] + [
        (f, lv) for f in families(domain) for lv in get_perturbation(domain, f).levels[-2:]
    ]


def _done() -> set[tuple[str, str, str, int]]:
    if not ROWS.exists():
        return set()
    with open(ROWS) as f:
        return {(r["domain"], r["task"], r["method"], int(r["seed"])) for r in csv.DictReader(f)}


def run(methods: list[str], tasks: list[str], seeds: int, episodes: int) -> None:
    ROWS.parent.mkdir(parents=True, exist_ok=True)
    done = _done()
    new = not ROWS.exists()
    with open(ROWS, "a", newline="") as f, RolloutEngine(0) as engine:
        writer = csv.DictWriter(f, COLUMNS)
        if new:
            writer.writeheader()
        for item in tasks:
            domain, task = item.split(":")
            path = DEMOS / f"{domain}_{task}.npz"
            if not path.exists():
                print(f"{item}: no planner demonstrations yet ({path})")
                continue
            demos = load_demos(path)
            model, _ = load_checkpoint(domain)
            for method in methods:
                for seed in range(seeds):
                    if (domain, task, method, seed) in done:
                        continue
                    start = time.perf_counter()
                    picked = demos.sample(4, seed)
                    key = f"{domain}_{task}_{method}_{seed}"
                    policy, infer_seconds = _policy(model, picked, method, seed, key)
                    specs = [
                        EnvSpec(domain, task, None if fam == "none" else fam, lv)
                        for fam, lv in cells(domain)
                    ]
                    res = engine.run(
                        [s for s in specs for _ in range(episodes)], policy, seed=EVAL_SEED
                    )
                    means = res.returns.reshape(len(specs), episodes).mean(1)
                    for (fam, lv), mean in zip(cells(domain), means, strict=True):
                        writer.writerow({
                            "domain": domain, "task": task, "model": domain, "method": method,
                            "seed": seed, "family": fam, "level": "" if lv is None else lv,
                            "mean": f"{mean:.2f}",
                            "demonstrator": f"{picked.returns.mean():.2f}",
                            "seconds": f"{infer_seconds:.2f}",
                        })  # fmt: skip
                    f.flush()
                    took = time.perf_counter() - start
                    print(f"{item} {method} seed {seed}: nominal {means[0]:.1f}, strongest "
                          f"{means[1:].mean():.1f} ({took:.0f} s)", flush=True)  # fmt: skip


def _bootstrap_iqm(fractions: np.ndarray, reps: int = 2000) -> tuple[float, float, float]:
    """IQM of a (seeds, tasks) matrix with a stratified (per task) bootstrap 95% CI."""
    rng = np.random.default_rng(0)
    n, k = fractions.shape
    draws = [iqm(fractions[rng.integers(0, n, n), np.arange(k)[None]].ravel()) for _ in range(reps)]
    lo, hi = np.percentile(draws, [2.5, 97.5])
    return iqm(fractions.ravel()), float(lo), float(hi)


def table(methods: list[str]) -> str:
    with open(ROWS) as f:
        rows = [r for r in csv.DictReader(f) if r["family"] == "none"]
    lines = [
        "| domain | task | demonstrator | " + " | ".join(methods) + " |",
        "| --- | --- | --- | " + " | ".join("---" for _ in methods) + " |",
    ]
    pooled: dict[str, dict[str, list[np.ndarray]]] = {}
    for item in TASKS:
        domain, task = item.split(":")
        sel = [r for r in rows if r["domain"] == domain and r["task"] == task]
        per = {m: sorted((r for r in sel if r["method"] == m), key=lambda r: int(r["seed"]))
               for m in methods}  # fmt: skip
        if not sel or any(len(v) == 0 for v in per.values()):
            continue
        demo = float(np.mean([float(r["demonstrator"]) for r in per[methods[0]]]))
        cells = []
        for m in methods:
            means = np.array([float(r["mean"]) for r in per[m]])
            demos = np.array([float(r["demonstrator"]) for r in per[m]])
            cells.append(f"{means.mean():.1f} ({means.mean() / demo:.2f})")
            pooled.setdefault(domain, {}).setdefault(m, []).append(means / demos)
        lines.append(f"| {domain} | {task} | {demo:.1f} | " + " | ".join(cells) + " |")
    lines += ["", "| domain (tasks) | " + " | ".join(methods) + " |"]
    lines.append("| --- | " + " | ".join("---" for _ in methods) + " |")
    for domain, per_method in pooled.items():
        cells = []
        for m in methods:
            cols = per_method.get(m, [])
            if not cols or len({len(c) for c in cols}) > 1:
                cells.append("-")
                continue
            mid, lo, hi = _bootstrap_iqm(np.stack(cols, 1))
            cells.append(f"{mid:.2f} [{lo:.2f}, {hi:.2f}]")
        n = len(next(iter(per_method.values())))
        lines.append(f"| {domain} ({n}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--methods", nargs="+", default=["fbil", "er", "fm", "goal"])
    p.add_argument("--tasks", nargs="+", default=TASKS)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--episodes", type=int, default=20)
    p.add_argument("--table-only", action="store_true")
    args = p.parse_args()
    if not args.table_only:
        run(args.methods, args.tasks, args.seeds, args.episodes)
    text = table(args.methods)
    print(text)
    PAGE.parent.mkdir(parents=True, exist_ok=True)
    PAGE.write_text(
        "# Imitating a planner at nominal physics\n\n"
        "Per task: the mean over 5 seeds of each method's mean return over 20 episodes "
        "(in brackets its fraction of the demonstrator's return on the same seed's 4 "
        "demonstrations); per domain: the IQM of those per-seed fractions over the "
        "domain's tasks, stratified-bootstrap 95% CI. Made by "
        "`python benchmarks/external_nominal.py`.\n\n" + text + "\n"
    )


if __name__ == "__main__":
    main()
