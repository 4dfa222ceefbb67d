"""Commands that run the pipeline or read its results: quickstart, experiment, plot."""

from __future__ import annotations

import argparse

from rbfm.cli.options import REQUIRED, Use, call, command
from rbfm.experiments.spec import PRESETS
from rbfm.quickstart import QuickstartConfig


@command(
    "quickstart",
    "the whole pipeline on cheetah in 0.5-2.5 minutes: demonstrations to a perturbation sweep",
    "On the cpu-sized cheetah: 10 noisy demonstrations of its walk policy; FB-IL, "
    "RBFM-Light and RBFM-Heavy (3 seeds) under six joint-friction levels; the table, a "
    "reading, OUT/sweep.csv and OUT/sweep.png (0.5-2.5 minutes on 2 cores; docs/quickstart.md).",
    out=Use(
        QuickstartConfig.out,
        "folder for the demonstrations, task vectors, table and plot",
        check="folder",
    ),
    checkpoint=Use(None, "FB model (default: the shipped cheetah:rnd-v1)"),
)
def quickstart(args: argparse.Namespace) -> None:
    from rbfm.quickstart import quickstart, table

    cfg = QuickstartConfig(out=args.out, checkpoint=args.checkpoint)
    print("\n" + table(cfg, quickstart(cfg)))


@command(
    "experiment",
    "run a slice of the paper's grid (a preset or a TOML spec), resumably; table and figures",
    "Runs demonstrations -> task inference / baseline training -> evaluation as cells with "
    "stable ids, each stored atomically under --out. Killed and rerun, it skips finished "
    f"cells. Presets: {', '.join(PRESETS)} (see docs/experiments.md).",
    spec=REQUIRED,
    out=Use(None, "run directory (default: runs/experiments/NAME)", check="folder"),
    workers=Use(None, "local worker processes (default: the machine's cores; 0: in this process)"),
    ray=None,
    seeds=None,
    tasks=None,
    episodes=Use(None, "override: episodes per level"),
    steps=Use(None, "override: every method's steps"),
    eval_batch=Use(check="count"),
    figures=False,
    dry_run=False,
    forget_stale=False,
    quiet=False,
)
def experiment(args: argparse.Namespace) -> None:
    from rbfm.experiments import load_spec
    from rbfm.experiments.spec import with_overrides
    from rbfm.reporting.experiment import run_and_report

    spec = with_overrides(load_spec(args.spec), args.seeds, args.episodes, args.steps, args.tasks)
    for line in call(run_and_report, args, spec=spec, progress=not args.quiet):
        print(line)


@command(
    "plot",
    "plot a pretraining run's IQM curve, or tables from `evaluate`, to a PNG",
    inputs=REQUIRED,
    out=Use(REQUIRED, "PNG file to write", check="file, folder made"),
    title=None,
)
def plot(args: argparse.Namespace) -> None:
    from rbfm.reporting.plots import plot_inputs

    print(f"wrote {plot_inputs(args.inputs, args.out, args.title)}")
