"""Ratios of pooled IQMs against one reference configuration, by range of levels: what
randomised pretraining and adaptation buy, read as the goals of `docs/results.md` state
them (a candidate at >= 1.15x the reference at each family's two strongest levels, CIs
disjoint, and >= 0.95x at nominal).

    python -m rbfm.reporting.goals docs/results/shift-fbil-cheetah/results.csv \
        --reference rnd-v1:fbil --figure docs/results/shift-fbil-cheetah/goals.png

A configuration is (data label, results label), e.g. `rnd-rand:fbil` or
`rnd-v1:fbil (adapt-k5)`; each pools its per-seed mean returns over the tasks,
families and levels of a range, as the stage figures' IQMs do (stratified bootstrap).
Under each table of IQMs, a table of each configuration's paired gap to the reference:
the IQM of its per-seed differences over the same cells, with the same bootstrap.

Raw returns pool each task at its own scale, so where tasks' returns differ widely the
IQM's trimmed quarters are whole tasks. `--shares EXPERTS.csv ...` adds the pooled
tables once more with each return a share (%) of its demonstrations' mean return (the
experts.csv of the same runs), as a demonstrator from outside the model is read, and
once more with each return a share (%) of the expert's own return in the same cell (a
planner expert: the planner inside the shifted simulator, the ceiling) over the cells
where the expert was evaluated (nominal and each family's two strongest levels).
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import textwrap
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from rbfm.envs import get_perturbation
from rbfm.errors import ConfigError
from rbfm.evaluation.aggregate import stratified_iqm
from rbfm.experiments.table import CeilingRow, ResultRow, once, read_ceilings, read_table
from rbfm.reporting.figures import save_figure
from rbfm.reporting.plots import caption_width
from rbfm.reporting.report import markdown
from rbfm.reporting.stats import same_level

# The ranges a reader asks about. The training range of the dynamics-diverse models
# runs to the 4th of 6 levels (rbfm.envs.dynamics): levels 2-4 lie inside it, 5-6 beyond.
RANGES = {
    "nominal": (0,),
    "levels 2-4": (1, 2, 3),
    "two strongest (levels 5-6)": (4, 5),
}
# The data labels of the dynamics-diverse models (rbfm.experiments.spec: rnd-rand,
# rnd-rand-ctx and their -paper twins). Only a table with one of them has a training
# range to name; on nominal models alone (the adapt stages) levels 2-4 are just levels.
DIVERSE = re.compile(r"(^|-)rand(-|$)")
INSIDE = "inside the training range (levels 2-4)"
# The goals' thresholds, as ratios to the reference, in the ranges they are read at.
THRESHOLDS = {"nominal": 0.95, "two strongest (levels 5-6)": 1.15}

Estimate = tuple[float, float, float]  # IQM, CI low, CI high
PALETTE = ("C0", "C1", "C2", "C3", "C4", "C5", "C6", "C8", "C9")  # C7 is the reference's grey


def _index(r: ResultRow) -> int | None:
    """The position of a row's level in its family's six-level sweep."""
    if r.family == "none" or r.level is None:
        return 0
    sweep = get_perturbation(r.domain, r.family).levels
    found = [i for i, x in enumerate(sweep) if same_level(r.level, x)]
    return found[0] if found else None


def configs(rows: Sequence[ResultRow]) -> list[str]:
    return list(dict.fromkeys(f"{r.dataset}:{r.label}" for r in rows))


def range_names(names: Sequence[str]) -> dict[str, str]:
    """How each range reads beside these configurations: levels 2-4 are inside a
    training range only where a configuration was pretrained across dynamics."""
    diverse = any(DIVERSE.search(name.split(":")[0]) for name in names)
    return {t: INSIDE if diverse and t == "levels 2-4" else t for t in RANGES}


def groups(rows: Sequence[ResultRow]) -> dict[str, list[ResultRow]]:
    """The rows by domain and, where they hold several expert sources, by expert: two
    experts' demonstrations are two questions, never pooled."""
    several = several_experts(rows)
    out: dict[str, list[ResultRow]] = {}
    for r in rows:
        out.setdefault(f"{r.domain} ({r.expert})" if several else r.domain, []).append(r)
    return out


Combination = tuple[str, str, float | None]  # task, family, level
Cells = dict[str, dict[Combination, dict[int, float]]]


def _cells(rows: Sequence[ResultRow], indices: tuple[int, ...]) -> tuple[Cells, list[Combination]]:
    """Per configuration, per (task, family, level) at `indices`, each seed's mean return;
    and every combination any configuration has."""
    experts = sorted({r.expert for r in rows})
    if len(experts) > 1:
        raise ConfigError(f"rows of {len(experts)} experts ({', '.join(experts)}): pick one")
    cells: Cells = {}
    for r in rows:
        if _index(r) in indices:
            key = (r.task, r.family, r.level)
            cells.setdefault(f"{r.dataset}:{r.label}", {}).setdefault(key, {})[r.seed] = r.mean
    return cells, sorted({k for c in cells.values() for k in c}, key=str)


def scores(rows: Sequence[ResultRow], indices: tuple[int, ...]) -> dict[str, np.ndarray]:
    """Per configuration, its (seeds x combinations) matrix over the levels at `indices`;
    configurations that miss a combination another has are left out."""
    cells, combos = _cells(rows, indices)
    out = {}
    for name, per in cells.items():
        if all(k in per for k in combos) and len({len(per[k]) for k in combos}) == 1:
            out[name] = np.array([[per[k][s] for s in sorted(per[k])] for k in combos]).T
    return out


def _check_reference(rows: Sequence[ResultRow], reference: str) -> None:
    if reference not in configs(rows):
        raise ConfigError(f"reference: {reference!r} is not one of {configs(rows)}")


def estimates(
    rows: Sequence[ResultRow], reference: str, reps: int = 2000
) -> dict[str, dict[str, Estimate]]:
    """Per range, each configuration's IQM and 95% CI, pooled over the range's tasks,
    families and levels (stratified bootstrap with `reps` resamples)."""
    _check_reference(rows, reference)
    return {name: stratified_iqm(scores(rows, idx), reps) for name, idx in RANGES.items()}


def gaps(
    rows: Sequence[ResultRow], reference: str, reps: int = 2000
) -> dict[str, dict[str, Estimate]]:
    """Per range, each configuration's IQM of its paired differences to `reference` (seed
    by seed: a seed's configurations imitate the same demonstrations and are evaluated on
    the same initial states) over the range's tasks, families and levels, with the same
    stratified-bootstrap 95% CI. A configuration is left out of a range where its seeds
    differ from the reference's in some combination."""
    _check_reference(rows, reference)
    out: dict[str, dict[str, Estimate]] = {}
    for name, idx in RANGES.items():
        cells, combos = _cells(rows, idx)
        ref = cells.get(reference, {})
        diffs = {}
        if all(k in ref for k in combos) and len({len(ref[k]) for k in combos}) == 1:
            for config, per in cells.items():
                if config != reference and all(
                    k in per and per[k].keys() == ref[k].keys() for k in combos
                ):
                    diffs[config] = np.array(
                        [[per[k][s] - ref[k][s] for s in sorted(ref[k])] for k in combos]
                    ).T
        out[name] = stratified_iqm(diffs, reps) if diffs else {}
    return out


def _disjoint(a: Estimate, b: Estimate) -> bool:
    return a[2] < b[1] or a[1] > b[2]


def goal_table(rows: Sequence[ResultRow], reference: str, reps: int = 2000) -> str:
    """Each configuration's IQM [95% CI] per range, and its ratio to `reference`'s
    (`*`: the two CIs are disjoint)."""
    return _table(estimates(rows, reference, reps), configs(rows), reference)


def _table(found: dict[str, dict[str, Estimate]], names: list[str], reference: str) -> str:
    """One column per range of `found` (a table of fewer ranges names only its own)."""
    body = []
    for name in names:
        line = [name]
        for per in found.values():
            if name not in per or reference not in per:
                line.append("-")
                continue
            (m, lo, hi), ref = per[name], per[reference]
            star = "*" if _disjoint(per[name], ref) else ""
            line.append(f"{m:.1f} [{lo:.1f}, {hi:.1f}] ({m / ref[0]:.2f}x{star})")
        body.append(line)
    shown = range_names(names)
    return markdown(["configuration", *(shown[t] for t in found)], body)


def _gap_table(found: dict[str, dict[str, Estimate]], names: list[str], reference: str) -> str:
    """Each configuration's paired gap to `reference` per range of `found` (`*`: its CI
    excludes 0)."""
    body = []
    for name in names:
        if name == reference:
            continue
        line = [name]
        for per in found.values():
            if name not in per:
                line.append("-")
                continue
            m, lo, hi = per[name]
            star = "*" if lo > 0 or hi < 0 else ""
            line.append(f"{m:+.1f} [{lo:+.1f}, {hi:+.1f}]{star}")
        body.append(line)
    shown = range_names(names)
    return markdown([f"paired gap to {reference}", *(shown[t] for t in found)], body)


def _goal_panel(
    ax: Axes, per: dict[str, Estimate], names: list[str], reference: str, title: str
) -> None:
    """One range's panel: a bar per configuration, the reference and the threshold."""
    ref = per.get(reference)
    for i, name in enumerate(names):
        if name not in per:
            continue
        m, lo, hi = per[name]
        colour = "0.45" if name == reference else PALETTE[i % len(PALETTE)]
        ax.barh(i, hi - lo, left=lo, height=0.6, color=colour, alpha=0.75)
        ax.vlines(m, i - 0.3, i + 0.3, color="k", lw=2)
        if ref is not None and name != reference:
            star = "*" if _disjoint(per[name], ref) else ""
            ax.annotate(
                f" {m / ref[0]:.2f}x{star}",
                (hi, i),
                va="center",
                fontsize=7,
                annotation_clip=False,
                bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5, "alpha": 0.8},
            )
    right = max((hi for _, _, hi in per.values()), default=1.0)
    if ref is not None:
        ax.axvline(ref[0], color="0.3", lw=1)
        if title in THRESHOLDS:
            goal = THRESHOLDS[title] * ref[0]
            ax.axvline(goal, color="k", lw=1, ls="--")
            right = max(right, goal)
    # From zero, so that a bar's length reads as its ratio to the reference.
    ax.set_xlim(0.0, 1.2 * right)
    ax.set_ylim(len(names) - 0.5, -0.5)
    ax.tick_params(axis="x", labelsize=7)
    ax.grid(alpha=0.3, axis="x")
    ax.set_xlabel("IQM return (pooled over tasks and families)", fontsize=7)


def goal_figure(rows: Sequence[ResultRow], reference: str, reps: int = 2000) -> Figure:
    """Per domain (and expert, where the rows hold several), a row of one panel per range
    measured: each configuration's IQM (tick) and 95% CI (bar), the reference's IQM (solid
    line) and the goal's threshold where the range has one (dashed), with each
    configuration's ratio to the reference beside its bar."""
    found = {g: estimates(mine, reference, reps) for g, mine in groups(rows).items()}
    return _figure(found, configs(rows), reference, several_experts(rows))


def several_experts(rows: Sequence[ResultRow]) -> bool:
    return len({r.expert for r in rows}) > 1


def _figure(
    found: dict[str, dict[str, dict[str, Estimate]]],
    names: list[str],
    reference: str,
    by_expert: bool,
) -> Figure:
    domains = list(found)
    # A stage that measured some ranges only (the adaptation slices) draws those.
    titles = [t for t in RANGES if any(f[t] for f in found.values())]
    if not titles:
        raise ConfigError("no configuration has results in every combination of any range")
    fig = Figure(
        figsize=(3.5 * len(titles), 0.9 + (0.6 + 0.32 * len(names)) * len(domains)),
        dpi=110,
        layout="constrained",
    )
    axes = fig.subplots(len(domains), len(titles), squeeze=False)
    shown = range_names(names)
    for row, domain in enumerate(domains):
        for col, title in enumerate(titles):
            ax = axes[row, col]
            _goal_panel(ax, found[domain][title], names, reference, title)
            ax.set_yticks(range(len(names)), names if col == 0 else [""] * len(names), fontsize=7)
            # A group named with its expert is too long to share a line with the range.
            name = shown[title]
            ax.set_title(f"{domain}\n{name}" if by_expert else f"{domain}: {name}", fontsize=9)
    caption = (
        "Tick: IQM of the per-seed mean returns pooled over the range's tasks, families and "
        "levels; bar: its 95% stratified-bootstrap CI. Solid line: the reference "
        f"({reference}); dashed: the goal's threshold (0.95x the reference at nominal, 1.15x "
        "at the two strongest levels). Beside each bar its ratio to the reference "
        "(*: CIs disjoint)."
    )
    if len(titles) == len(RANGES) and INSIDE in shown.values():
        caption += " Levels 2-4 lie inside the diverse models' training range, 5-6 beyond it."
    fig.supxlabel(
        textwrap.fill(caption, width=caption_width(fig.get_figwidth())), fontsize=7, color="0.25"
    )
    return fig


def as_shares(rows: Sequence[ResultRow], ceilings: Sequence[CeilingRow]) -> list[ResultRow]:
    """Each row's mean return as a share (%) of its demonstrations' mean return (nominal,
    `demonstrations_mean` of the experts table), so that tasks of different scales pool
    on one scale; a row whose demonstrations have no positive return there is refused."""
    demo: dict[tuple[str, str, str, str], float] = {}
    for c in ceilings:
        key = (c.domain, c.dataset, c.task, c.expert)
        if demo.setdefault(key, c.demonstrations_mean) != c.demonstrations_mean:
            raise ConfigError(f"--shares: two demonstrations' returns for {'/'.join(key)}")
    out = []
    for r in rows:
        d = demo.get((r.domain, r.dataset, r.task, r.expert), float("nan"))
        if not d > 0:
            raise ConfigError(
                f"--shares: no positive demonstrations' return for {r.domain}/{r.dataset}/"
                f"{r.task} ({r.expert} expert) in the experts tables (valid: > 0)"
            )
        out.append(dataclasses.replace(r, mean=100 * r.mean / d, std=100 * r.std / d))
    return out


def as_ceiling_shares(rows: Sequence[ResultRow], ceilings: Sequence[CeilingRow]) -> list[ResultRow]:
    """The rows of the cells where their expert itself was evaluated, each mean return a
    share (%) of the expert's return there (a planner expert: the ceiling inside the
    shifted simulator); a cell whose expert returned nothing positive is refused."""
    at = {(c.domain, c.dataset, c.task, c.expert, c.family, c.level): c for c in ceilings}
    out = []
    for r in rows:
        c = at.get((r.domain, r.dataset, r.task, r.expert, r.family, r.level))
        if c is None:
            continue
        if not c.mean > 0:
            raise ConfigError(
                f"--shares: the {r.expert} expert returned {c.mean} at {r.domain}/{r.dataset}/"
                f"{r.task} {r.family} {r.level}: no share of it (valid: > 0)"
            )
        out.append(dataclasses.replace(r, mean=100 * r.mean / c.mean, std=100 * r.std / c.mean))
    return out


def _measured(found: dict[str, dict[str, Estimate]]) -> dict[str, dict[str, Estimate]]:
    """The ranges some configuration has results in."""
    return {t: per for t, per in found.items() if per}


def read_tables(paths: Sequence[str]) -> list[ResultRow]:
    """The rows of several results.csv (a stage's tasks run apart); a cell in two of them
    is refused, since pooling would count it twice."""
    tables = [(path, read_table(path)) for path in paths]
    once(tables)
    return [r for _, rows in tables for r in rows]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m rbfm.reporting.goals", description=__doc__)
    parser.add_argument(
        "results", nargs="+", help="results.csv of `rbfm experiment` (several: one stage's tasks)"
    )
    parser.add_argument("--reference", required=True, help="DATASET:LABEL, e.g. rnd-v1:fbil")
    parser.add_argument("--expert", default=None, help="only the rows of this expert source")
    parser.add_argument("--figure", default=None, help="also draw the pooled ranges as this PNG")
    parser.add_argument(
        "--shares", nargs="+", default=None, help="experts.csv: also pool as shares of the demos"
    )
    args = parser.parse_args(argv)
    rows = read_tables(args.results)
    if args.expert is not None:
        rows = [r for r in rows if r.expert == args.expert]
    # Refused before any bootstrap: a row without its demonstrations' return.
    shares = ceiling = None
    if args.shares is not None:
        experts = [c for path in args.shares for c in read_ceilings(path)]
        shares, ceiling = as_shares(rows, experts), as_ceiling_shares(rows, experts)
    split = groups(rows)
    found = {g: estimates(mine, args.reference) for g, mine in split.items()}
    if args.figure is not None:
        figure = _figure(found, configs(rows), args.reference, several_experts(rows))
        save_figure(figure, Path(args.figure))
    for group, mine in split.items():
        # Pooling can cancel a gain on one task (or family) against a loss on another.
        blocks = [(f"{group}, pooled over its tasks", mine)]
        for task in dict.fromkeys(r.task for r in mine):
            blocks.append((f"{group} {task}", [r for r in mine if r.task == task]))
        for family in dict.fromkeys(r.family for r in mine):
            these = [r for r in mine if r.family == family]
            blocks.append((f"{group} {family}, pooled over its tasks", these))
        for title, these in blocks:
            print(f"### {title}\n")
            if these is mine:
                print(_table(found[group], configs(mine), args.reference) + "\n")
            else:
                print(goal_table(these, args.reference) + "\n")
            # Seed by seed the configurations share demonstrations and initial states: the
            # paired gap is tighter than two intervals side by side.
            print(_gap_table(gaps(these, args.reference), configs(these), args.reference) + "\n")
    if shares is None or ceiling is None:
        return
    for group, mine in groups(shares).items():
        print(f"### {group}, pooled over its tasks as shares (%) of the demonstrations\n")
        print(goal_table(mine, args.reference) + "\n")
        print(_gap_table(gaps(mine, args.reference), configs(mine), args.reference) + "\n")
    for group, mine in groups(ceiling).items():
        print(f"### {group}, pooled over its tasks as shares (%) of the expert in each cell\n")
        measured = _measured(estimates(mine, args.reference))
        print(_table(measured, configs(mine), args.reference) + "\n")
        paired = {t: per for t, per in gaps(mine, args.reference).items() if t in measured}
        print(_gap_table(paired, configs(mine), args.reference) + "\n")


if __name__ == "__main__":
    main()
