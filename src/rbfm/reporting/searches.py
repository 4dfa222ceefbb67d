"""What the adaptation searches did, read from the adaptations.csv `rbfm experiment` writes
(`docs/experiments.md`): per task, start and search, how its distance to the
demonstrations in B's space changed, how often it left its start, how well each
criterion ranked its own episodes' returns, and what it cost. These are the search
statistics the stage pages of `docs/results/` quote beside the evaluated returns.

    python -m rbfm.reporting.searches docs/results/adapt-cheetah/*/adaptations.csv

Each row reads a search after its whole budget (the file's `episodes`; a stage's smaller
budgets are prefixes of the same search and keep their start more often). A search
"ends on a new z" when the distance of its answer differs from its start's: a kept
start has the start's distance to the last bit, and two task vectors sharing it to the
last bit are not met in practice.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import pandas as pd

from rbfm.errors import ConfigError
from rbfm.experiments.table import ADAPTATION_COLUMNS, once, read_adaptations
from rbfm.reporting.report import markdown

KEYS = ("domain", "dataset", "task", "method", "adaptation")
HEADER = (
    "domain",
    "data",
    "task",
    "start",
    "search",
    "searches",
    "episodes",
    "s per search",
    "distance, start -> answer",
    "new z (whole budget)",
    "Spearman, distance",
    "Spearman, implied",
    "own return, start -> answer",
)


def read_searches(paths: Sequence[str | Path]) -> pd.DataFrame:
    """The rows of several adaptations.csv (`rbfm.experiments.table.read_adaptations`:
    every column there and numeric, a file of the header alone adding none), one frame;
    a search (cell) in two files is refused."""
    if isinstance(paths, str | Path):
        raise ConfigError(f"adaptations: a list of files, not the single {str(paths)!r}")
    if not paths:
        raise ConfigError("adaptations: no file given")
    for path in paths:
        if not Path(path).is_file():
            raise ConfigError(f"{path}: no such file (an adaptations.csv of `rbfm experiment`)")
    tables = [(str(p), read_adaptations(p)) for p in paths]
    once(tables)
    rows = [asdict(r) for _, table in tables for r in table]
    # None (an undefined rank correlation) becomes NaN, which the means skip.
    return pd.DataFrame(rows, columns=list(ADAPTATION_COLUMNS)).astype(
        {"spearman_distance": float, "spearman_implied": float}
    )


def _mean(values: pd.Series, digits: int) -> str:
    values = values.dropna()
    return "-" if values.empty else f"{values.mean():.{digits}f}"


def summary(rows: pd.DataFrame) -> list[list[str]]:
    """One row per (domain, data, task, start method, search), in the files' order."""
    out = []
    for key, group in rows.groupby(list(KEYS), sort=False):
        moved = group["distance_chosen"] != group["distance_start"]
        out.append(
            [
                *map(str, key),
                str(len(group)),
                _mean(group["episodes"], 1),
                _mean(group["seconds"], 2),
                f"{_mean(group['distance_start'], 2)} -> {_mean(group['distance_chosen'], 2)}",
                f"{100 * moved.mean():.0f}%",
                _mean(group["spearman_distance"], 2),
                _mean(group["spearman_implied"], 2),
                f"{_mean(group['return_start'], 1)} -> {_mean(group['return_chosen'], 1)}",
            ]
        )
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m rbfm.reporting.searches", description=__doc__)
    parser.add_argument("adaptations", nargs="+", help="adaptations.csv of `rbfm experiment`")
    args = parser.parse_args(argv)
    try:
        rows = read_searches(args.adaptations)
    except ConfigError as e:
        parser.error(str(e))
    print(markdown(HEADER, summary(rows)), end="")


if __name__ == "__main__":
    main()
