"""Imitating a planner: each imitation method's return at nominal physics as a fraction
of the demonstrator's, and at each family's two strongest levels, on the default models.

    python benchmarks/external_nominal.py [--methods fbil er fm goal] [--tasks walker:walk]

For every planner demonstrations file `runs/demos/mpc/DOMAIN_TASK.npz` (from
`docs/results/external/make_demos.sh`, i.e. `rbfm demos --expert mpc`), each method infers from 4 of
its episodes per seed (5 seeds) and its policy runs 20 episodes from the evaluation's
initial states (the same for every method: paired) at nominal physics and at the two
strongest levels of each of the domain's three families (`--strongest`). `stored` is the
model's own reward-inferred z, what the model returns given the task's reward: the limit
imitation is read against. Task vectors are kept in `runs/external_nominal/z/` and rows
(each naming its model's file) go to `runs/external_nominal/rows.csv` as each
(model, task, method, seed) ends, so a rerun resumes; the tables are printed and written to
docs/results/external/tables.md, and with `--table-only` each domain's figure of the
shares (`--figure-methods`) to docs/results/external/nominal-DOMAIN.png.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rbfm import EVAL_SEED
from rbfm.envs import DOMAINS, families, get_perturbation
from rbfm.evaluation import EnvSpec, RolloutEngine, fb_policy
from rbfm.evaluation.aggregate import iqm, stratified_iqm
from rbfm.evaluation.rollout import Policy
from rbfm.fb.checkpoint import load_checkpoint, resolve
from rbfm.inference import infer, load_demos
from rbfm.inference.adapt import AdaptConfig, adapt
from rbfm.inference.goal import GoalConfig, GoalPolicy, infer_sequences
from rbfm.methods import get_method
from rbfm.reporting.figures import save_figure

sys.path.insert(0, str(Path(__file__).parent))
from external_files import demonstrated, model_rows, read_rows

ROWS = Path("runs/external_nominal/rows.csv")
PAGE = Path("docs/results/external/tables.md")
CEILING = Path("docs/results/external/ceiling.csv")
# The external grid stages plan the same ceilings (same planner and cells) for their tasks.
GRID_CEILINGS = "docs/results/external-*/*/experts.csv"
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


def _z(model, demos, method: str, seed: int, key: str) -> tuple[torch.Tensor, float]:  # type: ignore[no-untyped-def]
    """A single-z method's task vector, kept in runs/external_nominal/z/."""
    path = ROWS.parent / "z" / f"{key}.pt"
    if path.exists():
        z, seconds = torch.load(path)
        return z, seconds
    # bf16: the grid's inference precision (a bfloat16 actor copy; evaluation in float32).
    extra: dict[str, Any] = {"bf16": True} if method in ("fbil", "rbfm-light", "rbfm-heavy") else {}
    result = infer(model, demos, method, seed=seed, **extra)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save((result.z, result.seconds), path)
    return result.z, result.seconds


def _policy(  # type: ignore[no-untyped-def]
    model, demos, method: str, seed: int, env: EnvSpec, key: str, stored: list[float]
) -> tuple[Policy, float]:
    """`goal`, a single-z method, METHOD+aK: its z adapted with K reward-free episodes
    at nominal physics (the adapt stage's settings: line search, B-distance criterion),
    or `stored`: the model's own reward-inferred z, what it returns given the reward."""
    if method == "stored":
        return fb_policy(model, torch.tensor(stored)), 0.0
    if method in ("goal", "goal-state"):  # goal-state: GoalConfig's state index
        index = "state" if method == "goal-state" else "time"
        goals = infer_sequences(model, demos, GoalConfig(index=index))
        return GoalPolicy(model, goals), goals.seconds
    base, _, budget = method.partition("+a")
    z, seconds = _z(model, demos, base, seed, f"{key}_{env.task}_{base}_{seed}")
    if budget:
        start = time.perf_counter()
        cfg = AdaptConfig(budget=int(budget), keep="best")  # as the stages: the best candidate
        z = adapt(model, demos, z, env, cfg, seed=seed).z
        seconds += time.perf_counter() - start
    return fb_policy(model, z), seconds


def cells(domain: str, strongest: bool) -> list[tuple[str, float | None]]:
    """Nominal, then (`strongest`) each family's two strongest levels."""
    shifted = [(f, lv) for f in families(domain) for lv in get_perturbation(domain, f).levels[-2:]]
    return [("none", None), *(shifted if strongest else [])]


def _done() -> set[tuple[str, str, str, str, int, str, str]]:
    """The (model, task, method, seed, cell) rows already written."""
    return {
        (r["model"], r["domain"], r["task"], r["method"], int(r["seed"]), r["family"],
         r["level"])
        for r in model_rows(ROWS)
    }  # fmt: skip


def run(methods: list[str], tasks: list[str], seeds: int, episodes: int, strongest: bool) -> None:
    if adapted := [m for m in methods if m.startswith("goal") and "+a" in m]:
        raise SystemExit(f"{adapted[0]}: goal sequences do not adapt (adapt takes one z)")
    ROWS.parent.mkdir(parents=True, exist_ok=True)
    done = _done()
    new = not ROWS.exists()
    with open(ROWS, "a", newline="") as f, RolloutEngine(0) as engine:
        writer = csv.DictWriter(f, COLUMNS)
        if new:
            writer.writeheader()
        for domain, task, path in demonstrated(tasks):
            demos = load_demos(path)
            model, meta = load_checkpoint(domain)
            # The default model by its file: a domain's default changes between versions.
            key = resolve(domain).name
            # Seed-major: whatever has ended is paired across the methods.
            for seed in range(seeds):
                for method in methods:
                    # An adapted z is adapted at nominal physics: it is evaluated there only.
                    todo = [
                        (fam, lv)
                        for fam, lv in cells(domain, strongest and "+a" not in method)
                        if (key, domain, task, method, seed, fam, "" if lv is None else str(lv))
                        not in done
                    ]
                    if not todo:
                        continue
                    start = time.perf_counter()
                    picked = demos.sample(4, seed)
                    policy, infer_seconds = _policy(
                        model, picked, method, seed, EnvSpec(domain, task), key,
                        meta["task_z"][task],
                    )  # fmt: skip
                    specs = [
                        EnvSpec(domain, task, None if fam == "none" else fam, lv)
                        for fam, lv in todo
                    ]
                    res = engine.run(
                        [s for s in specs for _ in range(episodes)], policy, seed=EVAL_SEED
                    )
                    means = res.returns.reshape(len(specs), episodes).mean(1)
                    for (fam, lv), mean in zip(todo, means, strict=True):
                        writer.writerow({
                            "domain": domain, "task": task, "model": key, "method": method,
                            "seed": seed, "family": fam, "level": "" if lv is None else lv,
                            "mean": f"{mean:.2f}",
                            "demonstrator": f"{picked.returns.mean():.2f}",
                            "seconds": f"{infer_seconds:.2f}",
                        })  # fmt: skip
                    f.flush()
                    took = time.perf_counter() - start
                    print(f"{domain}:{task} {method} seed {seed}: {len(todo)} cells, first "
                          f"{means[0]:.1f} ({took:.0f} s)", flush=True)  # fmt: skip


def _bootstrap_iqm(fractions: np.ndarray, reps: int = 2000) -> tuple[float, float, float]:
    """IQM of a (seeds, tasks) matrix with a stratified (per task) bootstrap 95% CI."""
    rng = np.random.default_rng(0)
    n, k = fractions.shape
    # Each task's seeds resampled on their own: the stratified bootstrap.
    picks = (rng.integers(0, n, (n, k)) for _ in range(reps))
    draws = [iqm(fractions[rows, np.arange(k)[None]].ravel()) for rows in picks]
    lo, hi = np.percentile(draws, [2.5, 97.5])
    return iqm(fractions.ravel()), float(lo), float(hi)


def _rows() -> list[dict[str, str]]:
    """The rows of each domain's current default model."""
    current = {resolve(d).name for d in DOMAINS}
    return [r for r in model_rows(ROWS) if r["model"] in current]


def table(methods: list[str]) -> str:
    rows = [r for r in _rows() if r["family"] == "none"]
    lines = [
        "| domain | task | demonstrator | " + " | ".join(methods) + " |",
        "| --- | --- | --- | " + " | ".join("---" for _ in methods) + " |",
    ]
    pooled: dict[str, dict[str, list[np.ndarray]]] = {}
    task_count: dict[str, int] = {}
    seed_count: dict[str, set[int]] = {}
    for item in TASKS:
        domain, task = item.split(":")
        sel = [r for r in rows if r["domain"] == domain and r["task"] == task]
        # Each method over the seeds it has ended (each seed: the same demonstrations and
        # initial states for every method); fewer than the task's most are marked.
        per = {m: sorted((r for r in sel if r["method"] == m), key=lambda r: int(r["seed"]))
               for m in methods}  # fmt: skip
        most = max(len(v) for v in per.values())
        if most == 0:
            continue
        demo = float(np.mean([float(r["demonstrator"]) for r in max(per.values(), key=len)]))
        cells = []
        for m in methods:
            if not per[m]:
                cells.append("-")
                continue
            means = np.array([float(r["mean"]) for r in per[m]])
            demos = np.array([float(r["demonstrator"]) for r in per[m]])
            few = "" if len(means) == most else f"; {_seeds(len(means))}"
            cells.append(f"{means.mean():.1f} ({100 * np.mean(means / demos):.0f}%{few})")
            pooled.setdefault(domain, {}).setdefault(m, []).append(means / demos)
        task_count[domain] = task_count.get(domain, 0) + 1
        seed_count.setdefault(domain, set()).add(most)
        lines.append(f"| {domain} | {task} | {demo:.1f} | " + " | ".join(cells) + " |")
    lines += ["", "| domain (tasks) | " + " | ".join(methods) + " |"]
    lines.append("| --- | " + " | ".join("---" for _ in methods) + " |")
    for domain, per_method in pooled.items():
        cells = []
        for m in methods:
            cols = per_method.get(m, [])
            # Pooled only over the same tasks and seeds as the others: else not comparable.
            if len(cols) != task_count[domain] or len({len(c) for c in cols}) > 1:
                cells.append("-")
                continue
            cells.append(_pooled_cell(100 * np.stack(cols, 1)))
        seeds = "/".join(str(n) for n in sorted(seed_count[domain]))
        lines.append(f"| {domain} ({task_count[domain]} tasks, {seeds} seeds) | "
                     + " | ".join(cells) + " |")  # fmt: skip
    # Every task of every domain, for the methods that ran on all of them with one seed count.
    total = sum(task_count.values())
    cells = []
    for m in methods:
        cols = [c for per_method in pooled.values() for c in per_method.get(m, [])]
        if len(cols) != total or len({len(c) for c in cols}) > 1:
            cells.append("-")
            continue
        cells.append(_pooled_cell(100 * np.stack(cols, 1)))
    lines.append(f"| all ({total} tasks) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _seeds(n: int) -> str:
    return "1 seed" if n == 1 else f"{n} seeds"


def _pooled_cell(shares: np.ndarray) -> str:
    """The IQM of (seeds, tasks) shares with its CI; one seed has no resampling to give one."""
    mid, lo, hi = _bootstrap_iqm(shares)
    return f"{mid:.1f} (1 seed)" if len(shares) == 1 else f"{mid:.1f} [{lo:.1f}, {hi:.1f}]"


def stored_returns() -> dict[tuple[str, str], float]:
    """(domain, task) -> the default model's stored z's mean return at nominal physics."""
    return {
        (r["domain"], r["task"]): float(r["mean"])
        for r in _rows()
        if r["family"] == "none" and r["method"] == "stored"
    }


def limit_table(methods: list[str]) -> str:
    """Each method against the model's own limit: per domain, the IQM over (task, seed) of
    its seed's mean return over the stored z's mean return on the task (`stored`, one seed:
    the reward-inferred z is one z), with its stratified-bootstrap CI."""
    rows = [r for r in _rows() if r["family"] == "none"]
    stored = stored_returns()
    lines = [
        "| domain (tasks) | " + " | ".join(methods) + " |",
        "| --- | " + " | ".join("---" for _ in methods) + " |",
    ]
    rows.sort(key=lambda r: int(r["seed"]))
    for domain in dict.fromkeys(i.split(":")[0] for i in TASKS):
        tasks = [t for d, t in stored if d == domain]
        cells = []
        for m in methods:
            cols = [
                [float(r["mean"]) / stored[domain, t] for r in rows
                 if (r["domain"], r["task"], r["method"]) == (domain, t, m)]
                for t in tasks
            ]  # fmt: skip
            if not tasks or len({len(c) for c in cols}) != 1 or not cols[0]:
                cells.append("-")
                continue
            mid, lo, hi = _bootstrap_iqm(np.array(cols).T)
            cells.append(f"{mid:.2f}x [{lo:.2f}, {hi:.2f}]")
        lines.append(f"| {domain} ({len(tasks)} tasks) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def figure(domain: str, methods: list[str], seeds: int, episodes: int, page: Path) -> Path | None:
    """The domain's shares per task and method: a bar at the mean over seeds, a dot per
    seed (5 seeds: the dots say more than an interval would), the demonstrator at 100%."""
    from matplotlib.figure import Figure

    shares: dict[tuple[str, str], list[float]] = {}
    for r in _rows():
        if r["domain"] == domain and r["family"] == "none" and r["method"] in methods:
            share = 100 * float(r["mean"]) / float(r["demonstrator"])
            shares.setdefault((r["task"], r["method"]), []).append(share)
    tasks = [t for d, t in (i.split(":") for i in TASKS) if d == domain]
    tasks = [t for t in tasks if any((t, m) in shares for m in methods)]
    if not tasks:
        return None
    fig = Figure(figsize=(1.2 + 1.5 * len(tasks), 3.8), dpi=110, layout="constrained")
    ax = fig.subplots()
    width = 0.8 / len(methods)
    for j, m in enumerate(methods):
        base, _, budget = m.partition("+a")
        info = get_method(base.removesuffix("-state"))
        colour = "C8" if base == "goal-state" else info.colour
        label: str | None = info.display + (" by state" if base == "goal-state" else "")
        label = f"{label} + {budget} reward-free episodes" if budget else label
        for i, t in enumerate(tasks):
            if (t, m) not in shares:
                continue
            x = i - 0.4 + width * (j + 0.5)
            vals = np.array(shares[t, m])
            ax.bar(x, vals.mean(), width * 0.9, color=colour, alpha=0.45 if budget else 0.85,
                   hatch="//" if budget else None, edgecolor=colour, label=label)  # fmt: skip
            ax.plot(np.full(len(vals), x), vals, ".", color="k", ms=3)
            label = None  # one legend entry per method
    ax.axhline(100, color="k", lw=0.8, ls="--", label="demonstrator (the planner)")
    ax.set_xticks(range(len(tasks)), tasks)
    ax.set_ylabel("share of the demonstrator's return (%)")
    top = max(max(v) for v in shares.values())
    ax.set_ylim(0, max(115.0, 1.05 * top))  # no share clipped
    what = f"{seeds} seeds x {episodes} episodes; bar: mean, dot: a seed"
    ax.set_title(f"{domain}: imitating the planner at nominal physics ({what})", fontsize=9)
    fig.legend(fontsize=7, loc="outside lower center", ncols=3)  # below: no bar hidden
    return save_figure(fig, page.parent / f"nominal-{domain}.png")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--methods", nargs="+", default=["fbil", "er", "fm", "goal"])
    p.add_argument("--tasks", nargs="+", default=TASKS)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--episodes", type=int, default=20)
    p.add_argument("--table-only", action="store_true")
    p.add_argument("--figure-methods", nargs="+", default=["fbil", "er", "goal", "er+a5"])
    # Off by default: at 20 episodes a cell the six shifted cells cost 6x the nominal one.
    p.add_argument("--strongest", action="store_true", help="also each family's two strongest")
    p.add_argument("--page", type=Path, default=PAGE, help="--table-only: the tables' file")
    args = p.parse_args()
    if not args.table_only:
        run(args.methods, args.tasks, args.seeds, args.episodes, args.strongest)
    text = table(args.methods)
    if "stored" in args.methods:
        text += (
            "\n\nAgainst the model's own limit: per domain, the IQM over tasks and seeds of "
            "each method's return over the stored z's on the task (stratified-bootstrap 95% "
            "CI).\n\n" + limit_table([m for m in args.methods if m != "stored"])
        )
    print(text)
    if not args.table_only:
        return
    single = [m for m in args.methods if "+a" not in m]
    shifted = shift_table(single)
    strongest = [m for m in single if m in ("fbil", "er", "goal")]
    pooled, as_shares = shift_pooled(strongest), shift_pooled(strongest, shares=True)
    print(shifted + "\n\n" + pooled + "\n\n" + as_shares)
    for domain in dict.fromkeys(i.split(":")[0] for i in TASKS):
        path = figure(domain, args.figure_methods, args.seeds, args.episodes, args.page)
        if path is not None:
            print(f"wrote {path} ({path.stat().st_size // 1024} KB)")
    shifted_page = _shifted_page(shifted, pooled, as_shares)
    args.page.parent.mkdir(parents=True, exist_ok=True)
    args.page.write_text(
        "# Imitating a planner: the tables\n\n"
        f"Made by `python benchmarks/external_nominal.py {' '.join(sys.argv[1:])}` from "
        "`runs/external_nominal/rows.csv`.\n\n## At nominal physics\n\n"
        "Per task: the mean over seeds of each method's mean return over 20 episodes "
        "(in brackets its share of the demonstrator's return on the same seed's 4 "
        "demonstrations); per domain: the IQM of those per-seed shares (%) over the "
        "domain's tasks, stratified-bootstrap 95% CI. `METHOD+aK`: its z adapted with K "
        "reward-free episodes at nominal physics.\n\n" + text + "\n" + shifted_page
    )


def _shifted_page(shifted: str, pooled: str, as_shares: str) -> str:
    """The page's part at the strongest levels: nothing where no row was measured there."""
    if not any(r["family"] != "none" for r in _rows()):
        return ""
    return (
        "\n## At each family's two strongest levels\n\n"
        "Per task: the ceiling (the planner run inside the perturbed simulator, "
        "`benchmarks/external_ceiling.py`, 2 episodes per cell) and each method's return, "
        "both averaged over the six cells (three families, two levels); in brackets the "
        "method's share of the ceiling.\n\n" + shifted + "\n\n"
        "Per domain: each method's IQM of per-seed mean returns over the (task, family, "
        "level) combinations of the tasks every method ran at these levels, with "
        "rliable's stratified-bootstrap 95% CI, and its ratio to FB-IL's IQM (`*`: the "
        "CIs are disjoint).\n\n" + pooled + "\n\n"
        "The same, each return as a share (%) of the demonstrator's nominal return on the "
        "seed's demonstrations: raw returns pool each task at its own scale, so the IQM's "
        "trimmed quarters can be whole tasks.\n\n" + as_shares + "\n"
    )


def shift_pooled(methods: list[str], shares: bool = False) -> str:
    """Per domain, each method's IQM at the strongest cells over its tasks' (task, family,
    level) combinations (rliable's stratified bootstrap over seeds) and its ratio to
    FB-IL's; only tasks and seeds every method has, so the methods are paired. With
    `shares`, each return as a share (%) of the demonstrator's nominal return on the same
    seed's demonstrations, so tasks of different scales pool as at nominal (raw returns
    pool a task's cells at its own scale: the IQM's trimmed quarters are whole tasks)."""
    rows = [r for r in _rows() if r["family"] != "none" and r["method"] in methods]
    lines = [
        "| domain (tasks) | " + " | ".join(methods) + " |",
        "| --- | " + " | ".join("---" for _ in methods) + " |",
    ]
    for domain in dict.fromkeys(i.split(":")[0] for i in TASKS):
        mine = [r for r in rows if r["domain"] == domain]
        per: dict[tuple[str, str, str, str, int], float] = {
            (r["method"], r["task"], r["family"], r["level"], int(r["seed"])): float(r["mean"])
            * (100 / float(r["demonstrator"]) if shares else 1.0)
            for r in mine
        }
        combos = sorted({k[1:4] for k in per})
        seeds = sorted({k[4] for k in per})
        complete = {c for c in combos if all((m, *c, s) in per for m in methods for s in seeds)}
        tasks = sorted({c[0] for c in combos} - {c[0] for c in set(combos) - complete})
        if not tasks:
            continue
        combos = [c for c in combos if c[0] in tasks]
        scores = {m: np.array([[per[(m, *c, s)] for c in combos] for s in seeds]) for m in methods}
        est = stratified_iqm(scores)
        cells = []
        for m in methods:
            mid, lo, hi = est[m]
            ratio = ""
            if "fbil" in est and m != "fbil":
                base = est["fbil"]
                apart = "*" if lo > base[2] or hi < base[1] else ""
                ratio = f" ({mid / base[0]:.2f}x{apart})"
            cells.append(f"{mid:.1f} [{lo:.1f}, {hi:.1f}]{ratio}")
        what = f"{', '.join(tasks)}; {len(seeds)} seeds"
        lines.append(f"| {domain} ({what}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def read_ceilings() -> dict[tuple[str, str], list[float]]:
    """Per (domain, task), the planner's return at each strongest cell: this benchmark's
    ceiling.csv, and for the tasks it lacks (or holds only some cells of), the default
    model's cells of a grid stage."""
    ceilings: dict[tuple[str, str], list[float]] = {}
    for r in read_rows(CEILING):
        ceilings.setdefault((r["domain"], r["task"]), []).append(float(r["mean"]))
    # A task counts as planned here only with all its strongest cells (nominal excluded).
    ceilings = {k: v for k, v in ceilings.items() if len(v) == len(cells(k[0], True)) - 1}
    planned = set(ceilings)
    for path in sorted(Path().glob(GRID_CEILINGS)):
        with open(path) as f:
            rows = [r for r in csv.DictReader(f) if r["dataset"] == "rnd" and r["expert"] == "mpc"]
        for r in rows:
            key = (r["domain"], r["task"])
            if key not in planned and (r["family"], float(r["level"])) in cells(r["domain"], True):
                ceilings.setdefault(key, []).append(float(r["mean"]))
    return ceilings


def shift_table(methods: list[str]) -> str:
    """Per task, the ceiling and each method's return over the six strongest cells (the
    methods run at them: no empty column)."""
    rows = [r for r in _rows() if r["family"] != "none"]
    methods = [m for m in methods if any(r["method"] == m for r in rows)]
    ceilings = read_ceilings()
    lines = [
        "| domain | task | ceiling | " + " | ".join(methods) + " |",
        "| --- | --- | --- | " + " | ".join("---" for _ in methods) + " |",
    ]
    for item in TASKS:
        domain, task = item.split(":")
        sel = [r for r in rows if r["domain"] == domain and r["task"] == task]
        present = [m for m in methods if any(r["method"] == m for r in sel)]
        if not present:
            continue
        seeds = set.intersection(*({int(r["seed"]) for r in sel if r["method"] == m}
                                   for m in present))  # fmt: skip
        cells_ = ceilings.get((domain, task), [])
        ceiling = float(np.mean(cells_)) if len(cells_) == 6 else None
        out = []
        for m in methods:
            vals = [float(r["mean"]) for r in sel if r["method"] == m and int(r["seed"]) in seeds]
            if m not in present or not vals:
                out.append("-")
                continue
            mean = float(np.mean(vals))
            share = "" if ceiling is None else f" ({100 * mean / ceiling:.0f}%)"
            out.append(f"{mean:.1f}{share}")
        shown = "-" if ceiling is None else f"{ceiling:.1f}"
        lines.append(
            f"| {domain} | {task} ({len(seeds)} seeds) | {shown} | " + " | ".join(out) + " |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
