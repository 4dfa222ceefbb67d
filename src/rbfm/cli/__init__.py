"""The `rbfm` command line: a thin layer over the Python API. Options are declared once
(rbfm.cli.options); each module holds a group of commands."""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Sequence

from rbfm.errors import RbfmError

# The pipeline's order, as `rbfm --help` lists the commands.
ORDER = (
    "quickstart", "collect", "pretrain", "zero-shot", "demos", "infer", "adapt", "evaluate",
    "experiment", "render", "export", "plot", "info", "pack", "unpack", "envs",
    "models",
)  # fmt: skip

# Small networks on one state batch at a time: extra torch threads only spin (zero-shot
# on 2 episodes: 11.2 s on two threads, 4.6 s on one). OMP_NUM_THREADS, when set, wins.
ONE_THREAD_COMMANDS = frozenset({"zero-shot", "demos", "infer", "adapt", "evaluate", "render"})


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rbfm")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    from rbfm.cli import data, policies, runs  # noqa: F401  (they register the commands)
    from rbfm.cli.options import add_command

    parser = argparse.ArgumentParser(
        prog="rbfm",
        description="Robust Behavior Foundation Models: reward-free data, FB pretraining, "
        "robust imitation under dynamics shift.",
    )
    parser.add_argument("--version", action="version", version=f"rbfm {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in ORDER:
        add_command(sub, name)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    import rbfm.checks

    given = sys.argv[1:] if argv is None else list(argv)
    if given[:1] == ["render"] and rbfm.GL_DEFAULTED:
        # Before dm_control is first imported (below): it fixes its backend then.
        os.environ["MUJOCO_GL"] = "egl"
    # A library warning on the command line: its text, not the source line that raised it.
    warnings.formatwarning = lambda message, *_, **__: f"rbfm: warning: {message}\n"
    if problem := rbfm.checks.mujoco_gl():  # before the parser imports MuJoCo
        print(f"rbfm: error: {problem}", file=sys.stderr)
        return 2
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:  # bare `rbfm`: the commands and what each does
        parser.print_help()
        return 2
    if args.command in ONE_THREAD_COMMANDS and "OMP_NUM_THREADS" not in os.environ:
        import torch

        torch.set_num_threads(1)
    try:
        args.func(args)
    except (RbfmError, FloatingPointError) as e:  # the latter: a non-finite result, refused
        print(f"rbfm {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"rbfm {args.command}: interrupted; rerun it to resume", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into a reader that stopped (`| head`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    return 0
