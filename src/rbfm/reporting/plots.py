"""Figures: the pretraining curve of a run, and perturbation sweeps."""

from __future__ import annotations

import csv
import io
import math
import textwrap
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from PIL import Image
from PIL.PngImagePlugin import PngInfo

from rbfm.atomic import beside
from rbfm.errors import ConfigError
from rbfm.evaluation.sweep import SweepRow
from rbfm.methods import REGISTRY, display_label

# Pixels a figure inch: sharp on a screen, with files small enough to commit by the dozen.
DPI = 100


def plot_pretraining(run: Path, out: Path, title: str | None = None) -> Path:
    """IQM over all tasks and each task's mean return against updates, from eval.csv.
    `title` replaces the default one (the run's name, best IQM and its update)."""
    rows = _evaluations(run / "eval.csv")
    tasks = [k for k in rows[0] if k not in ("step", "iqm")]
    fig = Figure(figsize=(6.4, 3.8), dpi=110)
    ax = fig.subplots()
    steps = [r["step"] for r in rows]
    ax.plot(steps, [r["iqm"] for r in rows], "k-o", lw=2, ms=3, label="IQM (all tasks)")
    for task in tasks:
        ax.plot(steps, [r[task] for r in rows], lw=1, alpha=0.8, label=task)
    best = max(rows, key=lambda r: r["iqm"])
    ax.axvline(best["step"], color="grey", ls=":", lw=1)
    ax.set_xlabel("updates")
    ax.set_ylabel("zero-shot return")
    at = f"best IQM {best['iqm']:.0f} at {int(best['step']):,}"
    default = f"FB pretraining: {run.name} ({at})"
    ax.set_title(title or default, fontsize=10)
    ax.legend(fontsize=7, ncol=2)
    return _save(fig, ax, out)


def _evaluations(path: Path) -> list[dict[str, float]]:
    """A pretraining run's eval.csv as numbers, each finite, or a one-line refusal."""
    if not path.is_file():
        raise ConfigError(f"{path.parent}: no eval.csv (a pretraining run writes it)")
    with open(path, newline="") as f:
        records = list(csv.DictReader(f))
    if not records:
        raise ConfigError(f"{path}: no evaluations yet")
    rows = []
    for i, record in enumerate(records, 2):  # line 1 is the header
        try:
            row = {k: float(v) for k, v in record.items()}
        except (TypeError, ValueError) as e:
            raise ConfigError(f"{path}: line {i} is not numbers ({e})") from None
        if not all(math.isfinite(v) for v in row.values()):
            raise ConfigError(f"{path}: line {i} holds NaN or infinity")
        rows.append(row)
    return rows


def plot_sweep(rows: list[SweepRow], title: str, xlabel: str, out: Path) -> Path:
    """Mean return (95% CI band) against perturbation level, one line per method."""
    return plot_sweeps([(rows, title, xlabel)], out)


def plot_sweeps(
    panels: list[tuple[list[SweepRow], str, str]], out: Path, suptitle: str | None = None
) -> Path:
    """One panel per (rows, title, x label) sweep, side by side, sharing the legend."""
    fig = Figure(figsize=(0.4 + 5.2 * len(panels), 3.8), dpi=110)
    axes = fig.subplots(1, len(panels), squeeze=False)
    for ax, (rows, title, xlabel) in zip(axes[0], panels, strict=True):
        for method in dict.fromkeys(r.method for r in rows):
            mine = [r for r in rows if r.method == method]
            x = np.array([np.nan if r.level is None else r.level for r in mine], float)
            y = np.array([r.mean for r in mine])
            h = np.array([r.ci95 for r in mine])
            style = REGISTRY.get(method)
            ax.plot(
                x,
                y,
                marker=style.marker if style else "o",
                color=style.colour if style else None,
                label=display_label(method),
            )
            lo, hi = np.clip(y - h, 0.0, 1000.0), np.clip(y + h, 0.0, 1000.0)
            ax.fill_between(x, lo, hi, color=style.colour if style else None, alpha=0.15, lw=0)
        ax.set_xlabel(xlabel)
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
    axes[0, 0].set_ylabel("return")
    seeds = max(r.seeds for rows, _, _ in panels for r in rows)
    episodes = max(r.episodes for rows, _, _ in panels for r in rows)
    over = (
        f"mean over {seeds} task vectors (seeds) of each one's mean return over {episodes} "
        "episodes; band: 95% Student-t CI across seeds"
        if seeds > 1
        else f"mean return over {episodes} episodes; band: 95% Student-t CI across episodes"
    )
    caption = f"Line: {over}, clipped to [0, 1000]."
    axes[0, 0].legend(fontsize=8)
    if suptitle:
        fig.suptitle(suptitle, fontsize=10)
    return _save(fig, axes[0, 0], out, caption)


def plot_nominal(groups: list[tuple[str, list[SweepRow]]], title: str, out: Path) -> Path:
    """Grouped bars of nominal return (95% CI whiskers): one group per task, a bar per method."""
    methods = list(dict.fromkeys(r.method for _, rows in groups for r in rows))
    width = 0.8 / len(methods)
    fig = Figure(figsize=(1.2 + 1.6 * len(groups), 3.8), dpi=110)
    ax = fig.subplots()
    for j, method in enumerate(methods):
        label: str | None = method  # once per method: baselines may miss some groups
        for i, (_, rows) in enumerate(groups):
            for r in (r for r in rows if r.method == method):
                offset = (j - (len(methods) - 1) / 2) * width
                ax.bar(
                    i + offset, r.mean, width, yerr=r.ci95, capsize=2, color=f"C{j}", label=label
                )
                label = None
    ax.set_xticks(range(len(groups)), [name for name, _ in groups])
    ax.set_ylabel("return")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    return _save(fig, ax, out)


def caption_width(fig_width: float) -> int:
    """Characters of a 7-point caption line that fit a figure `fig_width` inches wide."""
    return max(40, int(fig_width * 16))


def save_png(fig: Figure, out: Path, title: str | None = None) -> Path:
    """Writes `fig` as an optimised PNG of 256 palette colours to `out`, or to `out` with
    `.png` appended where it ends otherwise (PNG bytes under `fig.jpg` would mislead), and
    returns the path: a plot's flat colours and their anti-aliased edges fit a palette, at
    a fraction of the size of full colour. `title` goes in the file's metadata; no
    software version does, so reruns give the same bytes."""
    out = out if out.suffix.lower() == ".png" else beside(out, ".png")
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI)
    image = Image.open(buffer).convert("RGB").quantize(256)
    info = PngInfo()
    if title:
        info.add_text("Title", title)
    out.parent.mkdir(parents=True, exist_ok=True)
    image.save(out, format="PNG", optimize=True, pnginfo=info)
    return out


def _save(fig: Figure, ax: Axes, out: Path, caption: str | None = None) -> Path:
    """The PNG, with an optional caption at the bottom, wrapped to the figure's width."""
    ax.grid(alpha=0.3, axis="y" if ax.patches else "both")
    bottom = 0.0
    if caption:
        lines = textwrap.fill(caption, width=caption_width(fig.get_figwidth()))
        fig.text(0.5, 0.01, lines, ha="center", va="bottom", fontsize=7, color="0.25")
        bottom = 0.03 + 0.11 * (lines.count("\n") + 1) / fig.get_figheight()
    fig.tight_layout(rect=(0, bottom, 1, 1))
    # The title in the file's metadata too: what a reader (or a test) can check without
    # looking at the pixels.
    return save_png(fig, out, fig.get_suptitle() or ax.get_title())


def plot_inputs(inputs: list[str], out: str, title: str | None = None) -> Path:
    """`rbfm plot`: one pretraining run's IQM curve, or tables from `rbfm evaluate` (all
    nominal: bars per task; sweeps: a panel per table)."""
    from rbfm.envs import get_perturbation
    from rbfm.evaluation.sweep import read_csv

    paths = [Path(p) for p in inputs]
    if len(paths) == 1 and paths[0].is_dir():
        return plot_pretraining(paths[0], Path(out), title)
    if any(p.is_dir() for p in paths):
        raise ConfigError("plot takes one pretraining run directory, or tables from `evaluate`")
    tables = [read_csv(p) for p in paths]
    if all(r.level is None for rows, _ in tables for r in rows):
        groups = [(x.get("task", p.stem), rows) for p, (rows, x) in zip(paths, tables, strict=True)]
        domain = tables[0][1].get("domain", "")
        return plot_nominal(groups, title or f"{domain}: nominal return (95% CI)", Path(out))
    panels = []
    for rows, extra in tables:
        family, domain = extra.get("perturbation", "none"), extra.get("domain", "")
        unit = get_perturbation(domain, family).unit if family != "none" else ""
        panels.append((rows, f"{domain}/{extra.get('task', '')}", f"{family} ({unit})"))
    return plot_sweeps(panels, Path(out), title)
