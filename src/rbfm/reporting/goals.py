"""Ratios of pooled IQMs against one reference configuration, by range of levels: what
randomised pretraining and adaptation buy, read as the goals of `docs/results.md` state
them (a candidate at >= 1.15x the reference at each family's two strongest levels, CIs
disjoint, and >= 0.95x at nominal).

    python -m rbfm.reporting.goals docs/results/shift-fbil-cheetah/results.csv \
        --reference rnd-v1:fbil

A configuration is (data label, results label), e.g. `rnd-rand:fbil` or
`rnd-v1:fbil (adapt-k5)`; each pools its per-seed mean returns over the tasks,
families and levels of a range, as the stage figures' IQMs do (stratified bootstrap).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import numpy as np

from rbfm.envs import get_perturbation
from rbfm.errors import ConfigError
from rbfm.evaluation.stats import stratified_iqm
from rbfm.experiments.table import ResultRow, read_table
from rbfm.reporting.report import markdown
from rbfm.reporting.stats import same_level

# The ranges a reader asks about. The training range of the dynamics-diverse models
# runs to the 4th of 6 levels (rbfm.envs.dynamics): levels 2-4 lie inside it, 5-6 beyond.
RANGES = {
    "nominal": (0,),
    "inside the training range (levels 2-4)": (1, 2, 3),
    "two strongest (levels 5-6)": (4, 5),
}


def _index(r: ResultRow) -> int | None:
    """The position of a row's level in its family's six-level sweep."""
    if r.family == "none" or r.level is None:
        return 0
    sweep = get_perturbation(r.domain, r.family).levels
    found = [i for i, x in enumerate(sweep) if same_level(r.level, x)]
    return found[0] if found else None


def configs(rows: Sequence[ResultRow]) -> list[str]:
    return list(dict.fromkeys(f"{r.dataset}:{r.label}" for r in rows))


def scores(rows: Sequence[ResultRow], indices: tuple[int, ...]) -> dict[str, np.ndarray]:
    """Per configuration, its (seeds x combinations) matrix over the levels at `indices`;
    configurations that miss a combination another has are left out."""
    cells: dict[str, dict[tuple[str, str, float | None], dict[int, float]]] = {}
    for r in rows:
        if _index(r) in indices:
            key = (r.task, r.family, r.level)
            cells.setdefault(f"{r.dataset}:{r.label}", {}).setdefault(key, {})[r.seed] = r.mean
    combos = sorted({k for c in cells.values() for k in c}, key=str)
    out = {}
    for name, per in cells.items():
        if all(k in per for k in combos) and len({len(per[k]) for k in combos}) == 1:
            out[name] = np.array([[per[k][s] for s in sorted(per[k])] for k in combos]).T
    return out


def goal_table(rows: Sequence[ResultRow], reference: str, reps: int = 2000) -> str:
    """Each configuration's IQM [95% CI] per range, and its ratio to `reference`'s
    (`*`: the two CIs are disjoint)."""
    if reference not in configs(rows):
        raise ConfigError(f"--reference: {reference!r} is not one of {configs(rows)}")
    body = []
    for name in configs(rows):
        line = [name]
        for indices in RANGES.values():
            found = stratified_iqm(scores(rows, indices), reps)
            if name not in found or reference not in found:
                line.append("-")
                continue
            (m, lo, hi), (rm, rlo, rhi) = found[name], found[reference]
            disjoint = "*" if hi < rlo or lo > rhi else ""
            line.append(f"{m:.1f} [{lo:.1f}, {hi:.1f}] ({m / rm:.2f}x{disjoint})")
        body.append(line)
    return markdown(["configuration", *RANGES], body)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m rbfm.reporting.goals", description=__doc__)
    parser.add_argument("results", help="a results.csv of `rbfm experiment`")
    parser.add_argument("--reference", required=True, help="DATASET:LABEL, e.g. rnd-v1:fbil")
    parser.add_argument("--expert", default=None, help="only the rows of this expert source")
    args = parser.parse_args(argv)
    rows = read_table(args.results)
    if args.expert is not None:
        rows = [r for r in rows if r.expert == args.expert]
    for domain in dict.fromkeys(r.domain for r in rows):
        mine = [r for r in rows if r.domain == domain]
        print(f"### {domain}, pooled over its tasks\n")
        print(goal_table(mine, args.reference) + "\n")
        # Pooling can cancel a gain on one task against a loss on another.
        for task in dict.fromkeys(r.task for r in mine):
            print(f"### {domain} {task}\n")
            print(goal_table([r for r in mine if r.task == task], args.reference) + "\n")


if __name__ == "__main__":
    main()
