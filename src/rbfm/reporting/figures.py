"""Figures like the paper's, drawn from an experiment's results table, and the files of a
run's figures (`draw_all`). The statistics are `stats.py`'s, the markdown `report.py`'s.

Every figure aggregates the table the paper's way: per (domain, dataset, task, label, family,
level), the mean over inference seeds of the per-seed mean returns, with a 95% Student-t
confidence interval across seeds (bands clipped to the return range, and captioned).
Methods keep the paper's order, display names, colours and markers everywhere
(`rbfm.methods`); variants of one method share its
colour and marker and differ by line style.

Each `*_figure` function builds and returns a matplotlib Figure (for inspection); the matching
`plot_*` function saves it as a PNG and returns its path.
"""

from __future__ import annotations

import os
import re
import shutil
import textwrap
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from rbfm.envs import NOMINAL, get_perturbation
from rbfm.errors import ConfigError
from rbfm.evaluation.aggregate import stratified_iqm
from rbfm.experiments.table import (
    CeilingRow,
    CertificateRow,
    ResultRow,
    read_ceilings,
    read_certificates,
    read_table,
)
from rbfm.methods import BASELINE_METHODS, NAMES, REGISTRY, display_label
from rbfm.reporting.plots import caption_width, save_png
from rbfm.reporting.report import (
    ceilings_table,
    certificates_table,
    iqm_markdown,
    returns_table,
    shares_table,
    timing_table,
)
from rbfm.reporting.stats import (
    IQM_REPS,
    Aggregate,
    IqmResult,
    aggregate,
    iqm_estimates,
    iqm_scores,
    label_key,
    level_key,
    nonempty,
    ordered_families,
    ordered_labels,
    require,
    select,
    unique,
)
from rbfm.reporting.verdicts import (
    baselines_table,
    gap_table,
    readings_table,
    settings_table,
    several_tasks,
)

METHODS = NAMES
"""The paper's methods, in the paper's order."""
# DMC episode returns: 1000 steps of rewards in [0, 1]. Confidence bands are clipped to it
# (a Student-t interval over few seeds can reach outside), and captions say so.
RETURN_RANGE = (0.0, 1000.0)
BAND_CAPTION = (
    "Line: mean over inference seeds of each seed's mean return. Band: 95% Student-t CI "
    "across seeds, clipped to the return range [0, 1000]."
)
_COLOURS = {m.name: m.colour for m in REGISTRY.values()}
# One meaning per line style: dashed is the expert itself (`_draw_ceiling`) and nothing
# else; a method's variants (eps values, adaptation budgets) take the others in order.
_LINESTYLES: tuple[str | tuple[int, tuple[int, ...]], ...] = (
    "-",
    ":",
    "-.",
    (0, (5, 1, 1, 1, 1, 1)),
    (0, (1, 3)),
    (0, (8, 2, 1, 2, 1, 2)),
)


@dataclass(frozen=True)
class _Style:
    colour: str
    marker: str
    linestyle: str | tuple[int, tuple[int, ...]]


# ---------------------------------------------------------------------------------------------
# Drawing helpers


_ADAPT_COLOURS = {
    "adapt": "C6",
    "oracle": "C7",
    "adapt-cone": "C8",
    "oracle-cone": "C9",
    "implied": "tab:olive",
    "implied-cone": "darkgoldenrod",
}


def _adaptation(variant: str) -> str | None:
    """The adaptation ("adapt", "oracle", "adapt-cone", ...) of an adapted task vector's
    variant (`fbil` `adapt-k5`)."""
    for part in variant.split(","):
        kind, _, budget = part.partition("-k")
        if kind in _ADAPT_COLOURS and budget.isdigit():
            return kind
    return None


def _budgets(variant: str) -> list[int]:
    return [
        int(part.partition("-k")[2]) for part in variant.split(",") if _adaptation(part) is not None
    ]


def _styles(rows: Sequence[ResultRow]) -> dict[str, _Style]:
    """A style per label: the method's colour and marker; its variants differ by line style."""
    styles: dict[str, _Style] = {}
    seen: Counter[str] = Counter()
    colours = dict(_COLOURS)
    method_of = {r.label: r.method for r in rows}
    variant_of = {r.label: r.variant for r in rows}
    budgets = sorted({b for v in variant_of.values() for b in _budgets(v)})
    for label in ordered_labels(rows):
        method = method_of[label]
        kind = _adaptation(variant_of[label])
        if kind is not None:  # one colour per adaptation kind, a line style per budget
            (budget,) = _budgets(variant_of[label])
            styles[label] = _Style(
                colour=_ADAPT_COLOURS[kind],
                marker=REGISTRY[method].marker if method in REGISTRY else "o",
                linestyle=_LINESTYLES[
                    (len(budgets) - 1 - budgets.index(budget)) % len(_LINESTYLES)
                ],
            )
            continue
        colours.setdefault(method, f"C{len(colours) % 10}")
        styles[label] = _Style(
            colour=colours[method],
            marker=REGISTRY[method].marker if method in REGISTRY else "o",
            linestyle=_LINESTYLES[seen[method] % len(_LINESTYLES)],
        )
        seen[method] += 1
    return styles


def family_text(family: str) -> str:
    """A family as figures write it: "body mass" for the id body_mass."""
    return family.replace("_", " ")


def _expert_note(rows: Sequence[ResultRow]) -> str:
    """ ", noisy expert" in a title when the rows' demonstrations are not the model's own."""
    experts = {r.expert for r in rows}
    return "" if experts == {"own"} else f", {', '.join(sorted(experts))} expert"


def unit(domain: str, family: str) -> str:
    """The x-axis label of a family: its name and the paper's unit."""
    if family == NOMINAL:
        return "nominal"
    try:
        return f"{family_text(family)} ({get_perturbation(domain, family).unit})"
    except ConfigError:
        return f"{family_text(family)} (level)"


def _decreasing(domain: str, family: str) -> bool:
    """Whether the family's perturbation grows as its level falls (drawn with x inverted)."""
    try:
        p = get_perturbation(domain, family)
    except ConfigError:
        return False
    return p.extreme < p.nominal


def _draw_panel(
    ax: Axes,
    aggs: Sequence[Aggregate],
    styles: dict[str, _Style],
    domain: str,
    family: str,
    names: dict[str, str] | None = None,
) -> None:
    """Return against level, one line (95% CI band) per label; nominal-only data: a point with
    error bars per label, side by side."""
    labels = unique(a.label for a in aggs)
    if not labels:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
        return
    nominal_only = all(a.level is None for a in aggs)
    drawn: list[tuple[str, np.ndarray, np.ndarray]] = []
    for i, label in enumerate(labels):
        mine = sorted((a for a in aggs if a.label == label), key=lambda a: level_key(a.level))
        if not nominal_only:
            mine = [a for a in mine if a.level is not None]
        x = np.array([float(i) if a.level is None else a.level for a in mine])
        y = np.array([a.mean for a in mine])
        h = np.array([a.ci95 for a in mine])
        st = styles[label]
        name = (names or {}).get(label, display_label(label))
        if len(x) == 1:
            ax.errorbar(
                x, y, yerr=h, color=st.colour, marker=st.marker, ls="none", capsize=3, label=name
            )
        else:
            ax.plot(
                x, y, color=st.colour, marker=st.marker, ls=st.linestyle, ms=4, lw=1.5, label=name
            )
            lo, hi = np.clip(y - h, *RETURN_RANGE), np.clip(y + h, *RETURN_RANGE)
            ax.fill_between(x, lo, hi, color=st.colour, alpha=0.15, lw=0)
            drawn.append((name, x, y))
    _note_coinciding(ax, drawn)
    if nominal_only:
        ax.set_xticks([])
        ax.set_xlim(-0.8, len(labels) - 0.2)
    elif _decreasing(domain, family):
        ax.invert_xaxis()
    ax.set_xlabel(unit(domain, family), fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3)


def _note_coinciding(ax: Axes, drawn: list[tuple[str, np.ndarray, np.ndarray]]) -> None:
    """Says in the panel which curves coincide (within 1% of the panel's span at every
    level), since the one drawn last hides the others."""
    if len(drawn) < 2:
        return
    span = max(float(np.ptp(np.concatenate([y for _, _, y in drawn]))), 1.0)
    groups: list[list[str]] = []
    for i, (name, x, y) in enumerate(drawn):
        for j in range(i):
            other, ox, oy = drawn[j]
            if x.shape == ox.shape and np.allclose(x, ox) and np.all(np.abs(y - oy) <= 0.01 * span):
                group = next((g for g in groups if other in g), None)
                if group is None:
                    groups.append([other, name])
                elif name not in group:
                    group.append(name)
                break
    if groups:
        text = "; ".join(" and ".join(g) + " coincide" for g in groups)
        # Wrapped to the panel and kept out of the layout: a long note must not shrink
        # the panel it annotates (constrained layout would make room for it).
        note = ax.text(
            0.02,
            0.02,
            "\n".join(textwrap.wrap(text, 60)),
            transform=ax.transAxes,
            fontsize=6,
            color="0.25",
            va="bottom",
        )
        note.set_in_layout(False)


def _shared_legend(
    fig: Figure, axes: Iterable[Axes], ncol: int | None = None, caption: str = BAND_CAPTION
) -> None:
    """One legend under the panels, each label once, in the order first drawn, titled by
    the caption that says what the lines and bands are (one box, so the layout keeps
    room for both)."""
    handles: dict[str, Artist] = {}
    for ax in axes:
        hs, ls = ax.get_legend_handles_labels()
        for h, lab in zip(hs, ls, strict=True):
            handles.setdefault(lab, h)
    if handles:
        fig.legend(
            list(handles.values()),
            list(handles),
            loc="outside lower center",
            ncol=ncol or max(1, min(len(handles), int(fig.get_figwidth() / 1.7))),
            fontsize=8,
            frameon=False,
            title=textwrap.fill(caption, width=caption_width(fig.get_figwidth())),
            title_fontsize=7,
        )


def _new_figure(
    nrows: int, ncols: int, w: float = 3.2, h: float = 2.5
) -> tuple[Figure, np.ndarray]:
    width = max(4.6, 0.4 + w * ncols)
    fig = Figure(figsize=(width, 0.7 + h * nrows), dpi=110, layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


def _suptitle(fig: Figure, text: str) -> None:
    """The figure's title, wrapped to its width (~13 characters an inch at 10 pt): a
    one-panel figure clipped a 65-character title at both edges."""
    fig.suptitle(textwrap.fill(text, int(13 * fig.get_figwidth())), fontsize=10)


def save_figure(fig: Figure, out: str | os.PathLike[str]) -> Path:
    """Writes the figure as a PNG (`out` without suffix or with .png; one format, so that
    docs/ holds one copy of each figure; `plots.save_png`) and returns its path."""
    return save_png(fig, Path(out))


# ---------------------------------------------------------------------------------------------
# Figures


EXPERT_NAME = "expert itself"


def _ceiling_caption(ceilings: Sequence[CeilingRow]) -> str:
    """What the dashed line is: an FB expert evaluated on the imitators' episodes, or a
    planner run inside each shifted simulator on a few episodes (the `mpc` ceiling)."""
    if not ceilings:
        return ""
    text = (
        " Crosses: the demonstrating expert itself where measured, dashed between adjacent "
        "levels measured"
    )
    planned = sorted({c.episodes for c in ceilings if c.expert == "mpc"})
    if planned:
        counts = "/".join(str(n) for n in planned)
        return text + f", the planner run inside each shifted simulator ({counts} episodes)."
    return text + " (with its action noise, if any), mean over the same evaluation episodes."


def _draw_ceiling(
    ax: Axes, ceilings: Sequence[CeilingRow], levels: Iterable[float | None]
) -> list[CeilingRow]:
    """The expert's own return per level: a black cross at each level it was measured at,
    dashed only between two of them with none of the panel's `levels` in between (a
    planner's ceiling skips the middle levels, and a line across them would read as
    values there), no band (one run of its episodes, not a mean over inference seeds);
    returns the rows drawn."""
    points = sorted(((c.level, c) for c in ceilings if c.level is not None), key=lambda p: p[0])
    shown = {x for x in levels if x is not None}
    runs: list[list[tuple[float, CeilingRow]]] = []
    for level, c in points:
        if runs and not any(runs[-1][-1][0] < x < level for x in shown):
            runs[-1].append((level, c))
        else:
            runs.append([(level, c)])
    label: str | None = EXPERT_NAME
    for run in runs:
        x, y = [lv for lv, _ in run], [c.mean for _, c in run]
        ax.plot(x, y, color="black", ls="--", lw=1.0, marker="x", ms=4, label=label)
        label = None
    return [c for _, c in points]


def grid_figure(
    rows: Sequence[ResultRow],
    domain: str,
    dataset: str | None = None,
    ceilings: Sequence[CeilingRow] = (),
) -> Figure:
    """Figures 2-4 / 7-8: one domain and dataset; rows = tasks, columns = families. With
    `ceilings` (experts.csv), each panel also shows the expert's own return per level."""
    mine, dataset = select(rows, domain, dataset)
    experts = {r.expert for r in mine}
    styles = _styles(rows)
    tasks = unique(r.task for r in mine)
    fams = ordered_families(mine, domain)
    aggs = aggregate(mine)
    fig, axes = _new_figure(len(tasks), len(fams))
    drawn: list[CeilingRow] = []
    for i, task in enumerate(tasks):
        for j, family in enumerate(fams):
            ax = axes[i, j]
            panel = [a for a in aggs if a.task == task and a.family == family]
            _draw_panel(ax, panel, styles, domain, family)
            here = [
                c
                for c in ceilings
                if (c.domain, c.dataset, c.task, c.family) == (domain, dataset, task, family)
                and c.expert in experts
            ]
            drawn += _draw_ceiling(ax, here, (a.level for a in panel))
            ax.set_title(f"{task} / {family_text(family)}", fontsize=9)
            if j == 0:
                ax.set_ylabel(f"{task}\nreturn", fontsize=8)
    _suptitle(fig, f"{domain} ({dataset}{_expert_note(mine)}): return under each perturbation")
    _shared_legend(fig, axes.flat, caption=BAND_CAPTION + _ceiling_caption(drawn))
    return fig


def _panel_row(
    rows: Sequence[ResultRow],
    mine: Sequence[ResultRow],
    by: str,
    domain: str,
    family: str,
    title: str,
    share_y: bool,
    ceilings: Sequence[CeilingRow] = (),
) -> Figure:
    """A row of panels, one per value of the rows' field `by` (titled with it), a line per
    label styled as across the whole table, the expert itself where `ceilings` has it, one
    legend below."""
    styles = _styles(rows)
    values = unique(getattr(r, by) for r in mine)
    aggs = aggregate(mine)
    experts = {r.expert for r in mine}
    fig, axes = _new_figure(1, len(values))
    drawn: list[CeilingRow] = []
    for ax, value in zip(axes[0], values, strict=True):
        panel = [a for a in aggs if getattr(a, by) == value]
        _draw_panel(ax, panel, styles, domain, family)
        keys = {(r.domain, r.dataset, r.task, r.family) for r in mine if getattr(r, by) == value}
        drawn += _draw_ceiling(
            ax,
            [
                c
                for c in ceilings
                if (c.domain, c.dataset, c.task, c.family) in keys and c.expert in experts
            ],
            (a.level for a in panel),
        )
        ax.set_title(value, fontsize=9)
    if share_y:
        for ax in axes[0, 1:]:
            ax.sharey(axes[0, 0])
    axes[0, 0].set_ylabel("return", fontsize=8)
    _suptitle(fig, title)
    _shared_legend(fig, axes.flat, caption=BAND_CAPTION + _ceiling_caption(drawn))
    return fig


def baselines_figure(
    rows: Sequence[ResultRow],
    domain: str,
    family: str,
    dataset: str | None = None,
    ceilings: Sequence[CeilingRow] = (),
) -> Figure:
    """Figure 5: one family, a panel per task, every label (FB methods and baselines)."""
    mine, dataset = select(rows, domain, dataset, family=family)
    title = (
        f"{domain} ({dataset}{_expert_note(mine)}): FB methods and baselines under "
        f"{family_text(family)}"
    )
    return _panel_row(rows, mine, "task", domain, family, title, False, ceilings)


def datasets_figure(
    rows: Sequence[ResultRow],
    domain: str,
    task: str,
    family: str,
    ceilings: Sequence[CeilingRow] = (),
) -> Figure:
    """Q4: one task and family, a panel per dataset label (shared y), a line per label."""
    nonempty(rows)
    require(rows, "domain", domain)
    mine = [r for r in rows if r.domain == domain]
    require(mine, "task", task, f"in domain {domain!r}")
    mine = [r for r in mine if r.task == task]
    require(mine, "family", family, f"in {domain}/{task}")
    mine = [r for r in mine if r.family == family]
    title = f"{domain} {task} under {family_text(family)}: by dataset{_expert_note(mine)}"
    return _panel_row(rows, mine, "dataset", domain, family, title, True, ceilings)


def eps_figure(
    rows: Sequence[ResultRow],
    domain: str,
    task: str,
    family: str,
    method: str = "rbfm-heavy",
    dataset: str | None = None,
) -> Figure:
    """Q5: one panel, a line per robustness radius of `method` (legend "eps=0.4")."""
    mine, dataset = select(rows, domain, dataset, task=task, family=family)
    require(mine, "method", method, f"in {domain}/{dataset}/{task} under {family}")
    mine = [r for r in mine if r.method == method]
    if any(r.eps is None for r in mine):
        raise ConfigError(f"method {method!r} has rows without eps; it has no radius to compare")
    labels = ordered_labels(mine)
    eps_of = {label: next(r.eps for r in mine if r.label == label) for label in labels}
    counts = Counter(eps_of.values())
    names = {
        label: f"eps={e:g}" if counts[e] == 1 else f"eps={e:g}: {label}"
        for label, e in eps_of.items()
    }
    colours = matplotlib.colormaps["viridis"](np.linspace(0.0, 0.85, len(labels)))
    marker = REGISTRY[method].marker if method in REGISTRY else "o"
    styles = {
        label: _Style(matplotlib.colors.to_hex(c), marker, "-")
        for label, c in zip(labels, colours, strict=True)
    }
    fig, axes = _new_figure(1, 1, w=4.6, h=3.2)
    ax = axes[0, 0]
    _draw_panel(ax, aggregate(mine), styles, domain, family, names)
    ax.set_ylabel("return", fontsize=8)
    title = (  # two lines: one would overflow the single panel
        f"{domain} {task} ({dataset}{_expert_note(mine)}):\n{display_label(method)} by radius "
        f"under {family_text(family)}"
    )
    ax.set_title(title, fontsize=9)
    _shared_legend(fig, [ax], ncol=min(len(labels), 3))
    return fig


# ---------------------------------------------------------------------------------------------
# Interquartile mean across tasks (rliable)


def _paired_gaps(rows: Sequence[ResultRow], reps: int, seed: int) -> dict[str, tuple[float, ...]]:
    """Each label's IQM of its per-seed differences to the first label (FB-IL in the
    paper's order) in every combination, with the same stratified-bootstrap 95% CI."""
    scores, _ = iqm_scores(rows)
    labels = list(scores)
    if len(labels) < 2:
        return {}
    ref = scores[labels[0]]
    return dict(stratified_iqm({k: scores[k] - ref for k in labels[1:]}, reps, seed))


def _iqm_draw(
    result: IqmResult, rows: Sequence[ResultRow], reps: int = IQM_REPS, seed: int = 0
) -> Figure:
    if not result.estimates:
        raise ConfigError("no label can be compared for an IQM: " + "; ".join(result.notes))
    gaps = _paired_gaps(rows, reps, seed) if result.scope == "all families and levels" else {}
    fig, axes = _new_figure(
        1, 2 if gaps else 1, w=4.2 if gaps else 5.0, h=0.5 + 0.45 * len(result.estimates)
    )
    ax = axes[0, 0]
    styles = _styles(rows)
    for i, e in enumerate(result.estimates):
        st = styles[e.label]
        ax.barh(i, e.high - e.low, left=e.low, height=0.6, color=st.colour, alpha=0.75)
        ax.vlines(e.iqm, i - 0.3, i + 0.3, color="k", lw=2)
    labels = [display_label(e.label) for e in result.estimates]
    ax.set_yticks(range(len(result.estimates)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.use_sticky_edges = False  # bars stick to their left edge: margins would not apply
    ax.margins(x=0.15)
    ax.set_xlabel(f"IQM return ({result.scope})", fontsize=8)
    ax.tick_params(axis="x", labelsize=7)
    title = "Interquartile mean of the returns, per method"
    experts = {r.expert for r in rows}
    if experts != {"own"}:  # the paper's protocol goes unnamed, as in every other figure
        title += f"\n({', '.join(sorted(experts))} expert)"
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3, axis="x")
    if gaps:
        _gap_panel(axes[0, 1], result, gaps, styles)
    # A table of several models (the sources stage) pools them all: the caption says so.
    models = unique(f"{r.domain} {r.dataset}" for r in rows)
    pooled = f" of {len(models)} models ({', '.join(models)})" if len(models) > 1 else ""
    _caption(
        fig,
        f"Tick: IQM over the seeds of {result.tasks} (task, family, level) combinations"
        f"{pooled}. Bar: its 95% stratified-bootstrap CI (rliable), resampling seeds within "
        "each combination. The axis spans the intervals only, so differences look large: "
        + (
            "the right panel gives each one's size, the IQM of the paired per-seed gaps to "
            f"{display_label(result.estimates[0].label)} with its CI (0: no difference)."
            if gaps
            else "compare them with the bars' widths."
        ),
    )
    return fig


def _gap_panel(
    ax: Axes, result: IqmResult, gaps: dict[str, tuple[float, ...]], styles: dict[str, _Style]
) -> None:
    for i, e in enumerate(result.estimates[1:], start=1):
        if e.label in gaps:
            mid, low, high = gaps[e.label]
            ax.barh(i, high - low, left=low, height=0.6, color=styles[e.label].colour, alpha=0.75)
            ax.vlines(mid, i - 0.3, i + 0.3, color="k", lw=2)
            if low == high == 0.0:  # the same returns in every cell: nothing to draw
                ax.text(0.0, i, "  identical", va="center", fontsize=7)
    ax.axvline(0.0, color="k", lw=0.8)
    ax.use_sticky_edges = False
    ax.margins(x=0.1)
    ax.tick_params(labelsize=7)
    ax.set_ylim(len(result.estimates) - 0.5, -0.5)
    ax.set_yticks([])
    ax.set_xlabel(f"gap to {display_label(result.estimates[0].label)} (return)", fontsize=8)
    ax.set_title("Paired gap, IQM and 95% CI", fontsize=10)
    ax.grid(alpha=0.3, axis="x")


def _caption(fig: Figure, text: str) -> None:
    """A caption under a figure without a legend, wrapped to its width."""
    lines = textwrap.fill(text, width=caption_width(fig.get_figwidth()))
    fig.supxlabel(lines, fontsize=7, color="0.25")  # constrained layout keeps room for it


def iqm_figure(
    rows: Sequence[ResultRow],
    family: str | None = None,
    level: float | None = None,
    reps: int = IQM_REPS,
    seed: int = 0,
) -> Figure:
    """Horizontal interval bars (95% CI) with the IQM marked, a bar per label, paper order."""
    result = iqm_estimates(rows, family, level, reps, seed)
    return _iqm_draw(result, rows, reps, seed)


# ---------------------------------------------------------------------------------------------
# Everything a table supports


def _slug(*parts: str) -> str:
    return "-".join(re.sub(r"[^A-Za-z0-9._-]+", "_", p) for p in parts)


def draw_all(
    table_path: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    iqm_reps: int = IQM_REPS,
    ceilings_path: str | os.PathLike[str] | None = None,
    certificates_path: str | os.PathLike[str] | None = None,
) -> list[Path]:
    """Draws every figure the table supports into `out_dir` and writes `tables.md` (timing,
    returns, IQM with `iqm_reps` bootstrap resamples); returns the files written (the PNG
    of each figure, then tables.md).

    grid-{domain}-{dataset}              a grid per (domain, dataset)
    baselines-{domain}[-{dataset}]-{family}
                                         when drbc or bedroil rows exist there
    datasets-{domain}-{task}-{family}    when that task and family have several datasets
    eps-[{method}-]{domain}[-{dataset}]-{task}-{family}
                                         when a method has several eps values there (the method
                                         is named unless it is rbfm-heavy)
    iqm                                  when some labels can be compared across all tasks
    The dataset appears in the baselines and eps names only where several datasets of the
    domain have that figure. A table with several expert sources gets all of these per
    source, in `out_dir/expert-{source}/`: results of different experts never share a
    figure, a table or an IQM.
    """
    rows = read_table(table_path)
    ceilings = read_ceilings(ceilings_path) if ceilings_path is not None else []
    certs = read_certificates(certificates_path) if certificates_path is not None else []
    experts = unique(r.expert for r in rows)
    if len(experts) == 1:
        name = Path(table_path).name
        return _draw_rows(rows, ceilings, certs, Path(out_dir), name, iqm_reps)
    written: list[Path] = []
    for expert in experts:
        mine = [r for r in rows if r.expert == expert]
        theirs = [c for c in ceilings if c.expert == expert]
        their_certs = [c for c in certs if c.expert == expert]
        title = f"{Path(table_path).name}, expert {expert}"
        out = Path(out_dir) / _slug("expert", expert)
        written += _draw_rows(mine, theirs, their_certs, out, title, iqm_reps)
    return written


def _saving(figure: Callable[..., Figure], *args: Any) -> Callable[[Path], Path]:
    """Draws `figure(*args)` into the PNG at the path it is given, when it is given one."""
    return lambda out: save_figure(figure(*args), out)


def _draw_rows(
    rows: list[ResultRow],
    ceilings: list[CeilingRow],
    certs: list[CertificateRow],
    out_dir: Path,
    title: str,
    iqm_reps: int,
) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    def draw(name: str, plot: Callable[[Path], Path]) -> None:
        written.append(plot(out_dir / name))

    # Figures of one dataset name it only where another dataset has the same figure.
    per_dataset: list[tuple[tuple[str, ...], int, str, Callable[[Path], Path]]] = []
    for domain in unique(r.domain for r in rows):
        mine = [r for r in rows if r.domain == domain]
        for ds in unique(r.dataset for r in mine):
            draw(_slug("grid", domain, ds), _saving(grid_figure, rows, domain, ds, ceilings))
        for ds in unique(r.dataset for r in mine):
            data = [r for r in mine if r.dataset == ds]
            for family in ordered_families(data, domain):
                fam_rows = [r for r in data if r.family == family]
                if any(r.method in BASELINE_METHODS for r in fam_rows):
                    baselines = _saving(baselines_figure, rows, domain, family, ds, ceilings)
                    per_dataset.append((("baselines", domain, family), 2, ds, baselines))
                for task in unique(r.task for r in fam_rows):
                    cell = [r for r in fam_rows if r.task == task]
                    for method in unique(r.method for r in sorted(cell, key=label_key)):
                        if len({r.eps for r in cell if r.method == method}) < 2:
                            continue
                        named = () if method == "rbfm-heavy" else (method,)
                        eps = _saving(eps_figure, rows, domain, task, family, method, ds)
                        at = 2 + len(named)
                        per_dataset.append((("eps", *named, domain, task, family), at, ds, eps))
        for task in unique(r.task for r in mine):
            for family in ordered_families([r for r in mine if r.task == task], domain):
                here = {r.dataset for r in mine if r.task == task and r.family == family}
                if len(here) > 1:
                    draw(
                        _slug("datasets", domain, task, family),
                        _saving(datasets_figure, rows, domain, task, family, ceilings),
                    )
    shared = Counter(base for base, *_ in per_dataset)
    for base, at, ds, plot in per_dataset:
        parts = (*base[:at], ds, *base[at:]) if shared[base] > 1 else base
        draw(_slug(*parts), plot)

    iqm = iqm_estimates(rows, reps=iqm_reps)
    if iqm.estimates:
        fig = _iqm_draw(iqm, rows, iqm_reps)
        draw("iqm", partial(save_figure, fig))
    tables = out_dir / "tables.md"
    tables.write_text(_tables_md(rows, ceilings, certs, title, iqm, iqm_reps))
    written.append(tables)
    return written


def _tables_md(
    rows: list[ResultRow],
    ceilings: list[CeilingRow],
    certs: list[CertificateRow],
    title: str,
    iqm: IqmResult,
    iqm_reps: int,
) -> str:
    """tables.md: timing, returns, IQM, the experts, and the comparisons the rows hold."""
    return (
        f"# Results: {title}\n\n"
        "## Inference wall time (mean over seeds)\n\n"
        + timing_table(rows)
        + "\n## Return (mean +- 95% CI over seeds)\n\n"
        + returns_table(rows)
        + "\n## Interquartile mean across tasks\n\n"
        + iqm_markdown(iqm)
        + ("\n## The experts themselves\n\n" + ceilings_table(ceilings) if ceilings else "")
        + (
            "\n## Share of the expert itself\n\n"
            "Each method's return as a share (%) of the expert's own return at the same "
            "cell (a planner expert: the planner inside the shifted simulator, the ceiling), "
            "mean +- 95% CI over seeds, where the expert was evaluated.\n\n" + shares
            if (shares := shares_table(rows, ceilings))
            else ""
        )
        + (
            "\n## The paper's ordering (RBFM-Heavy > RBFM-Light > FB-IL)\n\n"
            "IQM [95% stratified-bootstrap CI] per scope, over every family and level and at "
            "each family's strongest perturbation; `>`/`<` only where CIs are disjoint.\n\n"
            + readings_table(rows, iqm_reps)
            + (
                "\nPer task:\n\n" + readings_table(rows, iqm_reps, per_task=True)
                if several_tasks(rows)
                else ""
            )
            + "\nEach robust method's return minus FB-IL's, k levels away from nominal, "
            "averaged over the scope's (task, family) combinations (every domain pooled, then "
            "each); mean +- 95% CI across seeds, paired by seed; `*`: the CI excludes 0.\n\n"
            + gap_table(rows)
            if _robust_against_fbil(rows)
            else ""
        )
        + (
            "\n## Against the single-task baselines\n\n"
            "IQM [95% stratified-bootstrap CI] of every method at its default settings where "
            "DRBC or BE-DROIL ran, pooled over those tasks and per task, over every level and "
            "at the strongest; a pair separated only where CIs are disjoint.\n\n" + against
            if (against := baselines_table(rows, iqm_reps))
            else ""
        )
        + (
            "\n## Converged default settings against the paper's\n\n"
            "IQM [95% stratified-bootstrap CI] of each robust method at rbfm's default "
            "settings and at the paper's (Tables 5-7, which stop far from their objectives' "
            "optima: docs/inference.md); one ahead only where CIs are disjoint.\n\n" + settings
            if (settings := settings_table(rows, iqm_reps))
            else ""
        )
        + (
            "\n## Robustness certificates\n\n"
            "Each policy's squared action error on the demonstrations it was inferred from: "
            "nominal, and in the worst case over the TV ball (exact) and over the Heavy set "
            "(an upper bound: the Heavy dual at its fitted critic) of each radius; mean +- "
            "95% CI over seeds (`rbfm.experiments.certificate`).\n\n" + certificates_table(certs)
            if certs
            else ""
        )
    )


def _robust_against_fbil(rows: Sequence[ResultRow]) -> bool:
    """Whether the rows hold FB-IL and RBFM-Light or RBFM-Heavy at their defaults."""
    labels = {r.label for r in rows}
    return "fbil" in labels and bool({"rbfm-light", "rbfm-heavy"} & labels)


def draw_run_figures(run: str | os.PathLike[str], table: str | os.PathLike[str]) -> list[Path]:
    """`draw_all` into RUN/figures, replacing the previous drawing as a whole: a spec drawn
    into the run directory of another (e.g. `slice` into `cpu`) leaves no stale figures,
    and an interrupted drawing leaves the previous one intact."""
    figures = Path(run) / "figures"
    fresh = figures.with_name(".figures.part")
    shutil.rmtree(fresh, ignore_errors=True)
    experts, certs = Path(run) / "experts.csv", Path(run) / "certificates.csv"
    written = draw_all(
        table,
        fresh,
        ceilings_path=experts if experts.exists() else None,
        certificates_path=certs if certs.exists() else None,
    )
    shutil.rmtree(figures, ignore_errors=True)
    fresh.rename(figures)
    return [figures / p.relative_to(fresh) for p in written]
