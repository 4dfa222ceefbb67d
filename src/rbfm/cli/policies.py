"""Commands on a model's policies: zero-shot, demos, infer, adapt, evaluate, render, export."""

from __future__ import annotations

import argparse
from pathlib import Path

from rbfm import EVAL_SEED, checks
from rbfm.cli.options import MODEL, REQUIRED, Use, command, from_args, listed
from rbfm.errors import ConfigError
from rbfm.inference.adapt import AdaptConfig
from rbfm.methods import DEFAULT_METHOD, NAMES

_PERTURBATION = Use(None, listed("family (default: nominal dynamics)", "families"))


@command(
    "zero-shot",
    "evaluate a model's reward-inferred policies (z from 10k relabelled states)",
    checkpoint=REQUIRED,
    task=Use(None, listed("task (repeatable; default: all)", "tasks"), extra={"action": "append"}),
    perturbation=_PERTURBATION,
    level=Use(None, "the family's level (default: its nominal value)"),
    episodes=10,
    dataset=None,
    random=False,
    out=Use(None, "also write the table to this CSV"),
    seed=Use(0, "initial states of the episodes, and the relabelled states the z come from"),
    device=None,
    workers=Use(0, "rollout worker processes (0: in-process)"),
)
def zero_shot(args: argparse.Namespace) -> None:
    from rbfm.evaluation.zero_shot import zero_shot_report

    checks.count("--episodes", args.episodes)
    checks.out_file(args.out)
    print(zero_shot_report(
        args.checkpoint, args.task, args.episodes, args.seed, args.perturbation, args.level,
        args.random, args.workers, args.dataset, args.device, args.out,
    ))  # fmt: skip


@command(
    "demos",
    "generate expert demonstrations at nominal dynamics: a model's reward-inferred policy, "
    "or a planner on the true simulator (--expert mpc)",
    expert="fb",
    checkpoint=Use(None, "--expert fb: " + MODEL),
    domain=Use(None, "--expert mpc: the domain to plan in"),
    task=Use(REQUIRED, listed("the domain's task to demonstrate", "tasks")),
    episodes=Use(200, "demonstration episodes rolled out"),
    out=Use(REQUIRED, "demonstrations file (.npz)"),
    dataset=None,
    action_noise=0.0,
    mpc=None,
    parts=None,
    seed=Use(0, "initial states of the demonstrations (and their action noise)"),
    device=None,
)
def demos(args: argparse.Namespace) -> None:
    from rbfm.evaluation import mean_ci
    from rbfm.inference import save_demos

    checks.count("--episodes", args.episodes)
    checks.out_file(args.out)
    mpc = args.expert == "mpc"
    fb_only = args.action_noise or args.dataset
    if (args.domain is None) == mpc or (args.checkpoint is None) != mpc:
        raise ConfigError("--expert fb takes --checkpoint, --expert mpc takes --domain")
    if (fb_only and mpc) or ((args.mpc or args.parts) and not mpc):
        raise ConfigError("--dataset and --action-noise are --expert fb's, --mpc, --parts mpc's")
    if mpc:
        from rbfm.planning import mpc_config
        from rbfm.planning.demos import mpc_demos

        config = mpc_config(args.domain, dict(checks.assignments(args.mpc or [])))
        demos = mpc_demos(
            args.domain, args.task, args.episodes, Path(args.out), config, args.seed,
            parts=None if args.parts is None else Path(args.parts),
        )  # fmt: skip
    else:
        from rbfm.inference.expert_demos import expert_demos

        demos = expert_demos(
            args.checkpoint, args.task, args.episodes, args.seed, args.action_noise,
            args.dataset, args.device,
        )  # fmt: skip
        save_demos(args.out, demos)
    m, h = mean_ci(demos.returns)
    what = f"{args.episodes} {demos.domain}/{args.task} {args.expert} episodes"
    print(f"wrote {what} to {args.out}: return {m:.1f} +- {h:.1f} (95% CI)")


@command(
    "infer",
    "infer a task vector z from demonstrations (or train a baseline policy)",
    checkpoint=Use(None, "not used by the baselines; " + MODEL),
    demos=REQUIRED,
    method=Use(DEFAULT_METHOD, choices=list(NAMES)),
    preset=Use("cpu", "baselines: paper (Tables 8-9) or cpu (far fewer steps)", ["paper", "cpu"]),
    eps=None,
    settings="default",
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

    checks.out_file(args.out)
    demos = load_demos(args.demos).sample(args.num_demos, args.seed)
    given = {"steps": args.steps, "eps": args.eps, "bf16": args.bf16 or None}
    print(imitate_to_file(
        args.method, demos, args.checkpoint, args.seed, args.out, args.settings, args.preset,
        checks.overrides(given, args.set),
        {"demos": str(args.demos), "num_demos": args.num_demos}, args.device,
    ))  # fmt: skip


@command(
    "adapt",
    "adapt a task vector to the environment it meets, from a few reward-free episodes",
    "Tries z's near z for a few episodes in the deployed environment; keeps the closest to the "
    "demos in B's space (or the best by z's implied reward; by the task's: the oracle).",
    config=AdaptConfig,
    checkpoint=Use(None, "the FB model of the task vector (default: its file's); " + MODEL),
    demos=REQUIRED,
    z=Use(REQUIRED, "task-vector file from `rbfm infer`", extra={"nargs": None}),
    perturbation=Use(None, listed("family of the deployed environment", "families")),
    level=None,
    episodes=Use(AdaptConfig.budget, "episode budget"),
    num_demos=4,
    seed=Use(0, "which demos are drawn; adaptation seed"),
    device=None,
    out=Use(REQUIRED, "adapted task-vector file (.json)"),
)
def adapt(args: argparse.Namespace) -> None:
    from rbfm.inference import load_demos
    from rbfm.policy_files import adapt_to_file

    checks.out_file(args.out)
    cfg = from_args(AdaptConfig, args, budget=args.episodes)
    demos = load_demos(args.demos).sample(args.num_demos, args.seed)
    print(adapt_to_file(
        args.checkpoint, args.z, demos, args.perturbation, args.level, cfg, args.seed, args.out,
        args.device,
    ))  # fmt: skip


@command(
    "evaluate",
    "evaluate task vectors and baseline policies under a perturbation sweep",
    checkpoint=Use(None, "the FB model of the task vectors (default: theirs); " + MODEL),
    z=Use(REQUIRED, "files from `rbfm infer`: task vectors (.json) and baseline policies"),
    task=Use(None, listed("task whose reward scores the episodes (default: the files')", "tasks")),
    perturbation=Use(None, listed("family (default: nominal only)", "families")),
    levels=None,
    episodes=Use(10, "episodes per task vector and level"),
    seed=Use(EVAL_SEED, "initial states (apart from `rbfm demos`'s, as `rbfm experiment`)"),
    device=None,
    cross_task=False,
    out=Use(None, "CSV file for the table"),
)
def evaluate(args: argparse.Namespace) -> None:
    from rbfm.evaluation.sweep import sweep_table, write_csv
    from rbfm.policy_files import evaluate_files

    checks.count("--episodes", args.episodes)
    checks.out_file(args.out)
    domain, task, rows = evaluate_files(
        args.z, args.task, args.checkpoint, args.perturbation, args.levels, args.episodes,
        args.seed, args.cross_task, args.device, progress=True,
    )  # fmt: skip
    dynamics = args.perturbation or "nominal"
    print(f"{domain}/{task}, {dynamics}: mean return +- 95% CI ({args.episodes} episodes")
    print("per task vector; across a method's task vectors, the 'seeds', else its episodes)")
    print(sweep_table(rows))
    if args.out:
        family = args.perturbation or "none"
        write_csv(args.out, rows, {"domain": domain, "task": task, "perturbation": family})
        print(f"wrote {args.out}")


@command(
    "render",
    "a GIF of policies side by side at a perturbation level (MuJoCo offscreen: EGL or OSMesa)",
    checkpoint=REQUIRED,
    task=Use(REQUIRED, listed("task whose reward the labels sum", "tasks")),
    z=Use(None, "task-vector files, a panel each (default: the model's zero-shot policy)"),
    perturbation=_PERTURBATION,
    level=Use(None, "default: the family's extreme"),
    steps=Use(500, "control steps rendered"),
    every=4,
    size="240x320",
    seed=Use(EVAL_SEED, "the episode's initial state"),
    device=None,
    out=Use(REQUIRED, "GIF file to write"),
)
def render(args: argparse.Namespace) -> None:
    from rbfm.policy_files import render_files

    checks.count("--steps", args.steps)
    checks.out_file(args.out)
    print(render_files(
        args.checkpoint, args.task, args.z or [], args.perturbation, args.level, args.seed,
        args.steps, args.every, args.size, args.out, args.device,
    ))  # fmt: skip


@command(
    "export",
    "copy a checkpoint (e.g. a run's best), with each task's reward-inferred z in it",
    checkpoint=Use(REQUIRED, "the checkpoint to copy (e.g. RUN/best)"),
    out=Use(REQUIRED, "destination stem (writes .safetensors/.json)"),
    dataset=Use(None, "the model's data: its tasks' z if none are stored, and its name"),
    fp16=False,
)
def export(args: argparse.Namespace) -> None:
    from rbfm.fb.reward_inference import export_with_task_z

    checks.out_file(args.out, made=True)
    stem = export_with_task_z(args.checkpoint, args.out, args.dataset, args.fp16)
    print(f"wrote {stem}.safetensors and {stem}.json")
