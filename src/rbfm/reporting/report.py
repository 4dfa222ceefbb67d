"""Markdown tables of an experiment's results: Table 1 (inference time), returns per
level, the IQM comparison, the experts' own returns and the robustness certificates."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

from rbfm.evaluation.aggregate import mean_ci
from rbfm.experiments.table import CeilingRow, CertificateRow, ResultRow
from rbfm.methods import display_label
from rbfm.reporting.stats import (
    IQM_REPS,
    Aggregate,
    IqmResult,
    aggregate,
    iqm_estimates,
    label_key,
    nonempty,
    ordered_labels,
    unique,
)


def format_seconds(seconds: float) -> str:
    """Wall time the way Table 1 writes it: "12.3 s", "1m 23s", "5h 23m"."""
    if not math.isfinite(seconds):
        return "-"
    if seconds < 59.95:
        return f"{seconds:.1f} s"
    s = round(seconds)
    if s < 3600:
        return f"{s // 60}m {s % 60}s"
    m = round(seconds / 60)
    return f"{m // 60}h {m % 60}m"


def markdown(header: Sequence[str], body: Iterable[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in body]
    return "\n".join(lines) + "\n"


def timing_table(rows: Sequence[ResultRow]) -> str:
    """Table 1: mean inference wall time over seeds per task and label (each seed counted once),
    a final "mean" row (over tasks) and a row with each label's mean as a multiple of FB-IL's."""
    nonempty(rows)
    per_seed: dict[tuple[str, str, str, str, int], float] = {}
    for r in rows:
        per_seed.setdefault((r.domain, r.dataset, r.task, r.label, r.seed), r.inference_seconds)
    labels = ordered_labels(rows)
    multi = len({r.dataset for r in rows}) > 1
    tasks = unique((r.domain, r.dataset, r.task) for r in rows)
    cells: dict[tuple[tuple[str, str, str], str], float] = {}
    for t in tasks:
        for label in labels:
            xs = [v for k, v in per_seed.items() if k[:3] == t and k[3] == label]
            if xs:
                cells[(t, label)] = float(np.mean(xs))
    body = []
    for t in tasks:
        name = f"{t[0]}/{t[2]}" + (f" ({t[1]})" if multi else "")
        body.append([name] + [format_seconds(cells.get((t, lab), math.nan)) for lab in labels])
    means = {}
    for label in labels:
        xs = [v for (_, lab), v in cells.items() if lab == label]
        means[label] = float(np.mean(xs))
    body.append(["mean"] + [format_seconds(means[lab]) for lab in labels])
    if "fbil" in labels:
        body.append(["ratio to FB-IL"] + [_ratio(cells, tasks, lab) for lab in labels])
    return markdown(["task", *map(display_label, labels)], body)


def _ratio(
    cells: dict[tuple[tuple[str, str, str], str], float],
    tasks: Sequence[tuple[str, str, str]],
    label: str,
) -> str:
    """The label's mean time over the tasks it ran on as a multiple of FB-IL's over the
    same tasks: a method run on some tasks only (the paper's settings, the baselines) is
    not compared with FB-IL's mean over the others."""
    shared = [t for t in tasks if (t, label) in cells and (t, "fbil") in cells]
    base = sum(cells[(t, "fbil")] for t in shared)
    if not shared or base <= 0:
        return "-"
    return f"x{sum(cells[(t, label)] for t in shared) / base:.1f}"


def level_text(level: float | None) -> str:
    return "nominal" if level is None else f"{level:g}"


def returns_table(rows: Sequence[ResultRow]) -> str:
    """Return per (domain, dataset, task, family, level) and label: "mean +- 95% CI" over seeds."""
    aggs = aggregate(rows)
    labels = ordered_labels(rows)
    keys = unique_keys(aggs)
    cell = {(a.domain, a.dataset, a.task, a.family, a.level, a.label): a for a in aggs}
    body = []
    for k in keys:
        row = [k[0], k[1], k[2], k[3], level_text(k[4])]
        for label in labels:
            a = cell.get((*k, label))
            row.append("-" if a is None else f"{a.mean:.1f} +- {a.ci95:.1f}")
        body.append(row)
    return markdown(
        ["domain", "dataset", "task", "family", "level", *map(display_label, labels)], body
    )


def unique_keys(aggs: Sequence[Aggregate]) -> list[tuple[str, str, str, str, float | None]]:
    keys: dict[tuple[str, str, str, str, float | None], None] = {}
    for a in aggs:
        keys.setdefault((a.domain, a.dataset, a.task, a.family, a.level), None)
    return list(keys)


def iqm_markdown(result: IqmResult) -> str:
    text = (
        f"IQM of per-seed mean return ({result.scope}; {result.tasks} (task, family, level) "
        "combinations as rliable's tasks, raw returns)\n\n"
    )
    if result.estimates:
        text += markdown(
            ["method", "IQM", "95% CI", "seeds", "combinations"],
            (
                [
                    display_label(e.label),
                    f"{e.iqm:.1f}",
                    f"[{e.low:.1f}, {e.high:.1f}]",
                    str(e.seeds),
                    str(e.tasks),
                ]
                for e in result.estimates
            ),
        )
    else:
        text += "No label has results for every task with the same number of seeds.\n"
    if result.notes:
        text += "\n" + "\n".join(f"- {n}" for n in result.notes) + "\n"
    return text


def iqm_summary(
    rows: Sequence[ResultRow],
    family: str | None = None,
    level: float | None = None,
    reps: int = IQM_REPS,
    seed: int = 0,
) -> str:
    """Markdown: each comparable label's IQM across tasks (default: every family and level
    pooled as extra tasks) with its stratified-bootstrap 95% CI; dropped labels noted below."""
    return iqm_markdown(iqm_estimates(rows, family, level, reps, seed))


def ceilings_table(ceilings: Sequence[CeilingRow]) -> str:
    """The experts' own returns per level (mean +- std over episodes: one evaluation, no
    seeds), the ceiling their imitators are read against."""
    body = [
        [
            c.domain,
            c.dataset,
            c.task,
            c.expert,
            c.family,
            level_text(c.level),
            f"{c.mean:.1f} +- {c.std:.1f}",
            str(c.episodes),
        ]
        for c in ceilings
    ]
    header = ["domain", "dataset", "task", "expert", "family", "level", "return (std)", "episodes"]
    return markdown(header, body)


def shares_table(rows: Sequence[ResultRow], ceilings: Sequence[CeilingRow]) -> str:
    """Each label's return as a share (%) of the expert itself at the same cell (a
    planner expert: the ceiling inside the shifted simulator), mean +- 95% CI over
    seeds, at the cells where the expert was evaluated; "" where it was nowhere."""
    experts = {r.expert for r in rows}
    at = {
        (c.domain, c.dataset, c.task, c.family, c.level): c.mean
        for c in ceilings
        if c.expert in experts
    }
    aggs = [a for a in aggregate(rows) if (a.domain, a.dataset, a.task, a.family, a.level) in at]
    labels = ordered_labels(rows)
    cell = {(a.domain, a.dataset, a.task, a.family, a.level, a.label): a for a in aggs}
    body = []
    for k in unique_keys(aggs):
        expert = at[k]
        row = [k[0], k[1], k[2], k[3], level_text(k[4]), f"{expert:.1f}"]
        for label in labels:
            a = cell.get((*k, label))
            if a is None or not expert > 0:  # a share of a non-positive (or NaN) return
                row.append("-")
            else:
                row.append(f"{100 * a.mean / expert:.0f} +- {100 * a.ci95 / expert:.0f}")
        body.append(row)
    if not body:
        return ""
    header = ["domain", "dataset", "task", "family", "level", "expert itself"]
    return markdown([*header, *map(display_label, labels)], body)


# The radii the certificates table shows: RBFM-Light's and RBFM-Heavy's default, 0.8
# (where the SoftTV ball holds every distribution on the demonstrations, so the Heavy
# value is the Bellman-flow worst case, solved exactly), and the smallest, where both
# balls bind. certificates.csv has every radius (DRBC's default 0.5 among them).
CERTIFICATE_RADII = (0.2, 0.8)


def _loss_text(values: list[float]) -> str:
    if not values:
        return "-"
    finite = [v for v in values if math.isfinite(v)]
    if len(finite) < len(values):  # inf: no finite bound found; nan: a broken policy
        return f"not finite ({len(values) - len(finite)} of {len(values)} seeds)"
    mean, ci = mean_ci(np.array(finite))
    if ci <= 1e-9 * abs(mean):  # equal values: the rounding residue of their mean, not spread
        ci = 0.0
    return f"{mean:.4g} +- {ci:.2g}"


def certificates_table(certs: Sequence[CertificateRow]) -> str:
    """Per (domain, dataset, task, expert, label): each policy's imitation loss on its
    demonstrations, nominal and in the worst case over the TV set (exact) and the Heavy set
    (an upper bound) at CERTIFICATE_RADII; mean +- 95% CI over seeds."""
    radii = [r for r in CERTIFICATE_RADII if any(c.radius == r for c in certs)]
    columns = [(kind, r) for kind in ("tv", "heavy") for r in radii]
    Key = tuple[str, str, str, str, str]
    groups: dict[Key, list[CertificateRow]] = {}
    for c in certs:
        groups.setdefault((c.domain, c.dataset, c.task, c.expert, c.label), []).append(c)
    tasks = {t: i for i, t in enumerate(unique(k[:4] for k in groups))}

    def order(k: Key) -> tuple[int, tuple[int, str, float, tuple[str | int, ...]]]:
        return (tasks[k[:4]], label_key(groups[k][0]))

    body = []
    for key in sorted(groups, key=order):
        mine = groups[key]
        nominal = {c.seed: c.nominal_loss for c in mine}
        row = [*key[:4], display_label(key[4]), _loss_text(list(nominal.values()))]
        for kind, r in columns:
            values = [c.worst_case_loss for c in mine if (c.set, c.radius) == (kind, r)]
            row.append(_loss_text(values))
        body.append(row)
    header = ["domain", "dataset", "task", "expert", "method", "nominal"]
    header += [f"{'TV' if kind == 'tv' else 'Heavy'} {r:g}" for kind, r in columns]
    return markdown(header, body)
