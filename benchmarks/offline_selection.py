"""Choosing among candidate task vectors offline by the model's own prediction: does the
FM-FB objective at a z (how far F(s, pi_z(s), z), the successor features the model
predicts for pi_z from a demonstrated state, is from the demonstrated discounted features
sum_t gamma^t B(s_{t+1})) rank the candidates as their returns do?

    python benchmarks/offline_selection.py [--rows runs/external_nominal/rows.csv]

Reads what `benchmarks/external_nominal.py` wrote at nominal physics (its rows, the task
vectors it kept in runs/external_nominal/z/, the planner's demonstrations), scores each
seed's candidates on that seed's 4 demonstrations, and prints per task the Spearman rank
correlation of score and return over its (seed, method) candidates (a score that ranks
as the returns do is near -1: lower is closer), each method's mean share and score, and
the return of
picking the lowest-scoring candidate per seed against each candidate method alone, as
shares of the demonstrator's return. The model's stored z (the task's reward, which a
user does not have) is scored beside them as the model's limit, never picked.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch
from scipy.stats import spearmanr

from external_files import DEMOS, model_rows
from rbfm.fb.checkpoint import load_checkpoint
from rbfm.inference import load_demos
from rbfm.inference.fm import FMConfig, score, starts_and_targets

CANDIDATES = ("er", "fbil", "fm")  # what a user can compute from demonstrations alone


def _share(row: dict[str, str]) -> float:
    """A row's return as a share (%) of its seed's demonstrations' return."""
    return 100 * float(row["mean"]) / float(row["demonstrator"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=Path, default=Path("runs/external_nominal/rows.csv"))
    args = p.parse_args()
    rows = [r for r in model_rows(args.rows) if r["family"] == "none"]
    returns = {(r["model"], r["task"], r["method"], int(r["seed"])): r for r in rows}
    zdir = args.rows.parent / "z"
    by_task: dict[tuple[str, str, str], list[tuple[int, str]]] = defaultdict(list)
    for key, task, method, seed in returns:
        if method in CANDIDATES and (zdir / f"{key}_{task}_{method}_{seed}.pt").exists():
            by_task[key, task, key.partition("_")[0]].append((seed, method))
    print("| model | task | candidates | Spearman (score, return) | picked | "
          + " | ".join(CANDIDATES) + " | stored z |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | " + " | ".join("---" for _ in CANDIDATES) + " | --- |")
    for (key, task, domain), found in sorted(by_task.items()):
        model, meta = load_checkpoint(key.replace("_", ":", 1))  # the file stem as a name
        demos = load_demos(DEMOS / f"{domain}_{task}.npz")
        scores, gains, picked, stored_scores = [], [], [], []
        shares: dict[str, list[float]] = defaultdict(list)
        scored_by: dict[str, list[float]] = defaultdict(list)
        stored_z = torch.tensor(meta["task_z"][task])
        for seed in sorted({s for s, _ in found}):
            obs, target = starts_and_targets(model, demos.sample(4, seed), FMConfig(), seed)
            mine = {m: returns[key, task, m, seed] for s, m in found if s == seed}
            scored = {
                m: score(model, obs, target, torch.load(zdir / f"{key}_{task}_{m}_{seed}.pt")[0])
                for m in mine
            }
            for m, r in mine.items():
                share = _share(r)
                scores.append(scored[m])
                gains.append(share)
                shares[m].append(share)
                scored_by[m].append(scored[m])
            best = min(scored, key=lambda m: scored[m])
            picked.append(_share(mine[best]))
            stored_scores.append(score(model, obs, target, stored_z))
        rho = spearmanr(scores, gains).statistic if len(scores) > 2 else float("nan")
        cells = [
            f"{np.mean(shares[m]):.1f}%, {np.mean(scored_by[m]):.3f}" if shares[m] else "-"
            for m in CANDIDATES
        ]
        stored = [r for (k, t, m, _), r in returns.items() if (k, t, m) == (key, task, "stored")]
        limit = f"{_share(stored[0]):.1f}%" if stored else "-"
        head = f"| {key} | {task} | {len(scores)} | {rho:+.2f} | {np.mean(picked):.1f}% | "
        print(head + " | ".join(cells) + f" | {limit}, {np.mean(stored_scores):.3f} |")


if __name__ == "__main__":
    main()
