"""The statistics of an experiment's results table: the paper's order of labels,
families and levels; the mean over seeds with its 95% CI per point; and the IQM across
tasks with rliable's stratified-bootstrap CI. Figures (`figures.py`) and the markdown
report (`report.py`) both read these."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from rbfm.envs import NOMINAL
from rbfm.envs import families as domain_families
from rbfm.errors import ConfigError
from rbfm.evaluation.aggregate import mean_ci, stratified_iqm
from rbfm.experiments.table import CertificateRow, ResultRow
from rbfm.methods import NAMES

IQM_REPS = 2000
T = TypeVar("T")


@dataclass(frozen=True)
class Aggregate:
    """One point of a figure: a label's return at one level, over inference seeds."""

    domain: str
    dataset: str
    task: str
    label: str
    method: str
    family: str
    level: float | None
    mean: float  # mean over seeds of the per-seed mean returns
    ci95: float  # half-width of the 95% Student-t CI across seeds (0 for one seed)
    seeds: int
    episodes: int  # evaluation episodes, summed over seeds
    unstable: int  # episodes ended by a physics failure, summed over seeds


def method_rank(method: str) -> int:
    return NAMES.index(method) if method in NAMES else len(NAMES)


def label_key(row: ResultRow | CertificateRow) -> tuple[int, str, float, tuple[str | int, ...]]:
    """A row's label in the paper's order: method, then eps, then variant, its numbers
    compared as numbers (adapt-k2 before adapt-k10)."""
    eps = -math.inf if row.eps is None else row.eps
    variant = tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", row.variant))
    return (method_rank(row.method), row.method, eps, variant)


def ordered_labels(rows: Iterable[ResultRow]) -> list[str]:
    """The labels present, in the paper's order (method, then eps, then variant)."""
    first: dict[str, ResultRow] = {}
    for r in rows:
        first.setdefault(r.label, r)
    return sorted(first, key=lambda label: label_key(first[label]))


def family_key(domain: str, family: str) -> tuple[int, int, str]:
    if family == NOMINAL:
        return (0, 0, family)
    try:
        known = domain_families(domain)
    except ConfigError:
        known = ()
    return (1, known.index(family) if family in known else len(known), family)


def ordered_families(rows: Iterable[ResultRow], domain: str) -> list[str]:
    """The families present: nominal first, then the registry's order."""
    return sorted({r.family for r in rows}, key=lambda f: family_key(domain, f))


def unique(values: Iterable[T]) -> list[T]:
    """Distinct values in order of first appearance."""
    return list(dict.fromkeys(values))


def level_key(level: float | None) -> float:
    return -math.inf if level is None else level


def require(rows: Sequence[ResultRow], field: str, value: str, context: str = "") -> None:
    present = unique(str(getattr(r, field)) for r in rows)
    if value not in present:
        where = f" {context}" if context else ""
        raise ConfigError(
            f"no results for {field} {value!r}{where}; present: {', '.join(present) or 'none'}"
        )


def nonempty(rows: Sequence[ResultRow]) -> None:
    if not rows:
        raise ConfigError("no result rows to draw or tabulate")


def select(
    rows: Sequence[ResultRow],
    domain: str,
    dataset: str | None = None,
    task: str | None = None,
    family: str | None = None,
) -> tuple[list[ResultRow], str]:
    """The rows of one domain (and one dataset: the first found unless given), validated."""
    nonempty(rows)
    require(rows, "domain", domain)
    mine = [r for r in rows if r.domain == domain]
    if dataset is None:
        dataset = mine[0].dataset
    require(mine, "dataset", dataset, f"in domain {domain!r}")
    mine = [r for r in mine if r.dataset == dataset]
    if task is not None:
        require(mine, "task", task, f"in {domain}/{dataset}")
        mine = [r for r in mine if r.task == task]
    if family is not None:
        require(mine, "family", family, f"in {domain}/{dataset}" + (f"/{task}" if task else ""))
        mine = [r for r in mine if r.family == family]
    return mine, dataset


def aggregate(rows: Sequence[ResultRow]) -> list[Aggregate]:
    """Mean over seeds of the per-seed mean returns (95% t CI), per (domain, dataset, task,
    label, family, level); sorted by domain, dataset, task, family, label (paper order), level.
    A seed appearing twice in one group is an error (a table with duplicated rows)."""
    nonempty(rows)
    groups: dict[tuple[str, str, str, str, str, float | None], list[ResultRow]] = {}
    for r in rows:
        groups.setdefault((r.domain, r.dataset, r.task, r.label, r.family, r.level), []).append(r)
    order = {label: i for i, label in enumerate(ordered_labels(rows))}
    tasks = {t: i for i, t in enumerate(unique(r.task for r in rows))}
    datasets = {d: i for i, d in enumerate(unique(r.dataset for r in rows))}
    out = []
    for (domain, dataset, task, label, family, level), members in groups.items():
        seeds = Counter(r.seed for r in members)
        dup = [s for s, n in seeds.items() if n > 1]
        if dup:
            raise ConfigError(
                f"{domain}/{dataset}/{task} {label} {family}={level}: seed(s) "
                f"{sorted(dup)} appear more than once in the results"
            )
        mean, ci = mean_ci(np.array([r.mean for r in members]))
        out.append(
            Aggregate(
                domain=domain,
                dataset=dataset,
                task=task,
                label=label,
                method=members[0].method,
                family=family,
                level=level,
                mean=mean,
                ci95=ci,
                seeds=len(members),
                episodes=sum(r.episodes for r in members),
                unstable=sum(r.unstable for r in members),
            )
        )
    out.sort(
        key=lambda a: (
            a.domain,
            datasets[a.dataset],
            tasks[a.task],
            family_key(a.domain, a.family),
            order[a.label],
            level_key(a.level),
        )
    )
    return out


@dataclass(frozen=True)
class IqmEstimate:
    """A label's IQM across tasks and seeds, with its stratified-bootstrap 95% CI."""

    label: str
    iqm: float
    low: float
    high: float
    seeds: int
    tasks: int


def same_level(a: float | None, b: float) -> bool:
    return a is not None and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


def iqm_scores(
    rows: Sequence[ResultRow], family: str | None = None, level: float | None = None
) -> tuple[dict[str, np.ndarray], list[str]]:
    """Per comparable label, the (seeds x tasks) matrix of per-seed mean returns, where a task
    is a (domain, dataset, task, family, level) combination; and notes on the labels dropped
    (missing tasks, uneven or too few seeds, non-finite scores)."""
    nonempty(rows)
    if family is not None:
        require(rows, "family", family)
        rows = [r for r in rows if r.family == family]
    if level is not None:
        rows = [r for r in rows if same_level(r.level, level)]
        if not rows:
            raise ConfigError(
                f"no results at level {level:g}" + (f" of {family}" if family else "")
            )
    tasks = unique((r.domain, r.dataset, r.task, r.family, r.level) for r in rows)
    tasks.sort(key=lambda t: (t[0], t[1], t[2], family_key(t[0], t[3]), level_key(t[4])))
    notes: list[str] = []
    kept: dict[str, np.ndarray] = {}
    for label in ordered_labels(rows):
        per_task: dict[tuple[str, str, str, str, float | None], dict[int, float]] = {}
        for r in rows:
            if r.label == label:
                key = (r.domain, r.dataset, r.task, r.family, r.level)
                per_task.setdefault(key, {})[r.seed] = r.mean
        missing = [t for t in tasks if t not in per_task]
        if missing:
            notes.append(
                f"{label}: dropped, results for {len(tasks) - len(missing)} of {len(tasks)} "
                "combinations"
            )
            continue
        counts = {len(per_task[t]) for t in tasks}
        if len(counts) > 1:
            notes.append(f"{label}: dropped, uneven seeds across tasks ({sorted(counts)})")
            continue
        scores = np.array([[per_task[t][s] for s in sorted(per_task[t])] for t in tasks]).T
        if not np.all(np.isfinite(scores)):
            notes.append(f"{label}: dropped, non-finite scores")
            continue
        kept[label] = scores
    if kept:
        n_seeds = Counter(s.shape[0] for s in kept.values())
        runs = max(n_seeds, key=lambda n: (n_seeds[n], n))
        for label in list(kept):
            if kept[label].shape[0] != runs:
                notes.append(
                    f"{label}: dropped, {kept[label].shape[0]} seeds where the others have {runs}"
                )
                del kept[label]
    return kept, notes


@dataclass(frozen=True)
class IqmResult:
    """The IQM comparison of one selection of the results."""

    scope: str  # which families and levels were pooled
    tasks: int  # (domain, dataset, task, family, level) combinations
    estimates: tuple[IqmEstimate, ...]  # comparable labels, paper order
    notes: tuple[str, ...]  # labels dropped, and why


def iqm_estimates(
    rows: Sequence[ResultRow],
    family: str | None = None,
    level: float | None = None,
    reps: int = IQM_REPS,
    seed: int = 0,
) -> IqmResult:
    """Each comparable label's interquartile mean of per-seed mean returns across tasks (see
    `iqm_scores`), with rliable's stratified-bootstrap 95% percentile CI over `reps`
    resamples drawn with a fixed `seed`."""
    scores, notes = iqm_scores(rows, family, level)
    scope = "all families and levels" if family is None else family
    if level is not None:
        scope += f" at level {level:g}"
    if not scores:
        return IqmResult(scope, 0, (), tuple(notes))
    found = stratified_iqm(scores, reps, seed)
    estimates = tuple(
        IqmEstimate(label, *found[label], seeds=s.shape[0], tasks=s.shape[1])
        for label, s in scores.items()
    )
    return IqmResult(scope, estimates[0].tasks, estimates, tuple(notes))
