"""Commands on a model's policies: zero-shot, demos, infer, adapt, evaluate, render, export."""

from __future__ import annotations

import argparse

from rbfm import EVAL_SEED, checks
from rbfm.cli.options import MODEL, REQUIRED, Use, call, command, listed
from rbfm.inference.adapt import AdaptConfig
from rbfm.methods import DEFAULT_METHOD, NAMES
from rbfm.policy_files import DEMO_EPISODES

_PERTURBATION = Use(None, listed("family (default: nominal dynamics)", "families"))


@command(
    "zero-shot",
    "evaluate a model's reward-inferred policies (z from 10k relabelled states)",
    checkpoint=REQUIRED,
    task=Use(None, listed("task (repeatable; default: all)", "tasks"), extra={"action": "append"}),
    perturbation=_PERTURBATION,
    level=Use(None, "the family's level (default: its nominal value)"),
    episodes=Use(10, check="count"),
    dataset=None,
    random=False,
    out=Use(None, "also write the table to this CSV"),
    seed=Use(0, "initial states of the episodes, and the relabelled states the z come from"),
    device=None,
    workers=Use(0, "rollout worker processes (0: in-process)"),
)
def zero_shot(args: argparse.Namespace) -> None:
    from rbfm.evaluation.zero_shot import zero_shot_report

    print(call(zero_shot_report, args, tasks=args.task))


@command(
    "demos",
    "generate expert demonstrations at nominal dynamics: a model's reward-inferred policy, "
    "or a planner on the true simulator (--expert mpc)",
    expert="fb",
    checkpoint=Use(None, "--expert fb: " + MODEL),
    domain=Use(None, "--expert mpc: the domain to plan in"),
    task=Use(REQUIRED, listed("the domain's task to demonstrate", "tasks")),
    episodes=Use(
        None,
        f"demonstration episodes (default: {DEMO_EPISODES['fb']}); --expert mpc: "
        f"{DEMO_EPISODES['mpc']}, as many as each committed planner demonstration file, "
        "since a planner episode takes minutes",
        check="count",
    ),
    out=Use(REQUIRED, "demonstrations file (.npz)"),
    dataset=None,
    action_noise=0.0,
    mpc=None,
    parts=None,
    seed=Use(0, "initial states of the demonstrations (and their action noise)"),
    device=None,
)
def demos(args: argparse.Namespace) -> None:
    from rbfm.policy_files import demos_to_file

    print(call(demos_to_file, args, mpc=dict(checks.assignments(args.mpc, "--mpc"))))


@command(
    "infer",
    "infer a task vector z from demonstrations (or train a baseline policy)",
    checkpoint=Use(None, "not used by the baselines; " + MODEL),
    demos=REQUIRED,
    method=Use(DEFAULT_METHOD, choices=list(NAMES)),
    preset=Use(None, "baselines: paper (Tables 8-9) or cpu (the default)", ["paper", "cpu"]),
    eps=None,
    settings=None,  # and --preset: None if not given, so a method that ignores it refuses it
    steps=Use(None, "FB: the step cap (default 3000); baselines: training steps (the preset's)"),
    num_demos=4,
    set=Use([], "a field of the method's config, KEY=VALUE (repeatable; e.g. lookahead=12, goal)"),
    bf16=Use(help="a bfloat16 copy of the actor (faster, for CPUs with bf16 units)"),
    seed=Use(0, "which --num-demos episodes are drawn, and the descent's batches"),
    device=None,
    out=Use(REQUIRED, "task-vector or goals file (.json), or the baselines' policy stem"),
)
def infer(args: argparse.Namespace) -> None:
    from rbfm.inference import load_demos
    from rbfm.policy_files import imitate_to_file

    demos = load_demos(args.demos).sample(args.num_demos, args.seed)
    given = {"steps": args.steps, "eps": args.eps, "bf16": args.bf16 or None}
    described = {"demos": str(args.demos), "num_demos": args.num_demos}
    overrides = checks.overrides(given, args.set)
    print(call(imitate_to_file, args, demos=demos, overrides=overrides, described=described))


@command(
    "adapt",
    "adapt a task vector to the environment it meets, from a few reward-free episodes",
    "Tries z's near z for a few episodes in the deployed environment; the closest to the demos "
    "in B's space (or by z's implied reward) replaces z if clearly closer (cem: elites' mean).",
    config=AdaptConfig,
    checkpoint=Use(None, "the FB model of the task vector (default: its file's); " + MODEL),
    demos=REQUIRED,
    z=Use(REQUIRED, "task-vector file from `rbfm infer`", extra={"nargs": None}),
    perturbation=Use(None, listed("family of the deployed environment", "families")),
    level=None,
    episodes=Use(AdaptConfig.budget, "episode budget", check="count"),
    num_demos=4,
    seed=Use(0, "which demos are drawn; adaptation seed"),
    device=None,
    out=Use(REQUIRED, "adapted task-vector file (.json)"),
)
def adapt(args: argparse.Namespace) -> None:
    from rbfm.inference import load_demos
    from rbfm.policy_files import adapt_to_file

    cfg = call(AdaptConfig, args, budget=args.episodes)
    demos = load_demos(args.demos).sample(args.num_demos, args.seed)
    print(call(adapt_to_file, args, z_file=args.z, demos=demos, cfg=cfg))


@command(
    "evaluate",
    "evaluate task vectors and baseline policies under a perturbation sweep",
    checkpoint=Use(None, "the FB model of the task vectors (default: theirs); " + MODEL),
    z=Use(REQUIRED, "files from `rbfm infer`: task vectors (.json) and baseline policies"),
    task=Use(None, listed("task whose reward scores the episodes (default: the files')", "tasks")),
    perturbation=Use(None, listed("family (default: nominal only)", "families")),
    levels=None,
    episodes=Use(10, "episodes per task vector and level", check="count"),
    seed=Use(EVAL_SEED, "initial states (apart from `rbfm demos`'s, as `rbfm experiment`)"),
    device=None,
    cross_task=False,
    out=Use(None, "CSV file for the table"),
)
def evaluate(args: argparse.Namespace) -> None:
    from rbfm.policy_files import evaluate_files

    print(call(evaluate_files, args, paths=args.z, progress=True))


@command(
    "render",
    "a GIF of policies side by side at a perturbation level (MuJoCo offscreen: EGL or OSMesa)",
    checkpoint=REQUIRED,
    task=Use(REQUIRED, listed("task whose reward the labels sum", "tasks")),
    z=Use(None, "task-vector files, a panel each (default: the model's zero-shot policy)"),
    perturbation=_PERTURBATION,
    level=Use(None, "default: the family's extreme"),
    steps=Use(500, "control steps rendered", check="count"),
    every=4,
    size="240x320",
    seed=Use(EVAL_SEED, "the episode's initial state"),
    device=None,
    out=Use(REQUIRED, "GIF file to write"),
)
def render(args: argparse.Namespace) -> None:
    from rbfm.policy_files import render_files

    print(call(render_files, args, z_paths=args.z or []))


@command(
    "export",
    "copy a checkpoint (e.g. a run's best), with each task's reward-inferred z in it",
    checkpoint=Use(REQUIRED, "the checkpoint to copy (e.g. RUN/best)"),
    out=Use(REQUIRED, "destination stem (writes .safetensors/.json)", check="file, folder made"),
    dataset=Use(None, "the model's data: its tasks' z if none are stored, and its name"),
    fp16=False,
)
def export(args: argparse.Namespace) -> None:
    from rbfm.fb.reward_inference import export_with_task_z

    stem = export_with_task_z(args.checkpoint, args.out, args.dataset, args.fp16)
    print(f"wrote {stem}.safetensors and {stem}.json")
