"""Markdown tables of an `experiments/cheetah_cpu.sh` run (for docs/imitation.md).

python experiments/tables.py [runs/cheetah-cpu-imitation]
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from rbfm.evaluation import mean_ci
from rbfm.evaluation.sweep import read_csv
from rbfm.inference import load_demos

TASKS = ("walk", "run", "walk_backward", "run_backward")
ORDER = ("fbil", "rbfm-light", "rbfm-heavy", "drbc", "bedroil")


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "runs/cheetah-cpu-imitation")
    print("| task | expert (200 episodes) | " + " | ".join(ORDER) + " |")
    print("| --- " * (2 + len(ORDER)) + "|")
    for task in TASKS:
        demos = load_demos(out / "demos" / f"{task}.npz")
        m, h = mean_ci(demos.returns)
        cells = {
            r.method: f"{r.mean:.1f} +- {r.ci95:.1f}"
            for r in read_csv(out / f"nominal-{task}.csv")[0]
        }
        print(
            f"| {task} | {m:.1f} +- {h:.1f} | "
            + " | ".join(cells.get(k, "-") for k in ORDER)
            + " |"
        )

    print("\nSeconds per task vector or policy (median over seeds and tasks, this run):\n")
    seconds: dict[str, list[float]] = defaultdict(list)
    steps: dict[str, int] = {}
    for f in sorted(out.glob("z/*/*.json")):
        meta = json.loads(f.read_text())
        if "method" not in meta or "seconds" not in meta:
            continue
        seconds[meta["method"]].append(float(meta["seconds"]))
        steps[meta["method"]] = int(meta["steps"])
    print("| method | steps | seconds (median) | runs |")
    print("| --- | --- | --- | --- |")
    for k in ORDER:
        if k in seconds:
            print(f"| {k} | {steps[k]:,} | {np.median(seconds[k]):.1f} | {len(seconds[k])} |")

    for csv in sorted(out.glob("sweep-*.csv")):
        rows, extra = read_csv(csv)
        levels = list(dict.fromkeys(r.level for r in rows))
        print(f"\n{extra['task']} under {extra['perturbation']} (mean +- 95% CI over seeds):\n")
        print("| method | " + " | ".join(f"{lv:g}" for lv in levels) + " |")
        print("| --- " * (1 + len(levels)) + "|")
        for k in ORDER:
            cells = [f"{r.mean:.0f} +- {r.ci95:.0f}" for r in rows if r.method == k]
            if cells:
                print(f"| {k} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
