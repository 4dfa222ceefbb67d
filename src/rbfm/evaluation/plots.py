"""Figures: the pretraining curve of a run, and perturbation sweeps."""

from __future__ import annotations

import csv
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; no display on our machines
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from rbfm.evaluation.sweep import SweepRow


def plot_pretraining(run: Path, out: Path) -> Path:
    """IQM over all tasks and each task's mean return against updates, from eval.csv."""
    with open(run / "eval.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise ValueError(f"{run / 'eval.csv'} has no evaluations yet")
    steps = [int(r["step"]) for r in rows]
    tasks = [k for k in rows[0] if k not in ("step", "iqm")]
    fig, ax = plt.subplots(figsize=(6.4, 3.8), dpi=110)
    ax.plot(steps, [float(r["iqm"]) for r in rows], "k-o", lw=2, ms=3, label="IQM (all tasks)")
    for task in tasks:
        ax.plot(steps, [float(r[task]) for r in rows], lw=1, alpha=0.8, label=task)
    best = max(rows, key=lambda r: float(r["iqm"]))
    ax.axvline(int(best["step"]), color="grey", ls=":", lw=1)
    ax.set_xlabel("updates")
    ax.set_ylabel("zero-shot return")
    ax.set_title(
        f"FB pretraining: {run.name} (best IQM {float(best['iqm']):.0f} at {int(best['step']):,})",
        fontsize=10,
    )
    ax.legend(fontsize=7, ncol=2)
    return _save(fig, ax, out)


def plot_sweep(rows: list[SweepRow], title: str, xlabel: str, out: Path) -> Path:
    """Mean return (95% CI band) against perturbation level, one line per method."""
    fig, ax = plt.subplots(figsize=(5.6, 3.8), dpi=110)
    for method in dict.fromkeys(r.method for r in rows):
        mine = [r for r in rows if r.method == method]
        x = np.array([np.nan if r.level is None else r.level for r in mine], float)
        y = np.array([r.mean for r in mine])
        h = np.array([r.ci95 for r in mine])
        ax.plot(x, y, marker=_MARKERS.get(method, "o"), label=method)
        ax.fill_between(x, y - h, y + h, alpha=0.15)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("return")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    return _save(fig, ax, out)


def _save(fig: Figure, ax: Axes, out: Path) -> Path:
    ax.grid(alpha=0.3)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out


_MARKERS = {"fbil": "^", "rbfm-light": "s", "rbfm-heavy": "o", "drbc": "D", "bedroil": "x"}
