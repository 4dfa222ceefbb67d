"""`rbfm experiment`: a spec's run, then its figures (the reporting layer: the runner
computes cells and knows nothing of figures)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from rbfm import checks
from rbfm.experiments.executors import make_executor
from rbfm.experiments.plan import describe, plan
from rbfm.experiments.runner import EVAL_BATCH, pending, run_experiment
from rbfm.experiments.spec import ExperimentSpec
from rbfm.locks import hold
from rbfm.reporting import draw_run_figures


def run_and_report(
    spec: ExperimentSpec,
    out: str | os.PathLike[str] | None = None,
    workers: int | None = None,
    ray: str | None = None,
    eval_batch: int | None = None,
    figures: bool = False,
    dry_run: bool = False,
    progress: bool = True,
    forget_stale: bool = False,
) -> Iterator[str]:
    """`rbfm experiment`: the plan, then what a run into `out` (default:
    runs/experiments/NAME) finds done (`dry_run`), or the run on `workers` local processes
    or on `ray` (`eval_batch` episodes per evaluation job; default EVAL_BATCH), its
    summary and, with `figures`, its figures: what to print, each line as it comes.
    `forget_stale` computes again the finished cells whose demonstrations have changed
    (`run_experiment`)."""
    out = Path(out or f"runs/experiments/{spec.name}")
    checks.out_dir(out)
    if workers is not None:  # before the run's folder and lock are made (and in a dry run)
        checks.in_range("experiment", "workers", workers, 0, integer=True)
    p = plan(spec)  # every field checked before anything starts
    yield describe(p)
    if dry_run:
        yield pending(p, out)
        return
    executor = make_executor(workers, ray)  # no Ray cluster: refused before the folder
    with hold(out):  # refused before any worker starts; the figures are this run's too
        yield f"running on {executor.name} into {out}"
        batch = EVAL_BATCH if eval_batch is None else eval_batch
        summary = run_experiment(spec, out, executor, progress, batch, forget_stale)
        yield summary.describe()
        if figures:
            for path in draw_run_figures(out, summary.results):
                yield f"wrote {path}"
