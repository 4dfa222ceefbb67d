"""Commands that run the pipeline or read its results: quickstart, experiment, plot."""

from __future__ import annotations

import argparse
from pathlib import Path

from rbfm import checks, locks
from rbfm.cli.options import REQUIRED, Use, command
from rbfm.experiments.spec import PRESETS
from rbfm.quickstart import QuickstartConfig


@command(
    "quickstart",
    "the whole pipeline on cheetah in 0.5-2.5 minutes: demonstrations to a perturbation sweep",
    "On the cpu-sized cheetah: 10 noisy demonstrations of its walk policy; FB-IL, "
    "RBFM-Light and RBFM-Heavy (3 seeds) under six joint-friction levels; the table, a "
    "reading, OUT/sweep.csv and OUT/sweep.png (0.5-2.5 minutes on 2 cores; docs/quickstart.md).",
    out=Use(QuickstartConfig.out, "folder for the demonstrations, task vectors, table and plot"),
    checkpoint=Use(None, "FB model (default: the shipped cheetah:rnd-v1)"),
)
def quickstart(args: argparse.Namespace) -> None:
    from rbfm.quickstart import quickstart, table

    checks.out_dir(args.out)
    cfg = QuickstartConfig(out=args.out, checkpoint=args.checkpoint)
    print("\n" + table(cfg, quickstart(cfg)))


@command(
    "experiment",
    "run a slice of the paper's grid (a preset or a TOML spec), resumably; table and figures",
    "Runs demonstrations -> task inference / baseline training -> evaluation as cells with "
    "stable ids, each stored atomically under --out. Killed and rerun, it skips finished "
    f"cells. Presets: {', '.join(PRESETS)} (see docs/experiments.md).",
    spec=REQUIRED,
    out=Use(None, "run directory (default: runs/experiments/NAME)"),
    workers=Use(None, "local worker processes (default: the machine's cores; 0: in this process)"),
    ray=None,
    seeds=None,
    tasks=None,
    episodes=Use(None, "override: episodes per level"),
    steps=Use(None, "override: every method's steps"),
    eval_batch=None,
    figures=False,
    dry_run=False,
    quiet=False,
)
def experiment(args: argparse.Namespace) -> None:
    from rbfm.experiments import load_spec, make_executor, plan, run_experiment
    from rbfm.experiments.plan import describe
    from rbfm.experiments.runner import EVAL_BATCH, pending
    from rbfm.experiments.spec import with_overrides

    spec = with_overrides(load_spec(args.spec), args.seeds, args.episodes, args.steps, args.tasks)
    eval_batch = EVAL_BATCH if args.eval_batch is None else args.eval_batch
    checks.count("--eval-batch", eval_batch)
    out = Path(args.out or f"runs/experiments/{spec.name}")
    checks.out_dir(out)
    p = plan(spec)  # every field checked before anything starts
    print(describe(p))
    if args.dry_run:
        return print(pending(p, out))
    with locks.hold(out):  # refused before any worker starts; the figures are this run's too
        executor = make_executor(args.workers, args.ray)
        print(f"running on {executor.name} into {out}")
        summary = run_experiment(spec, out, executor, not args.quiet, eval_batch)
        print(summary.describe())
        if args.figures:
            from rbfm.reporting import draw_run_figures

            for path in draw_run_figures(out, summary.results):
                print(f"wrote {path}")


@command(
    "plot",
    "plot a pretraining run's IQM curve, or tables from `evaluate`, to a PNG",
    inputs=REQUIRED,
    out=Use(REQUIRED, "PNG file to write"),
    title=None,
)
def plot(args: argparse.Namespace) -> None:
    from rbfm.reporting.plots import plot_inputs

    checks.out_file(args.out, made=True)
    print(f"wrote {plot_inputs(args.inputs, args.out, args.title)}")
