"""What the planner's preset costs in return against a larger planner, on a few episodes.

    python benchmarks/planner_size.py [--tasks cheetah:run walker:walk] [--episodes 2]

The larger planner doubles the preset's samples and takes its horizon 1.5x longer
(about 3x the simulated steps per control step). Both plan episodes 0..N-1 of the same
stream (seed 0: the demonstrations' initial states); the preset's returns are read from
the demonstrations files `runs/demos/mpc/DOMAIN_TASK.npz`, so only the larger planner
runs. Episodes are kept in `runs/planner_size/` as they end (a rerun resumes); the rows
go to docs/results/external/planner_size.csv, replacing those of the same task and
episode count and keeping the rest.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from rbfm.atomic import atomic_csv
from rbfm.data.demos import load_demos
from rbfm.planning import mpc_config
from rbfm.planning.demos import planned_episodes

sys.path.insert(0, str(Path(__file__).parent))
from external_files import demonstrated, read_rows

PARTS = Path("runs/planner_size")
TABLE = Path("docs/results/external/planner_size.csv")
COLUMNS = (
    "domain", "task", "episodes", "preset", "preset_return", "larger", "larger_return",
    "larger_seconds",
)  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", nargs="+", default=["cheetah:run", "walker:walk"])
    p.add_argument("--episodes", type=int, default=2)
    args = p.parse_args()
    rows = read_rows(TABLE)
    for domain, task, demos_file in demonstrated(args.tasks):
        preset = mpc_config(domain)
        larger = mpc_config(
            domain, {"samples": 2 * preset.samples, "horizon": (3 * preset.horizon) // 2}
        )
        start = time.perf_counter()
        eps = planned_episodes(domain, task, larger, args.episodes, PARTS, 0, progress=True)
        took = (time.perf_counter() - start) / args.episodes
        demos = load_demos(demos_file)
        own = np.asarray(demos.returns[: args.episodes], np.float64)
        big = np.array([e.total for e in eps])
        key = (domain, task, str(args.episodes))
        rows = [r for r in rows if (r["domain"], r["task"], r["episodes"]) != key]
        rows.append(dict(zip(COLUMNS, (
            domain, task, str(args.episodes), f"{preset.samples}x{preset.horizon}",
            f"{own.mean():.1f}", f"{larger.samples}x{larger.horizon}", f"{big.mean():.1f}",
            f"{took:.0f}",
        ), strict=True)))  # fmt: skip
        print(
            f"{domain}:{task}: preset {own.mean():.1f}, larger {big.mean():.1f} "
            f"({took:.0f} s/episode)"
        )
    TABLE.parent.mkdir(parents=True, exist_ok=True)
    atomic_csv(TABLE, rows, COLUMNS)


if __name__ == "__main__":
    main()
