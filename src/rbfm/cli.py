"""The `rbfm` command line: a thin layer over the Python API."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

import numpy as np

from rbfm.errors import RbfmError


def _summary_with_tasks(path: str) -> str:
    from rbfm.data import load_dataset, relabel_all

    ds = load_dataset(path)
    rewards = relabel_all(ds, ds.domain.name)
    lines = [ds.summary(), "relabelled rewards (mean per step, mean episode return):"]
    per_episode = ds.episode_lengths - 1  # transitions per episode
    bounds = np.concatenate([[0], np.cumsum(per_episode)])
    for task, r in rewards.items():
        returns = np.add.reduceat(r, bounds[:-1]) if len(r) else np.zeros(1)
        lines.append(f"  {task:<14} {r.mean():.4f}   {returns.mean():8.1f}")
    return "\n".join(lines)


def _cmd_collect(args: argparse.Namespace) -> None:
    from rbfm.exploration import CollectConfig, collect

    cfg = CollectConfig(
        domain=args.domain,
        agent=args.agent,
        transitions=args.transitions,
        out=args.out,
        preset=args.preset,
        seed=args.seed,
        task=args.task,
        device=args.device,
    )
    start = time.perf_counter()
    buffer = collect(cfg, progress=not args.quiet)
    print(f"collected into {buffer} in {time.perf_counter() - start:.1f} s")
    print(_summary_with_tasks(str(buffer)))


def _cmd_info(args: argparse.Namespace) -> None:
    print(_summary_with_tasks(args.path))


def _cmd_envs(args: argparse.Namespace) -> None:
    from rbfm.envs import DOMAINS, PERTURBATIONS

    for name, spec in DOMAINS.items():
        print(
            f"{name}: obs {spec.obs_dim}, action {spec.action_dim}, "
            f"{spec.episode_length} steps; tasks: {', '.join(spec.tasks)}"
        )
        for (domain, family), p in PERTURBATIONS.items():
            if domain == name:
                levels = ", ".join(f"{x:g}" for x in p.levels)
                print(f"  {family:<19} {p.unit:<17} {p.field:<34} levels: {levels}")


def build_parser() -> argparse.ArgumentParser:
    from rbfm.envs import DOMAINS
    from rbfm.exploration import AGENTS, RND_PRESETS

    parser = argparse.ArgumentParser(
        prog="rbfm",
        description="Robust Behavior Foundation Models: reward-free data, FB pretraining, "
        "robust imitation under dynamics shift.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser(
        "collect",
        help="collect reward-free exploration data in ExORL format (resumable)",
        description="Collect episodes into OUT/<domain>/<agent>/buffer. Killed and rerun with "
        "the same arguments, it resumes where it stopped; a larger --transitions extends it.",
    )
    p.add_argument("--domain", required=True, choices=sorted(DOMAINS))
    p.add_argument("--agent", required=True, choices=AGENTS)
    p.add_argument(
        "--transitions",
        required=True,
        type=int,
        help="environment steps to collect (rounded up to whole 1000-step episodes)",
    )
    p.add_argument("--out", required=True, help="dataset root directory")
    p.add_argument(
        "--preset",
        default="cpu",
        choices=sorted(RND_PRESETS),
        help="RND network sizes: paper (URLB) or cpu (default)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--task",
        default=None,
        help="task whose reward is stored (default: the domain's first task)",
    )
    p.add_argument("--device", default=None, help="torch device (default: cuda if available)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_collect)

    p = sub.add_parser("info", help="summarise a dataset, with every task's relabelled rewards")
    p.add_argument("path", help="a buffer directory or any directory above it")
    p.set_defaults(func=_cmd_info)

    p = sub.add_parser("envs", help="list domains, tasks and perturbation families")
    p.set_defaults(func=_cmd_envs)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from absl import logging as absl_logging

    absl_logging.set_verbosity(absl_logging.ERROR)  # dm_control's XML deprecation chatter
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except RbfmError as e:
        print(f"rbfm {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            f"rbfm {args.command}: interrupted; rerun the same command to resume", file=sys.stderr
        )
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
