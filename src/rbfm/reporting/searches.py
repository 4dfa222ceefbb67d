"""What the adaptation searches did, read from the adaptations.csv `rbfm experiment` writes
(`docs/experiments.md`): per task, start and search, how its distance to the
demonstrations in B's space changed, how often it left its start, how well each
criterion ranked its own episodes' returns, and what it cost. These are the search
statistics `docs/results.md` quotes beside the evaluated returns.

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
from pathlib import Path

import numpy as np
import pandas as pd

from rbfm.errors import ConfigError
from rbfm.reporting.report import markdown

KEYS = ("domain", "dataset", "task", "method", "adaptation")
NUMBERS = (
    "episodes",
    "seconds",
    "distance_start",
    "distance_chosen",
    "return_start",
    "return_chosen",
    "spearman_distance",
    "spearman_implied",
)
# The rank correlations are undefined for a search whose candidates all tie (NaN there);
# every other number must be present.
MAY_BE_EMPTY = ("spearman_distance", "spearman_implied")
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


def _read_one(path: Path) -> pd.DataFrame:
    """One adaptations.csv, checked; a file of the header alone (a stage whose searches
    have not finished yet) has no rows."""
    if not path.is_file():
        raise ConfigError(f"{path}: no such file (an adaptations.csv of `rbfm experiment`)")
    try:
        frame = pd.read_csv(path, dtype={k: str for k in (*KEYS, "cell")}, keep_default_na=False)
    except (pd.errors.EmptyDataError, pd.errors.ParserError) as e:
        raise ConfigError(f"{path}: not a CSV file ({e})") from e
    if frame.empty:
        return frame
    missing = [c for c in (*KEYS, *NUMBERS, "cell") if c not in frame.columns]
    if missing:
        raise ConfigError(f"{path}: no column {', '.join(missing)} (not an adaptations.csv?)")
    for column in NUMBERS:
        raw = frame[column].astype(str)
        values = pd.to_numeric(raw.where(raw != "", "nan"), errors="coerce")
        empty = (raw == "") if column in MAY_BE_EMPTY else pd.Series(False, index=raw.index)
        bad = ~np.isfinite(values.to_numpy(dtype=float)) & ~empty.to_numpy()
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ConfigError(f"{path}:{i + 2}: {column} is {raw.iloc[i]!r}, not a number")
        frame[column] = values
    frame["file"] = str(path)
    return frame


def read_searches(paths: Sequence[str | Path]) -> pd.DataFrame:
    """The rows of several adaptations.csv, checked: every column this report reads is
    there and numeric, and no search (cell) is in two files."""
    if isinstance(paths, str | Path):
        raise ConfigError(f"adaptations: a list of files, not the single {str(paths)!r}")
    if not paths:
        raise ConfigError("adaptations: no file given")
    frames = [f for f in (_read_one(Path(p)) for p in paths) if not f.empty]
    if not frames:
        return pd.DataFrame(columns=[*KEYS, *NUMBERS, "cell", "file"])
    rows = pd.concat(frames, ignore_index=True)
    twice = rows[rows.duplicated("cell", keep=False)]
    if not twice.empty:
        cell = twice["cell"].iloc[0]
        where = twice.loc[twice["cell"] == cell, "file"]
        raise ConfigError(
            f"search {cell} is {len(where)} times in {', '.join(dict.fromkeys(where))}: "
            "pooling would count it more than once"
        )
    return rows


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
