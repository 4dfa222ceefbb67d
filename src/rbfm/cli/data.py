"""Commands for data and pretraining: collect, pretrain, info, pack, unpack, and the
listings envs and models."""

from __future__ import annotations

import argparse
import os
import time

import torch

from rbfm import checks
from rbfm.cli.options import REQUIRED, Use, call, command
from rbfm.data import describe_with_tasks
from rbfm.envs import DOMAINS
from rbfm.envs.dynamics import PRESETS as DYNAMICS
from rbfm.envs.perturbations import listing
from rbfm.exploration import AGENTS, RND_PRESETS, CollectConfig
from rbfm.fb import FB_PRESETS
from rbfm.fb.checkpoint import models_table
from rbfm.training.pretrain import PretrainConfig


@command(
    "collect",
    "collect reward-free exploration data in ExORL format (resumable)",
    "Into OUT/<domain>/<agent>/buffer; rerun, it resumes; a larger --transitions extends it.",
    config=CollectConfig,
    domain=Use(REQUIRED, choices=sorted(DOMAINS)),
    agent=Use(REQUIRED, choices=list(AGENTS)),
    transitions=Use(REQUIRED, "environment steps (rounded up to whole episodes)"),
    out=Use(REQUIRED, "dataset root directory", check="folder"),
    preset=Use("cpu", "RND, APS and ProtoRL sizes: paper (URLB) or cpu", sorted(RND_PRESETS)),
    seed=Use(0, "the exploration agent's and the episodes' seed"),
    task=Use(None, "task whose reward is stored (default: the domain's first)"),
    set=[],
    quiet=False,
)
def collect(args: argparse.Namespace) -> None:
    from rbfm.exploration import collect

    dynamics = None if args.dynamics is None else DYNAMICS[args.dynamics]
    cfg = call(CollectConfig, args, overrides=checks.assignments(args.set), dynamics=dynamics)
    start = time.perf_counter()
    buffer = collect(cfg, progress=not args.quiet)
    print(f"collected into {buffer} in {time.perf_counter() - start:.1f} s")
    print(describe_with_tasks(str(buffer), progress=not args.quiet))


@command(
    "pretrain",
    "train a forward-backward model on a reward-free dataset (resumable)",
    "Algorithm 1 with periodic zero-shot evaluation; keeps the best model by IQM and the "
    "latest; rerun, it resumes from its last checkpoint; a larger --steps extends it.",
    config=PretrainConfig,
    dataset=Use(REQUIRED, "ExORL buffer or a directory above it"),
    out=Use(REQUIRED, "run directory", check="folder"),
    domain=Use(None, "default: read from the dataset path", sorted(DOMAINS)),
    preset=Use("cpu", "paper (the paper's hyperparameters), cpu, tiny (tests)", sorted(FB_PRESETS)),
    steps=Use(None, "updates (default: the preset's)"),
    transitions=Use(None, "uniform subsample of the dataset (default: min(1M, all))"),
    seed=Use(0, "network initialisation and batch sampling"),
    bf16=False,
    compile=False,
    cuda_graph=False,
    threads=None,
    set=[],
    quiet=False,
)
def pretrain(args: argparse.Namespace) -> None:
    from rbfm.training.pretrain import pretrain

    cfg = call(PretrainConfig, args, bf16=args.bf16 or None, overrides=checks.assignments(args.set))
    cfg.fb()  # the model's settings, refused before the dataset is read
    if args.threads is not None:
        checks.in_range("pretrain", "threads", args.threads, 1, integer=True)
        torch.set_num_threads(args.threads)
    run = pretrain(cfg, progress=not args.quiet)
    print(f"run finished: {run} (best model: {run / 'best.safetensors'})")


@command("info", "summarise a dataset, with every task's relabelled rewards", path=REQUIRED)
def info(args: argparse.Namespace) -> None:
    print(describe_with_tasks(args.path))


@command(
    "pack",
    "chosen episodes of a dataset in one compact file for another machine (`rbfm unpack`)",
    path=REQUIRED,
    out=Use(REQUIRED, "the file to write (xz-compressed)", check="file, folder made"),
    first=None,
    every=Use(1, "every Nth episode of those: 5 keeps episodes 0, 5, 10, ..."),
    half=None,
    replay=False,
)
def pack(args: argparse.Namespace) -> None:
    from rbfm.data.pack import pack_episodes

    s = pack_episodes(args.path, args.out, args.first, args.every, args.half, args.replay)
    print(s.packed(args.half))


@command(
    "unpack",
    "write a `rbfm pack` file's episodes back as ExORL episode files",
    path=Use(REQUIRED, "the packed file"),
    out=Use(REQUIRED, "dataset root: episodes go to OUT/<domain>/<algo>/buffer", check="folder"),
    workers=Use(len(os.sched_getaffinity(0)), "processes regenerating a --replay file (0: none)"),
    nominal=False,
)
def unpack(args: argparse.Namespace) -> None:
    from rbfm.data.pack import unpack_episodes

    print(unpack_episodes(args.path, args.out, args.workers, args.nominal).unpacked())


@command("envs", "list domains, tasks and perturbation families")
def envs(args: argparse.Namespace) -> None:
    print(listing())


@command(
    "models",
    "list rbfm's FB models: size, zero-shot IQM, installed or how to get them",
    "A row per model by the name --checkpoint takes; reads their descriptions, not their "
    "weights. The wheel carries few; a clone (`pip install -e .`) or RBFM_MODELS has all.",
)
def models(args: argparse.Namespace) -> None:
    print(models_table())
