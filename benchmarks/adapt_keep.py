"""What reward-free adaptation keeps, and what it costs: ER-FB's z adapted with 5 episodes at
nominal physics on the planner's demonstrations, every candidate evaluated.

    python benchmarks/adapt_keep.py [--tasks walker:walk ...] [--seeds 5] [--budget 5]

Per (task, seed): the line search of `rbfm.inference.adapt` (B-distance criterion, one
initial state) from ER-FB's z on 4 of the planner's episodes, and each of its candidates
run for the 20 evaluation episodes of `benchmarks/external_nominal.py` (the same initial
states). One search gives both rules, since they differ only in what they keep
(`AdaptResult.best`, `keep="best"`; the start z unless `clearly_better`, `keep="clear"`,
the default; `hac`, the same with a Newey-West variance, screened and not adopted:
`hac_better`). Rows go to runs/adapt_keep/rows.jsonl as each (task, seed) ends (a rerun
resumes); the table of shares of the demonstrator's return is printed and, with
--page, written.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import scipy.stats
import torch

from rbfm import EVAL_SEED
from rbfm.evaluation import EnvSpec, RolloutEngine, fb_policy
from rbfm.evaluation.aggregate import iqm, stratified_iqm
from rbfm.fb.checkpoint import load_checkpoint, resolve
from rbfm.inference import load_demos
from rbfm.inference.adapt import AdaptConfig, adapt, clearly_better
from rbfm.inference.expert_demos import warm_start

sys.path.insert(0, str(Path(__file__).parent))
from external_files import demonstrated, write_page
from external_nominal import stored_returns

ROWS = Path("runs/adapt_keep/rows.jsonl")
EPISODES = 20
# "hac" last: each rule's bootstrap draws then stay those of the table without it.
RULES = ("start", "best", "clear", "oracle", "hac")


def run(tasks: list[str], seeds: int, budget: int) -> None:
    torch.set_num_threads(1)  # rows reproduce only at one thread count
    done = {(r["model"], r["task"], r["seed"], len(r["best"])) for r in _read()}
    ROWS.parent.mkdir(parents=True, exist_ok=True)
    with open(ROWS, "a") as f, RolloutEngine(0) as engine:
        for domain, task, path in demonstrated(tasks):
            key = resolve(domain).name
            model, _ = load_checkpoint(domain)
            demos = load_demos(path)
            for seed in range(seeds):
                if (key, f"{domain}:{task}", seed, budget) in done:
                    continue
                picked = demos.sample(4, seed)  # external_nominal's demonstrations per seed
                env = EnvSpec(domain, task)
                cfg = AdaptConfig(budget=budget, keep="best")
                res = adapt(model, picked, warm_start(model, picked), env, cfg, seed, engine)
                cands = torch.stack(res.candidates)
                ev = engine.run(
                    [env] * (EPISODES * len(cands)),
                    fb_policy(model, cands.repeat_interleave(EPISODES, 0)),
                    seeds=[(EVAL_SEED, k) for _ in cands for k in range(EPISODES)],
                )
                row = {
                    "model": key, "task": f"{domain}:{task}", "seed": seed,
                    "demonstrator": float(picked.returns.mean()), "best": res.best,
                    "distances": res.distances, "blocks": res.blocks,
                    "returns": ev.returns.reshape(len(cands), EPISODES).mean(1).tolist(),
                }  # fmt: skip
                f.write(json.dumps(row) + "\n")
                f.flush()
                print(f"{domain}:{task} seed {seed}: returns {np.round(row['returns'], 1)}, "
                      f"best {res.best[-1]}", flush=True)  # fmt: skip


def _read(budget: int | None = None) -> list[dict]:  # type: ignore[type-arg]
    """The rows, or those of searches of `budget` episodes (one candidate an episode)."""
    rows = [json.loads(line) for line in ROWS.read_text().splitlines()] if ROWS.exists() else []
    return [r for r in rows if budget is None or len(r["best"]) == budget]


def table(budget: int, alpha: float = AdaptConfig.alpha) -> str:
    """Per task: the mean share (%) of each z's return over seeds; pooled: the IQM of the
    per-seed shares over every task and seed (stratified-bootstrap 95% CI where every task
    has as many seeds), and how often each rule left the start z; searches of `budget`
    episodes."""
    rows = _read(budget)
    lines = [
        "| model | task | seeds | ER-FB (start) | best (keep=best) | kept (keep=clear) | "
        "best candidate by return (oracle) | kept (Newey-West test) | clear: start kept |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    pooled: dict[str, list[list[float]]] = {k: [] for k in RULES}
    for key in dict.fromkeys((r["model"], r["task"]) for r in rows):
        mine = sorted((r for r in rows if (r["model"], r["task"]) == key), key=lambda r: r["seed"])
        kept_start = sum(_pick(r, "clear", alpha) == 0 for r in mine)
        for k in RULES:
            pooled[k].append(
                [100 * r["returns"][_pick(r, k, alpha)] / r["demonstrator"] for r in mine]
            )
        cells = " | ".join(f"{np.mean(pooled[k][-1]):.1f}" for k in RULES)
        lines.append(
            f"| {key[0]} | {key[1]} | {len(mine)} | {cells} | {kept_start} of {len(mine)} |"
        )
    if rows:
        if len({len(c) for cols in pooled.values() for c in cols}) == 1:
            est = stratified_iqm({k: np.array(cols).T for k, cols in pooled.items()})
            cells = " | ".join(f"{mid:.1f} [{lo:.1f}, {hi:.1f}]" for mid, lo, hi in est.values())
        else:
            cells = " | ".join(f"{iqm(np.concatenate(c)):.1f}" for c in pooled.values())
        lines.append(f"| pooled (IQM) | | {len(rows)} | {cells} | |")
    moves = []
    for rule in ("best", "clear", "hac"):
        picks = [_pick(r, rule, alpha) for r in rows]
        deltas = [r["returns"][k] - r["returns"][0] for r, k in zip(rows, picks, strict=True)]
        left = sum(k != 0 for k in picks)
        moves.append(f"| {rule} | {left} | {sum(d > 0 for d in deltas)} | "
                     f"{sum(d < 0 for d in deltas)} |")  # fmt: skip
    counts = ("| rule | left the start | gained | lost |\n| --- | --- | --- | --- |\n"
              + "\n".join(moves))  # fmt: skip
    return ("\n".join(lines) + "\n\n" + limit_table(rows, alpha) + "\n\n" + counts + "\n\n"
            + autocorrelation(rows))  # fmt: skip


def limit_table(rows: list[dict], alpha: float) -> str:  # type: ignore[type-arg]
    """Per domain, each rule's return over the stored z's (the model given the task's
    reward, `benchmarks/external_nominal.py --methods stored`): the IQM over tasks and seeds
    with its stratified-bootstrap 95% CI."""
    stored = stored_returns()
    lines = [
        "| domain (tasks) | ER-FB (start) | best (keep=best) | kept (keep=clear) | oracle | "
        "kept (Newey-West test) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for domain in dict.fromkeys(r["task"].split(":")[0] for r in rows):
        tasks = list(dict.fromkeys(r["task"] for r in rows if r["task"].startswith(domain)))
        if not all(tuple(t.split(":")) in stored for t in tasks):
            continue
        per: dict[str, list[list[float]]] = {k: [] for k in RULES}
        for t in tasks:
            limit = stored[tuple(t.split(":"))]  # type: ignore[index]
            mine = sorted((r for r in rows if r["task"] == t), key=lambda r: r["seed"])
            for k in per:
                per[k].append([r["returns"][_pick(r, k, alpha)] / limit for r in mine])
        if len({len(c) for cols in per.values() for c in cols}) != 1:
            continue  # tasks with different seed counts do not pool
        est = stratified_iqm({k: np.array(cols).T for k, cols in per.items()})
        cells = [f"{mid:.2f}x [{lo:.2f}, {hi:.2f}]" for mid, lo, hi in est.values()]
        lines.append(f"| {domain} ({len(tasks)} tasks) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def hac_better(candidate: list[float], start: list[float], alpha: float) -> bool:
    """`clearly_better` with the mean gain's variance from Newey and West (Bartlett weights,
    lag floor(4 (m / 100)^(2/9)), 2 for 10 blocks), for blocks correlated in time; the
    plain test where that variance is not positive."""
    cand, base = np.asarray(candidate, dtype=np.float64), np.asarray(start, dtype=np.float64)
    both = np.isfinite(base)
    if len(cand) != len(base) or not np.isfinite(cand).all() or both.sum() < 2:
        return False
    gain = base[both] - cand[both]
    m = len(gain)
    lag = int(4 * (m / 100) ** (2 / 9))
    d = gain - gain.mean()
    var = d @ d / m + sum(2 * (1 - k / (lag + 1)) * (d[k:] @ d[:-k]) / m for k in range(1, lag + 1))
    if var <= 0:
        return clearly_better(candidate, start, alpha)
    t = gain.mean() / np.sqrt(var / m)
    return bool(scipy.stats.t.sf(t, m - 1) < alpha)


def autocorrelation(rows: list[dict]) -> str:  # type: ignore[type-arg]
    """The lag-1 autocorrelation of the paired block gains (start minus the search's best)
    over the searches whose best left the start: what `hac` corrects for."""
    values = []
    for r in rows:
        b = r["best"][-1]
        gain = np.asarray(r["blocks"][0], dtype=np.float64) - np.asarray(r["blocks"][b])
        gain = gain[np.isfinite(gain)]
        d = gain - gain.mean()
        if b and d @ d > 0:
            values.append(float(d[1:] @ d[:-1] / (d @ d)))
    if not values:
        return ""
    return (f"Lag-1 autocorrelation of the paired block gains over the {len(values)} searches "
            f"whose best left the start: mean {np.mean(values):+.2f}, median "
            f"{np.median(values):+.2f}, positive in {sum(v > 0 for v in values)}.")  # fmt: skip


def _pick(row: dict, rule: str, alpha: float) -> int:  # type: ignore[type-arg]
    """The candidate each rule keeps: the start, the search's best, the best only when
    clearly better (by the plain or the Newey-West test), or the best by return (the
    oracle)."""
    b = row["best"][-1]
    if rule == "clear":
        return b if clearly_better(row["blocks"][b], row["blocks"][0], alpha) else 0
    if rule == "hac":
        return b if hac_better(row["blocks"][b], row["blocks"][0], alpha) else 0
    return {"start": 0, "best": b, "oracle": int(np.argmax(row["returns"]))}[rule]


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} (valid: an integer >= 1)")
    return value


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", nargs="+", default=["walker:walk", "walker:stand", "walker:run",
                                                  "walker:flip"])  # fmt: skip
    p.add_argument("--seeds", type=_positive, default=5)
    p.add_argument("--budget", type=_positive, default=5, help="reward-free episodes")
    p.add_argument("--table-only", action="store_true")
    p.add_argument("--page", type=Path, help="also write the table to this file")
    args = p.parse_args()
    if not args.table_only:
        run(args.tasks, args.seeds, args.budget)
    text = table(args.budget)
    print(text)
    if args.page:
        write_page(
            args.page,
            "What adaptation keeps: the tables",
            ROWS,
            f"ER-FB's z from 4 of the planner's episodes per seed, adapted with {args.budget} "
            "reward-free episodes at nominal physics (B-distance criterion); every "
            "candidate evaluated on the 20 initial states of "
            "`benchmarks/external_nominal.py`. Per task: the mean over seeds of each "
            "rule's share (%) of the demonstrator's return; `clear: start kept`: the seeds "
            "on which `keep=\"clear\"` kept ER-FB's z. Per domain: each rule's return over "
            "the stored z's (the model given the task's reward).",
            text,
        )


if __name__ == "__main__":
    main()
