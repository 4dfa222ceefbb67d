"""Reward-free adaptation with a larger budget: the cross-entropy method on the B-distance.

    python benchmarks/adapt_cem.py --tasks cheetah:run walker:walk --seeds 3
    python benchmarks/adapt_cem.py --table
    python benchmarks/adapt_cem.py --criterion states --tasks walker:walk --seeds 5

On the stored z (the model given the task's reward), rollouts are closer to the planner's
demonstrations in B's space than ER-FB's own on every seed (`reward_free_signals.py`), but
the line search of `rbfm.adapt` moves along a direction that points away from it. This
searches the sphere instead: `rbfm.adapt`'s `search="cem"` at its defaults, fixed before
any run (`rbfm.inference.adapt`): from ER-FB's z (4 of the planner's episodes per seed, as
`external_nominal.py` draws), 6 generations of 16 candidates, each one reward-free
episode at nominal physics from initial states of its own; the 4 with the lowest
B-distance give the next mean. The answer (the elites' mean) is evaluated on the 20
evaluation episodes after 32, 64 and 96 episodes; `distance` is the lowest of the
generation that ended there. No reward is read but the evaluation's. Rows go to
runs/adapt_cem/rows.csv (columns: `HEADER`). `--criterion states` runs the same search
choosing its elites by the mean observation's distance instead (`rbfm.inference.adapt`),
into rows-states.csv; its `distance` is that criterion's. `--compare` prints the two
side by side on the (task, seed)s both ran.
"""

from __future__ import annotations

import argparse
import csv
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from rbfm import EVAL_SEED
from rbfm.evaluation import EnvSpec, RolloutEngine, fb_policy
from rbfm.evaluation.aggregate import stratified_iqm
from rbfm.fb.checkpoint import load_checkpoint, resolve
from rbfm.fb.model import FBModel
from rbfm.fb.networks import project
from rbfm.inference import load_demos
from rbfm.inference.adapt import AdaptConfig, adapt
from rbfm.inference.expert_demos import warm_start

sys.path.insert(0, str(Path(__file__).parent))
from external_files import appending, demonstrated, read_rows, start, write_page

ROWS = Path("runs/adapt_cem/rows.csv")
HEADER = ["domain", "task", "model", "seed", "episodes", "return", "share", "stored_return",
          "cosine_stored", "distance"]  # fmt: skip
CONFIG = AdaptConfig(budget=96, search="cem")  # 6 generations of 16, elites 4, decay 0.8
POPULATION = CONFIG.population
CRITERIA = ("demos", "states")
EVALUATED = (32, 64, 96)  # episodes after which the answer is evaluated
_RATIO = "{:.2f}x [{:.2f}, {:.2f}]"  # return over the stored z's, IQM [95% CI]
_SHARE = "{:.1f} [{:.1f}, {:.1f}]%"  # share of the planner's return


def evaluate(engine: RolloutEngine, model: FBModel, spec: EnvSpec, z: torch.Tensor) -> float:
    """Mean return of pi_z over the 20 evaluation episodes."""
    return float(engine.run(spec, fb_policy(model, z), 20, seed=EVAL_SEED).returns.mean())


def rows_file(criterion: str) -> Path:
    return ROWS if criterion == "demos" else ROWS.with_name(f"rows-{criterion}.csv")


def _complete(rows: list[dict[str, str]], budgets: list[int]) -> tuple[list[str], list[int]]:
    """The tasks of `rows` with a (task, seed) at every budget, and the seeds all of them
    share: a run under way has the others in part."""
    have = {(r["task"], int(r["seed"]), int(r["episodes"])) for r in rows}
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    done = {t: {s for (u, s, _) in have if u == t and all((t, s, b) in have for b in budgets)}
            for t in tasks}  # fmt: skip
    tasks = [t for t in tasks if done[t]]
    seeds = sorted(set.intersection(*(done[t] for t in tasks))) if tasks else []
    return tasks, seeds


def _iqm_row(label: str, value: dict[tuple[str, int, int], float], tasks: list[str],
             seeds: list[int], budgets: list[int], fmt: str) -> str:  # fmt: skip
    """A table row: per budget, the IQM over (task, seed) of `value` with its stratified
    bootstrap 95% CI (tasks are the strata)."""
    iqm = stratified_iqm({str(b): np.array([[value[t, s, b] for t in tasks] for s in seeds])
                          for b in budgets})  # fmt: skip
    cells = [fmt.format(*iqm[str(b)]) for b in budgets]
    return f"| {label} ({len(tasks)}, {len(seeds)}) | " + " | ".join(cells) + " |"


def table(path: Path) -> str:
    """Per domain, then over every task measured, IQM over (task, seed) of the return over
    the stored z's at each budget; over every task, the share of the planner's return too
    (the measure `rbfm.imitate`'s default is chosen by); then per task, the mean share of
    the planner's return."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    budgets = sorted({int(r["episodes"]) for r in rows})
    head = ["ER-FB (offline)" if b == 0 else f"CEM, {b} episodes" for b in budgets]
    lines = ["| domain (tasks, seeds) | " + " | ".join(head) + " |",
             "| --- | " + " | ".join("---" for _ in budgets) + " |"]  # fmt: skip
    # Per (domain, task, seed, budget), the last row counts (a seed stopped part-way ran again).
    over = {(r["domain"], r["task"], int(r["seed"]), int(r["episodes"])):
            float(r["return"]) / float(r["stored_return"]) for r in rows}  # fmt: skip
    share = {(r["domain"], r["task"], int(r["seed"]), int(r["episodes"])): float(r["share"])
             for r in rows}  # fmt: skip
    for domain in dict.fromkeys(r["domain"] for r in rows):
        tasks, seeds = _complete([r for r in rows if r["domain"] == domain], budgets)
        if seeds:
            value = {(t, s, b): over[domain, t, s, b] for t in tasks for s in seeds
                     for b in budgets}  # fmt: skip
            lines.append(_iqm_row(domain, value, tasks, seeds, budgets, _RATIO))
    # Every task measured: a task is (domain, task), named as one string for _complete.
    named = [r | {"task": f"{r['domain']} {r['task']}"} for r in rows]
    tasks, seeds = _complete(named, budgets)
    if len({t.split()[0] for t in tasks}) > 1 and seeds:
        key = {t: tuple(t.split()) for t in tasks}
        for label, source, fmt in (("all", over, _RATIO), ("all, share of the planner", share,
                                                           _SHARE)):  # fmt: skip
            value = {(t, s, b): source[(*key[t], s, b)] for t in tasks for s in seeds
                     for b in budgets}  # fmt: skip
            lines.append(_iqm_row(label, value, tasks, seeds, budgets, fmt))
    # Per task: mean over seeds of the share of the planner's return, and the stored z's.
    lines += ["", "| task | seeds | " + " | ".join(
        "ER-FB" if b == 0 else f"CEM, {b}" for b in budgets) + " | stored z |",
        "| --- | --- | " + " | ".join("---" for _ in budgets) + " | --- |"]  # fmt: skip
    for domain, task in dict.fromkeys((r["domain"], r["task"]) for r in rows):
        sel = [r for r in rows if (r["domain"], r["task"]) == (domain, task)]
        per = {b: [v for (d, t, _, e), v in share.items() if (d, t, e) == (domain, task, b)]
               for b in budgets}  # fmt: skip
        # The stored z's share of each seed's demonstrations: its return over theirs.
        ratio = list({r["seed"]: float(r["stored_return"]) / float(r["return"]) * float(r["share"])
                      for r in sel if int(r["episodes"]) == 0}.values())  # fmt: skip
        cells = [f"{np.mean(per[b]):.1f}%" if per[b] else "-" for b in budgets]
        lines.append(f"| {domain} {task} | {len(per[0])} | " + " | ".join(cells)
                     + f" | {np.mean(ratio):.1f}% |")  # fmt: skip
    return "\n".join(lines)


def compare() -> str:
    """Each criterion's answer on the (task, seed)s both ran to the last budget: per domain,
    IQM over them of return over the stored z's at each budget (stratified-bootstrap 95%
    CI), and on how many the states criterion's answer returns less at the last."""
    ratios: dict[str, dict[tuple[str, str, int, int], float]] = {}
    for c in CRITERIA:
        ratios[c] = {(r["domain"], r["task"], int(r["seed"]), int(r["episodes"])):
                     float(r["return"]) / float(r["stored_return"])
                     for r in read_rows(rows_file(c))}  # fmt: skip
    both = sorted({k[:3] for k in ratios["demos"] if all(
        (*k[:3], b) in ratios[c] for c in CRITERIA for b in (0, *EVALUATED))})  # fmt: skip
    last = EVALUATED[-1]
    head = ["ER-FB"] + [f"{c}, {b}" for b in EVALUATED for c in CRITERIA]
    head.append(f"(task, seed)s where states returns less at {last}")
    lines = ["| domain: tasks (seeds) | " + " | ".join(head) + " |",
             "| --- | " + " | ".join("---" for _ in head) + " |"]  # fmt: skip
    for domain in dict.fromkeys(k[0] for k in both):
        tasks = list(dict.fromkeys(k[1] for k in both if k[0] == domain))
        seeds = sorted(set.intersection(*({k[2] for k in both if k[:2] == (domain, t)}
                                          for t in tasks)))  # fmt: skip
        cols = [("demos", 0)] + [(c, b) for b in EVALUATED for c in CRITERIA]
        iqm = stratified_iqm({f"{c}{b}": np.array([[ratios[c][domain, t, s, b] for t in tasks]
                                                  for s in seeds]) for c, b in cols})  # fmt: skip
        cells = [f"{iqm[f'{c}{b}'][0]:.2f}x [{iqm[f'{c}{b}'][1]:.2f}, {iqm[f'{c}{b}'][2]:.2f}]"
                 for c, b in cols]  # fmt: skip
        pairs = [(t, s) for t in tasks for s in seeds]
        less = sum(ratios["states"][domain, t, s, last] < ratios["demos"][domain, t, s, last]
                   for t, s in pairs)  # fmt: skip
        cells.append(f"{less} of {len(pairs)}")
        lines.append(f"| {domain}: {', '.join(tasks)} ({len(seeds)}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", nargs="+", default=["cheetah:run"])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--table", action="store_true", help="print the table of the rows so far")
    p.add_argument("--page", type=Path, help="with --table: also write it to this file")
    p.add_argument("--criterion", choices=CRITERIA, default="demos", help="what elites minimise")
    p.add_argument("--compare", action="store_true", help="print the criteria side by side")
    args = p.parse_args()
    if args.compare:
        print(compare())
        return
    path = rows_file(args.criterion)
    if args.page and not args.table:
        p.error("--page: only with --table")
    if args.table:
        if not path.exists():
            p.error(f"--table: no rows yet ({path})")
        text = table(path)
        print(text)
        if args.page:
            write_page(args.page, "Reward-free adaptation by the cross-entropy method", path,
                       "Per domain: IQM over (task, seed) of the return over the stored z's, "
                       "with rliable's stratified-bootstrap 95% CI; 20 evaluation episodes "
                       "per (task, seed), nominal physics.", text)  # fmt: skip
        return
    start(p, args)
    # A (model, task, seed) whose rows are all in the table is not run again: a stopped or
    # extended run (a larger --seeds) computes only what it lacks.
    done = {(r["model"], r["task"], int(r["seed"])) for r in read_rows(path)
            if int(r["episodes"]) == EVALUATED[-1]}  # fmt: skip
    cfg = replace(CONFIG, criterion=args.criterion)
    with appending(path, HEADER) as add, RolloutEngine(0) as engine:
        for domain, task, demos_file in demonstrated(args.tasks):
            name = resolve(domain).name
            seeds = [s for s in range(args.seeds) if (name, task, s) not in done]
            if not seeds:
                continue
            model, meta = load_checkpoint(domain, domain)
            spec, demos = EnvSpec(domain, task), load_demos(demos_file)
            stored = project(torch.tensor(meta["task_z"][task]), model.radius)
            stored_return = evaluate(engine, model, spec, stored)
            for seed in seeds:
                picked = demos.sample(4, seed)
                z0 = warm_start(model, picked)
                res = adapt(model, picked, z0, spec, cfg, seed=seed, engine=engine)
                score = res.observed if args.criterion == "states" else res.distances
                answers = [(0, z0, float("nan"))] + [
                    (e, res.z_after(e), min(score[e - POPULATION : e])) for e in EVALUATED
                ]
                for episodes, z, dmin in answers:
                    ret = evaluate(engine, model, spec, z)
                    cos = float(torch.cosine_similarity(z, stored, 0))
                    row = [domain, task, name, seed, episodes, f"{ret:.1f}",
                           f"{100 * ret / picked.returns.mean():.1f}", f"{stored_return:.1f}",
                           f"{cos:.2f}", f"{dmin:.3f}"]  # fmt: skip
                    add(row)
                    print(dict(zip(HEADER, row, strict=True)), flush=True)


if __name__ == "__main__":
    main()
