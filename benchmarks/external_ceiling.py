"""The ceiling under shift: the MPPI planner run inside the perturbed simulator, what a
controller that knows the shifted physics reaches, at each family's two strongest levels.

    python benchmarks/external_ceiling.py [--tasks cheetah:run ...] [--episodes 2]

Each cell's episodes are kept in `runs/external_ceiling/` as they end (a rerun resumes);
the table goes to docs/results/external/ceiling.csv. At nominal physics the ceiling is
the demonstrations' own return (the same planner; `runs/demos/mpc`).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from rbfm.atomic import atomic_csv
from rbfm.envs import families, get_perturbation
from rbfm.planning import mpc_config
from rbfm.planning.demos import planned_episodes

sys.path.insert(0, str(Path(__file__).parent))
from external_files import read_rows

PARTS = Path("runs/external_ceiling")
TABLE = Path("docs/results/external/ceiling.csv")
COLUMNS = ("domain", "task", "family", "level", "episodes", "mean", "std", "seconds")
SEED = 1  # another stream than the demonstrations' (seed 0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", nargs="+", required=True)
    p.add_argument("--episodes", type=int, default=2)
    args = p.parse_args()
    rows = read_rows(TABLE)
    for item in args.tasks:
        domain, task = item.split(":")
        config = mpc_config(domain)
        for family in families(domain):
            for level in get_perturbation(domain, family).levels[-2:]:
                key = (domain, task, family, f"{level:g}")
                if any((r["domain"], r["task"], r["family"], r["level"]) == key for r in rows):
                    continue
                start = time.perf_counter()
                eps = planned_episodes(
                    domain, task, config, args.episodes, PARTS, SEED, {family: level}
                )
                returns = np.array([e.total for e in eps])
                took = (time.perf_counter() - start) / args.episodes
                rows.append(dict(zip(COLUMNS, (
                    domain, task, family, f"{level:g}", args.episodes,
                    f"{returns.mean():.1f}", f"{returns.std():.1f}", f"{took:.0f}",
                ), strict=True)))  # fmt: skip
                print(f"{item} {family}={level:g}: {returns.mean():.1f}", flush=True)
                TABLE.parent.mkdir(parents=True, exist_ok=True)
                atomic_csv(TABLE, rows, COLUMNS)


if __name__ == "__main__":
    main()
