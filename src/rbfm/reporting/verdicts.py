"""Does the paper's ordering hold? RBFM-Heavy > RBFM-Light > FB-IL as perturbations grow,
read from an experiment's results table with rliable's IQM and stratified-bootstrap CIs.

A pair of methods is ordered only where their 95% CIs are disjoint; otherwise the data
cannot tell them apart. Each scope (one expert source, domain and dataset) is read twice:
over every family and level, and at each family's strongest perturbation only (the level
farthest from nominal present in the table), where the paper says the robust methods
gain most. `gap_table` tests the claim that the gap widens with the perturbation: each
robust method's return minus FB-IL's, per step away from nominal. `baselines_table` reads
the FB methods against the single-task baselines (Q2) the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rbfm.envs.perturbations import get_perturbation
from rbfm.errors import ConfigError
from rbfm.evaluation.aggregate import mean_ci
from rbfm.experiments.table import ResultRow, method_label
from rbfm.methods import BASELINE_METHODS, FB_METHODS, display_label
from rbfm.reporting.report import markdown
from rbfm.reporting.stats import IQM_REPS, IqmEstimate, iqm_estimates, nonempty, unique

# The paper's claim, strongest first: each method should beat the next.
PAPER_ORDER = ("rbfm-heavy", "rbfm-light", "fbil")
PAIRS = (("rbfm-heavy", "fbil"), ("rbfm-light", "fbil"), ("rbfm-heavy", "rbfm-light"))


def _gap(r: ResultRow) -> float:
    """The level's distance from its family's nominal, rounded so that levels computed two
    ways match (0 for nominal-only rows)."""
    if r.level is None:
        return 0.0
    return round(abs(r.level - get_perturbation(r.domain, r.family).nominal), 9)


def strongest(rows: Sequence[ResultRow]) -> list[ResultRow]:
    """The rows at each (domain, dataset, task, family)'s level farthest from nominal among
    those every label of that combination has (an unfinished cell does not make the others
    incomparable); nominal-only rows are dropped."""
    levels: dict[tuple[str, str, str, str], dict[str, set[float]]] = {}
    for r in rows:
        if r.level is not None:
            key = (r.domain, r.dataset, r.task, r.family)
            levels.setdefault(key, {}).setdefault(r.label, set()).add(_gap(r))
    far = {
        key: max(set.intersection(*per_label.values()), default=None)
        for key, per_label in levels.items()
    }
    return [
        r
        for r in rows
        if r.level is not None and far[(r.domain, r.dataset, r.task, r.family)] == _gap(r)
    ]


def compare(a: IqmEstimate, b: IqmEstimate) -> str:
    """ ">" or "<" where the two 95% CIs are disjoint, "~" where they overlap."""
    if a.low > b.high:
        return ">"
    if a.high < b.low:
        return "<"
    return "~"


def verdict(signs: dict[tuple[str, str], str]) -> str:
    """One sentence on the paper's ordering from the three pairwise comparisons."""
    held = [p for p in PAIRS if signs.get(p) == ">"]
    reversed_ = [p for p in PAIRS if signs.get(p) == "<"]
    if len(held) == len(PAIRS):
        return "the paper's ordering holds (every pair disjoint)"
    if len(reversed_) == len(PAIRS):
        return "reversed: " + ", ".join(_pair_text(p, "<") for p in reversed_)
    if reversed_ and not held:
        text = ", ".join(_pair_text(p, "<") for p in reversed_)
        return f"partly reversed: {text}; the rest overlap"
    if reversed_:
        return "mixed: " + ", ".join(
            [_pair_text(p, ">") for p in held] + [_pair_text(p, "<") for p in reversed_]
        )
    if held:
        return "partly: " + ", ".join(_pair_text(p, ">") for p in held) + "; the rest overlap"
    return "cannot tell: every CI overlaps"


def _pair_text(pair: tuple[str, str], sign: str) -> str:
    return f"{display_label(pair[0])} {sign} {display_label(pair[1])}"


@dataclass(frozen=True)
class Reading:
    """The three methods' IQMs in one scope and what they say about the paper's ordering."""

    expert: str
    domain: str
    dataset: str
    task: str  # one task, or "all" where the scope pools the model's tasks
    levels: str  # "all" or "strongest"
    tasks: int  # (task, family, level) combinations pooled
    estimates: dict[str, IqmEstimate]
    signs: dict[tuple[str, str], str]

    @property
    def verdict(self) -> str:
        if len(self.estimates) < len(PAPER_ORDER):
            missing = [display_label(m) for m in PAPER_ORDER if m not in self.estimates]
            return "not comparable: no complete results for " + ", ".join(missing)
        return verdict(self.signs)


def _scope(r: ResultRow, per_task: bool) -> tuple[str, str, str, str]:
    return (r.expert, r.domain, r.dataset, r.task if per_task else "all")


def readings(
    rows: Sequence[ResultRow], reps: int = IQM_REPS, per_task: bool = False
) -> list[Reading]:
    """Per (expert, domain, dataset), or per (expert, domain, dataset, task) with
    `per_task`, over all levels and at the strongest ones."""
    nonempty(rows)
    out = []
    for key in unique(_scope(r, per_task) for r in rows):
        mine = [r for r in rows if _scope(r, per_task) == key and r.label in PAPER_ORDER]
        for levels, chosen in (("all", mine), ("strongest", strongest(mine))):
            if not chosen:
                continue
            result = iqm_estimates(chosen, reps=reps)
            est = {e.label: e for e in result.estimates}
            signs = {(a, b): compare(est[a], est[b]) for a, b in PAIRS if a in est and b in est}
            out.append(Reading(*key, levels, result.tasks, est, signs))
    return out


def several_tasks(rows: Sequence[ResultRow]) -> bool:
    """Whether some (expert, domain, dataset) has results on more than one task, so that
    per-task readings say more than the pooled ones."""
    return len(unique(_scope(r, True) for r in rows)) > len(unique(_scope(r, False) for r in rows))


def readings_table(rows: Sequence[ResultRow], reps: int = IQM_REPS, per_task: bool = False) -> str:
    """Markdown: one line per reading, each method's IQM [95% CI] and the verdict; with
    `per_task`, a reading per task (a "task" column)."""
    found = readings(rows, reps, per_task)
    if not found:
        raise ConfigError("no FB-IL, RBFM-Light or RBFM-Heavy results to compare")

    def cell(r: Reading, m: str) -> str:
        e = r.estimates.get(m)
        return "-" if e is None else _interval(e)

    body = [
        [
            r.expert,
            r.domain,
            r.dataset,
            *([r.task] if per_task else []),
            r.levels,
            str(r.tasks),
            *(cell(r, m) for m in reversed(PAPER_ORDER)),
            r.verdict,
        ]
        for r in found
    ]
    header = [
        "expert",
        "domain",
        "dataset",
        *(["task"] if per_task else []),
        "levels",
        "combinations",
        *(display_label(m) for m in reversed(PAPER_ORDER)),
        "paper's ordering",
    ]
    return markdown(header, body)


def _gap_cells(rows: Sequence[ResultRow], method: str) -> tuple[list[str], int]:
    """`method` minus FB-IL at each step from nominal, averaged per seed over the (domain,
    dataset, task, family) combinations where every seed has both methods at that step;
    "mean +- CI" across seeds, and how many (combination, step) pairs were left out."""
    value: dict[tuple[str, int, tuple[str, str, str, str], float], float] = {}
    steps: dict[tuple[str, str, str, str], set[float]] = {}
    for r in rows:
        if r.level is not None:
            key = (r.domain, r.dataset, r.task, r.family)
            steps.setdefault(key, set()).add(_gap(r))
            value[(r.label, r.seed, key, _gap(r))] = r.mean
    seeds = sorted({r.seed for r in rows})
    order = {key: sorted(v) for key, v in steps.items()}
    cells, dropped = [], 0
    for k in range(max((len(v) for v in order.values()), default=0)):
        combos = []
        for key, gaps in order.items():
            if k >= len(gaps):
                continue
            if all((m, s, key, gaps[k]) in value for m in (method, "fbil") for s in seeds):
                combos.append((key, gaps[k]))
            else:
                dropped += 1
        if not combos:
            cells.append("-")
            continue
        per_seed = [
            float(np.mean([value[(method, s, c, g)] - value[("fbil", s, c, g)] for c, g in combos]))
            for s in seeds
        ]
        mean, ci = mean_ci(np.array(per_seed))
        star = "*" if len(per_seed) > 1 and abs(mean) > ci else ""
        cells.append(f"{mean:+.1f} +- {ci:.1f}{star}")
    return cells, dropped


def gap_table(rows: Sequence[ResultRow]) -> str:
    """Markdown: per expert, scope (every domain pooled, then each (domain, dataset) when
    there are several, then each of its tasks when it has several) and robust method, its
    return minus FB-IL's at the k-th level away from nominal (k = 0 nominal ... the
    strongest), averaged over the scope's (task, family) combinations; mean +- 95% t-CI
    across seeds, paired by seed (a seed's methods imitate the same drawn demonstrations),
    over the combinations that every seed has for both methods. A "*" marks a CI
    excluding 0."""
    nonempty(rows)
    body = []
    dropped = 0
    for expert in unique(r.expert for r in rows):
        mine = [r for r in rows if r.expert == expert and r.label in PAPER_ORDER]
        models = unique((r.domain, r.dataset) for r in mine)
        # (scope, rows, whether its left-out pairs are counted: a task's are its model's)
        scopes = [("all", mine, False)] if len(models) > 1 else []
        for d, ds in models:
            model_rows = [r for r in mine if (r.domain, r.dataset) == (d, ds)]
            scopes.append((f"{d} ({ds})", model_rows, True))
            tasks = unique(r.task for r in model_rows)
            if len(tasks) > 1:
                # Pooling over tasks can average a gain on one away against a loss on another.
                scopes += [
                    (f"{d} ({ds}) {task}", [r for r in model_rows if r.task == task], False)
                    for task in tasks
                ]
        for scope, chosen, counted in scopes:
            present = {r.label for r in chosen}
            for method in (m for m in PAPER_ORDER[:2] if m in present):
                cells, left_out = _gap_cells(chosen, method)
                dropped += left_out if counted else 0
                if any(c != "-" for c in cells):
                    body.append([expert, scope, f"{display_label(method)} - FB-IL", *cells])
    if not body:
        return "No (task, family, level) has FB-IL and RBFM-Light or RBFM-Heavy for every seed.\n"
    width = max(len(b) for b in body) - 3
    header = ["expert", "scope", "difference", "nominal", *(f"step {k}" for k in range(1, width))]
    note = (
        f"\n- left out: {dropped} (combination, level) pairs without both methods for every seed\n"
        if dropped
        else ""
    )
    return markdown(header, [b + ["-"] * (len(header) - len(b)) for b in body]) + note


# The label of a method run at the paper's settings (`MethodEntry(settings="paper")`).
PAPER_SETTINGS = "paper"


def settings_table(rows: Sequence[ResultRow], reps: int = IQM_REPS) -> str:
    """Markdown: what convergence changes. Per expert, domain, dataset and robust method
    run both ways, its IQM [95% CI] at rbfm's converged default settings and at the paper's
    (Tables 5-7), over every family and level and at the strongest levels, and which is
    ahead where the CIs are disjoint. Empty when no method was run both ways."""
    nonempty(rows)
    body = []
    for key in unique((r.expert, r.domain, r.dataset) for r in rows):
        mine = [r for r in rows if (r.expert, r.domain, r.dataset) == key]
        for method in PAPER_ORDER[:2]:
            paper = method_label(method, PAPER_SETTINGS)
            both = [r for r in mine if r.label in (method, paper)]
            if {r.label for r in both} != {method, paper}:
                continue
            for levels, chosen in (("all", both), ("strongest", strongest(both))):
                est = {e.label: e for e in iqm_estimates(chosen, reps=reps).estimates}
                if set(est) != {method, paper}:
                    continue
                sign = compare(est[method], est[paper])
                text = {">": "default ahead", "<": "paper's ahead", "~": "CIs overlap"}[sign]
                body.append(
                    [
                        *key,
                        levels,
                        display_label(method),
                        *(_interval(est[m]) for m in (method, paper)),
                        text,
                    ]
                )
    if not body:
        return ""
    header = ["expert", "domain", "dataset", "levels", "method", "default settings"]
    return markdown([*header, "paper's settings", "reading"], body)


def _interval(e: IqmEstimate) -> str:
    return f"{e.iqm:.1f} [{e.low:.1f}, {e.high:.1f}]"


def _against_baselines(est: dict[str, IqmEstimate]) -> str:
    """Whether every FB method's CI lies above every baseline's; else the pairs that do
    not, with their sign."""
    pairs = [(f, b) for f in FB_METHODS if f in est for b in BASELINE_METHODS if b in est]
    if not pairs:
        return "not comparable"
    others = [(f, b, compare(est[f], est[b])) for f, b in pairs]
    others = [o for o in others if o[2] != ">"]
    if not others:
        return "every FB method > every baseline"
    return "not separated: " + ", ".join(
        f"{display_label(f)} {sign} {display_label(b)}" for f, b, sign in others
    )


def baselines_table(rows: Sequence[ResultRow], reps: int = IQM_REPS) -> str:
    """Markdown: Q2. Per expert, domain, dataset and family where a single-task baseline
    ran, every method's IQM [95% CI] at its default settings over the scope's tasks (then
    per task where there are several), over every level and at the strongest, and whether
    each FB method lies above each baseline with disjoint CIs. Empty without baselines."""
    nonempty(rows)
    methods = [m for m in (*FB_METHODS, *BASELINE_METHODS) if any(r.label == m for r in rows)]
    body = []
    for key in unique(
        (r.expert, r.domain, r.dataset, r.family) for r in rows if r.label in BASELINE_METHODS
    ):
        here = [r for r in rows if (r.expert, r.domain, r.dataset, r.family) == key]
        # Only the tasks a baseline ran on: elsewhere there is nothing to compare with.
        tasks = unique(r.task for r in here if r.label in BASELINE_METHODS)
        mine = [r for r in here if r.task in tasks and r.label in methods]
        scopes = [("all", mine)] if len(tasks) > 1 else []
        scopes += [(t, [r for r in mine if r.task == t]) for t in tasks]
        for task, chosen in scopes:
            for levels, picked in (("all", chosen), ("strongest", strongest(chosen))):
                if not picked:
                    continue
                est = {e.label: e for e in iqm_estimates(picked, reps=reps).estimates}
                cells = [_interval(est[m]) if m in est else "-" for m in methods]
                body.append([*key, task, levels, *cells, _against_baselines(est)])
    if not body:
        return ""
    header = ["expert", "domain", "dataset", "family", "task", "levels"]
    return markdown([*header, *(display_label(m) for m in methods), "reading"], body)
