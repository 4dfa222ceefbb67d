"""Markdown table of a folder of benchmarks/robust_descent.py CSVs (made by
benchmarks/robust_descent_models.sh): mean over seeds per (model, expert source, method),
and on how many seeds each robust method's own objective is below FB-IL's z's.

    python benchmarks/robust_descent_table.py [DIR]   # default: docs/inference/exact
"""

from __future__ import annotations

import csv
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "docs" / "inference" / "exact"
CELLS = {
    "cheetah": "cheetah run",
    # Walker RND's rows were measured on the model now shipped as walker:rnd-v1 (rows
    # written before its rename name it "walker").
    "walker": "walker:rnd-v1 flip",
    "walker:rnd-v1": "walker:rnd-v1 flip",
    "walker:aps": "walker_aps flip",
    "walker:proto": "walker_proto flip",
    # Likewise quadruped RND's, on the model now shipped as quadruped:rnd-v1.
    "quadruped": "quadruped:rnd-v1 jump",
    "quadruped:rnd-v1": "quadruped:rnd-v1 jump",
}
METHODS = {
    "expert": "z_e (expert's own z)",
    "fbil": "FB-IL",
    "rbfm-light": "RBFM-Light",
    "rbfm-heavy": "RBFM-Heavy",
}
HEADER = (
    "| model / task | method | seeds | nominal | TV-0.8 | Heavy (exact) | ‖z - z_e‖ "
    "| evals/steps | converged | s | x FB-IL s | own objective < FB-IL's |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|"
)
OWN = {"rbfm-light": "tv", "rbfm-heavy": "heavy"}  # each robust method's own objective
REFS = ("long", "stages500")  # the reference runs' settings (benchmarks/robust_descent.py)
# The sources robust_descent_models.sh names the reference runs' files by (NAME_SOURCE_s0.csv).
REF_SOURCES = ("long", "stages")


def _mean(rows: list[dict[str, str]], key: str) -> float:
    return statistics.mean(float(r[key]) for r in rows)


def table(root: Path) -> str:
    runs: dict[tuple[str, str, str], list[dict[str, str]]] = defaultdict(list)
    references = tuple(f"_{source}_" for source in REF_SOURCES)
    for path in sorted(p for p in root.glob("*.csv") if not any(r in p.name for r in references)):
        with path.open() as f:
            for r in csv.DictReader(f):
                runs[(r["checkpoint"], r["noise"], r["seed"])].append(r)
    # Only seeds every method finished (a run's CSV grows as its methods finish).
    groups: dict[tuple[str, float, str], list[dict[str, str]]] = defaultdict(list)
    for (ck, noise_text, _), seed_rows in runs.items():
        if {r["method"] for r in seed_rows} >= set(METHODS):
            for r in seed_rows:
                groups[(ck, float(noise_text), r["method"])].append(r)
    out = []
    for noise in sorted({k[1] for k in groups}, reverse=True):
        source = "noisy expert (action noise 0.3)" if noise else "own expert (the paper's)"
        out += [f"\n**{source}**\n", HEADER]
        for ck, cell in CELLS.items():
            fbil = groups.get((ck, noise, "fbil"))
            for method, shown in METHODS.items():
                rows = groups.get((ck, noise, method), [])
                if not rows:
                    continue
                nominal = _mean(rows, "nominal")
                nominal_text = f"{nominal:.2e}" if noise == 0 else f"{nominal:.4f}"
                run = method != "expert"
                secs = _mean(rows, "seconds")
                ratio = f"{secs / _mean(fbil, 'seconds'):.1f}" if run and fbil else ""
                conv = f"{sum(r['converged'] == 'True' for r in rows)}/{len(rows)}" if run else ""
                steps = f"{_mean(rows, 'steps'):.0f}" if run else ""
                out.append(
                    f"| {cell} | {shown} | {len(rows)} | {nominal_text} | {_mean(rows, 'tv'):.3f} "
                    f"| {_mean(rows, 'heavy'):.3f} | {_mean(rows, 'dist'):.2f} | {steps} "
                    f"| {conv} | {f'{secs:.0f}' if run else ''} | {ratio} "
                    f"| {_below(rows, fbil or [], OWN.get(method))} |"
                )
    return "\n".join(out) + "\n"


def long_table(root: Path) -> str:
    """Seed 0 of the noisy expert: each robust method's default result against the two
    reference runs on its own objective, Adam with halvings ("long") and the continuation
    with 500-iteration rounds ("stages500"), each much longer."""
    out = [
        "| model / task | method | default | Adam reference | 500-iteration stages "
        "| default / best reference | reference s (Adam, stages) |",
        "|---|---|---|---|---|---|---|",
    ]
    for ck, cell in CELLS.items():
        stem = ck.replace(":", "_")
        rows: list[dict[str, str]] = []
        for source in ("noisy", *REF_SOURCES):
            name = f"{stem}_{source}_s0.csv"
            if (root / name).exists():
                with (root / name).open() as f:
                    rows += list(csv.DictReader(f))
        for method, key in OWN.items():
            mine = {r["settings"]: r for r in rows if r["method"] == method}
            if "default" not in mine or not set(REFS) & set(mine):
                continue
            refs = {k: float(mine[k][key]) for k in REFS if k in mine}
            secs = [f"{float(mine[k]['seconds']):.0f}" if k in mine else "-" for k in REFS]
            shown = [f"{refs[k]:.4f}" if k in refs else "-" for k in REFS]
            d = float(mine["default"][key])
            out.append(
                f"| {cell} | {METHODS[method]} ({key}) | {d:.4f} | {shown[0]} | {shown[1]} "
                f"| {d / min(refs.values()):.3f} | {', '.join(secs)} |"
            )
    return "\n".join(out) + "\n"


def _below(rows: list[dict[str, str]], fbil: list[dict[str, str]], key: str | None) -> str:
    """On how many seeds the method's own objective is below FB-IL's z's (by > 1e-4)."""
    if key is None:
        return ""
    ref = {r["seed"]: float(r[key]) for r in fbil}
    wins = sum(float(r[key]) < ref[r["seed"]] - 1e-4 for r in rows if r["seed"] in ref)
    return f"{wins}/{len(rows)}"


if __name__ == "__main__":
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT
    print(table(root))
    print("\n**reference runs (noisy expert, seed 0)**\n")
    print(long_table(root))
