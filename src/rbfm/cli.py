"""The `rbfm` command line: a thin layer over the Python API."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import textwrap
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from rbfm import EVAL_SEED
from rbfm.errors import ConfigError, RbfmError

_C = TypeVar("_C")


def _summary_with_tasks(path: str, progress: bool = True) -> str:
    import numpy as np

    from rbfm.data import load_dataset, relabel_all

    ds = load_dataset(path)
    rewards = relabel_all(ds, ds.domain.name, progress)
    # The episode returns by tenth of the collection show whether the exploration agent's
    # data was still improving when it stopped (walker RND: walk's tenths rise 60 -> 201
    # and fall back to 164, docs/models.md).
    lines = [
        ds.summary(),
        "relabelled rewards: mean per step; episode return: mean, best, and mean by tenth "
        "of the episodes in collection order",
    ]
    for task, r in rewards.items():
        ret = ds.episode_returns(r)
        tenths = " ".join(f"{part.mean():.0f}" for part in np.array_split(ret, min(10, len(ret))))
        lines.append(f"  {task:<14} {r.mean():.4f} {ret.mean():8.1f} {ret.max():8.1f}   {tenths}")
    return "\n".join(lines)


def _check_count(option: str, value: int) -> None:
    if value < 1:
        raise ConfigError(f"{option}: {value} is out of range (valid: >= 1)")


def _check_out(path: str | None) -> None:
    """An output file's folder must exist, and the file must not be a folder, before any
    compute is spent on it."""
    if path is None:
        return
    if Path(path).is_dir():
        raise ConfigError(f"--out: {path} is a folder; give a file name")
    if not Path(path).resolve().parent.is_dir():
        raise ConfigError(f"--out: the folder of {path} does not exist")


def _check_out_dir(path: str | os.PathLike[str]) -> None:
    """An output folder (made if missing) must not be a file, nor lie under one."""
    for p in (Path(path), *Path(path).parents):
        if p.exists():
            if not p.is_dir():
                raise ConfigError(f"--out: {p} is a file; give a folder")
            return


def _from_args(cls: type[_C], args: argparse.Namespace, **given: Any) -> _C:
    """A config dataclass from the options of the same names (the command line's flags
    are named after the config's fields), with `given` fields set otherwise."""
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    return cls(**{k: v for k, v in vars(args).items() if k in names} | given)


def _cmd_collect(args: argparse.Namespace) -> None:
    from rbfm.envs.dynamics import PRESETS as DYNAMICS
    from rbfm.exploration import CollectConfig, collect

    dynamics = None if args.dynamics is None else DYNAMICS[args.dynamics]
    overrides = tuple(parse_assignments(args.set))
    cfg = _from_args(CollectConfig, args, overrides=overrides, dynamics=dynamics)
    start = time.perf_counter()
    buffer = collect(cfg, progress=not args.quiet)
    print(f"collected into {buffer} in {time.perf_counter() - start:.1f} s")
    print(_summary_with_tasks(str(buffer), progress=not args.quiet))


def _cmd_info(args: argparse.Namespace) -> None:
    print(_summary_with_tasks(args.path))


def _cmd_pack(args: argparse.Namespace) -> None:
    from rbfm.data.pack import pack_episodes

    s = pack_episodes(args.path, args.out, args.first, args.every, args.half, args.replay)
    print(
        f"packed {s.episodes} {s.domain} {s.algo} episodes ({s.steps:,} steps) into {s.path}: "
        f"{s.bytes / 2**20:.1f} MiB" + (f"; float16: {', '.join(args.half)}" if args.half else "")
    )


def _cmd_unpack(args: argparse.Namespace) -> None:
    from rbfm.data.pack import unpack_episodes

    s = unpack_episodes(args.path, args.out, args.workers)
    print(f"unpacked {s.episodes} {s.domain} {s.algo} episodes ({s.steps:,} steps) into {s.path}")
    if s.reproduced is not None:
        print(f"regenerated from their actions: {s.reproduced} of {s.episodes} bitwise as packed")
        assert s.returns is not None
        print(
            f"mean episode return of the stored reward: {s.returns[0]:.1f} packed, "
            f"{s.returns[1]:.1f} regenerated"
        )
        if s.reproduced < s.episodes:
            print(
                f"the others differ in {', '.join(s.differing)}; their final physics states "
                f"by up to {s.deviation:.3g} (floating point that rounds differently here, "
                "amplified by the dynamics over the episode)"
            )
        if s.version_changes:
            print(f"packed with other versions: {'; '.join(s.version_changes)}")


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


def parse_assignments(items: list[str]) -> list[tuple[str, Any]]:
    """KEY=VALUE pairs; VALUE is read as JSON (numbers, lists, true) or else a string."""
    pairs = []
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set: expected KEY=VALUE, got {item!r}")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        pairs.append((key, value))
    return pairs


def _cmd_pretrain(args: argparse.Namespace) -> None:
    from rbfm.training.pretrain import PretrainConfig, pretrain

    cfg = _from_args(
        PretrainConfig,
        args,
        bf16=args.bf16 or None,  # None: the preset's choice
        overrides=tuple(parse_assignments(args.set)),
    )
    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)
    run = pretrain(cfg, progress=not args.quiet)
    print(f"run finished: {run} (best model: {run / 'best.safetensors'})")


DEVICE_HELP = "torch device, e.g. cpu or cuda:1 (default: cuda if available, else cpu)"
CHECKPOINT_HELP = (
    "run directory, checkpoint file, or a domain name (walker; walker:aps) for the model "
    "shipped with rbfm"
)


def _task_help(what: str) -> str:
    from rbfm.envs import TASKS

    listed = "; ".join(f"{d}: {', '.join(t)}" for d, t in TASKS.items())
    return f"{what} ({listed})"


def _family_help(what: str) -> str:
    from rbfm.envs import PERTURBATIONS

    by: dict[str, list[str]] = {}
    for d, f in PERTURBATIONS:
        by.setdefault(d, []).append(f)
    listed = "; ".join(f"{d}: {', '.join(fs)}" for d, fs in by.items())
    return f"{what} ({listed})"


def _cmd_zero_shot(args: argparse.Namespace) -> None:
    from rbfm.atomic import atomic_csv
    from rbfm.envs import TASKS
    from rbfm.evaluation.zero_shot import zero_shot, zero_shot_iqm
    from rbfm.fb.checkpoint import load_checkpoint
    from rbfm.fb.zero_shot import task_vectors

    _check_count("--episodes", args.episodes)
    _check_out(args.out)
    model, meta = load_checkpoint(args.checkpoint, device=args.device)
    domain = meta["domain"]
    tasks = _check_tasks(domain, args.task or list(TASKS[domain]))
    task_z, source = task_vectors(
        model, meta, tasks, args.checkpoint, args.dataset, args.seed, progress=True
    )
    dynamics = "nominal" if args.perturbation is None else f"{args.perturbation}={args.level:g}"
    print(
        f"{domain} model at step {meta.get('step')}, {dynamics}, {args.episodes} episodes, "
        f"mean return +- 95% CI over episodes; task vectors {source}"
    )
    header = f"{'task':<14} {'zero-shot':>16}"
    if args.random:
        header += f" {'random':>16}  above random (disjoint CIs)"
    print(header)
    rows = zero_shot(
        model,
        domain,
        task_z,
        args.episodes,
        args.seed,
        args.perturbation,
        args.level,
        args.random,
        args.workers,
    )
    for r in rows:
        line = f"{r.task:<14} {r.mean:>8.1f} +- {r.ci95:<5.1f}"
        if r.random_mean is not None:
            line += f" {r.random_mean:>8.1f} +- {r.random_ci95:<5.1f}  "
            line += "yes" if r.above_random else "no"
        if r.unstable:
            line += f"  ({r.unstable} unstable)"
        print(line)
    if len(rows) > 1:
        score, low, high = zero_shot_iqm(rows)
        print(
            f"IQM over the {len(tasks) * args.episodes} episodes: {score:.1f} (95% CI "
            f"{low:.1f} to {high:.1f}, rliable's stratified bootstrap over episodes per task)"
        )
    if args.out:
        table = []
        for r in rows:
            row: dict[str, object] = {"task": r.task, "mean": r.mean, "ci95": r.ci95}
            if r.random_mean is not None:
                row |= {
                    "random_mean": r.random_mean,
                    "random_ci95": r.random_ci95,
                    "above_random": r.above_random,
                }
            table.append(row | {"episodes": r.episodes, "unstable": r.unstable})
        atomic_csv(Path(args.out), table)
        print(f"wrote {args.out}")


def _check_tasks(domain: str, tasks: list[str]) -> list[str]:
    """`tasks` if each is one of the domain's, else a ConfigError naming the valid ones."""
    from rbfm.envs import TASKS

    for task in tasks:
        if task not in TASKS[domain]:
            raise ConfigError(
                f"--task: unknown {domain} task {task!r}; valid: {', '.join(TASKS[domain])}"
            )
    return tasks


def _cmd_plot(args: argparse.Namespace) -> None:
    from rbfm.envs import get_perturbation
    from rbfm.evaluation.sweep import read_csv
    from rbfm.plots import plot_nominal, plot_pretraining, plot_sweeps

    paths = [Path(p) for p in args.inputs]
    if len(paths) == 1 and paths[0].is_dir():
        print(f"wrote {plot_pretraining(paths[0], Path(args.out), args.title)}")
        return
    if any(p.is_dir() for p in paths):
        raise ConfigError("plot takes one pretraining run directory, or tables from `evaluate`")
    tables = [read_csv(p) for p in paths]
    if all(r.level is None for rows, _ in tables for r in rows):
        groups = [
            (extra.get("task", p.stem), rows)
            for p, (rows, extra) in zip(paths, tables, strict=True)
        ]
        domain = tables[0][1].get("domain", "")
        png = plot_nominal(
            groups, args.title or f"{domain}: nominal return (95% CI)", Path(args.out)
        )
    else:
        panels = []
        for rows, extra in tables:
            family, domain = extra.get("perturbation", "none"), extra.get("domain", "")
            unit = get_perturbation(domain, family).unit if family != "none" else ""
            panels.append((rows, f"{domain}/{extra.get('task', '')}", f"{family} ({unit})"))
        png = plot_sweeps(panels, Path(args.out), args.title)
    print(f"wrote {png}")


def _cmd_demos(args: argparse.Namespace) -> None:
    from rbfm.evaluation import mean_ci
    from rbfm.fb.checkpoint import load_checkpoint
    from rbfm.fb.zero_shot import task_vectors
    from rbfm.inference import generate_demos, save_demos

    _check_count("--episodes", args.episodes)
    _check_out(args.out)
    model, meta = load_checkpoint(args.checkpoint, device=args.device)
    domain = meta["domain"]
    _check_tasks(domain, [args.task])
    z_all, source = task_vectors(model, meta, [args.task], args.checkpoint, args.dataset, args.seed)
    z = z_all[args.task]
    demos = generate_demos(
        model,
        domain,
        args.task,
        z,
        args.episodes,
        args.seed,
        progress=True,
        action_noise=args.action_noise,
    )
    z_source = "checkpoint" if source.startswith("stored") else "dataset"
    demos.meta.update(checkpoint=str(args.checkpoint), z_source=z_source)
    path = save_demos(args.out, demos)
    m, h = mean_ci(demos.returns)
    print(
        f"wrote {args.episodes} {domain}/{args.task} expert episodes to {path}: "
        f"return {m:.1f} +- {h:.1f} (95% CI)"
    )


def _cmd_infer(args: argparse.Namespace) -> None:
    from rbfm.inference import load_demos
    from rbfm.methods import get_method
    from rbfm.policy_files import infer_to_file, train_to_file

    _check_out(args.out)
    method = get_method(args.method)
    demos = load_demos(args.demos).sample(args.num_demos, args.seed)
    described = {"demos": str(args.demos), "num_demos": args.num_demos}
    changes = {k: v for k, v in (("steps", args.steps), ("eps", args.eps)) if v is not None}
    if not method.is_fb:
        fb_only = [
            flag
            for flag, given in (
                ("--settings", args.settings != "default"),
                ("--bf16", args.bf16),
            )
            if given
        ]
        if fb_only:
            raise ConfigError(
                f"{', '.join(fb_only)}: FB methods only, not {args.method} (a baseline takes "
                "a --preset, and --steps for its training steps)"
            )
        result, config, stem = train_to_file(
            args.method, demos, args.preset, args.seed, args.out, changes, described, True
        )
        print(
            f"{args.method}: policy written to {stem}.safetensors/.json ({config['steps']} "
            f"steps, {result.steps} of them in {result.seconds:.1f} s here, "
            f"{result.ms_per_step:.2f} ms/step)"
        )
        return
    if args.checkpoint is None:
        raise ConfigError(f"--checkpoint is needed for {args.method}")
    from rbfm.fb.checkpoint import load_checkpoint

    model, model_meta = load_checkpoint(args.checkpoint, domain=demos.domain, device=args.device)
    overrides: dict[str, object] = changes | ({"bf16": True} if args.bf16 else {})
    res = infer_to_file(
        model,
        model_meta,
        args.checkpoint,
        demos,
        args.method,
        args.seed,
        args.out,
        args.settings,
        overrides,
        described,
        progress=True,
    )
    if res.converged:
        state = "converged"
    elif args.settings != "default":
        state = "still improving at the end (the paper's fixed step count)"
    elif res.cap == "step cap":
        state = "NOT converged: the step cap came first (raise --steps)"
    else:
        state = (
            "NOT converged: its last temperature stage still improved the objective "
            "(the z is its best exact iterate)"
        )
    n = len(demos.transitions()["action"])
    print(
        f"{args.method} ({args.settings} settings): z written to {args.out} "
        f"({res.steps} steps, {res.seconds:.1f} s, {res.ms_per_step:.2f} ms/step); "
        f"objective on all {n} transitions {res.objective:.4g}, {state}"
    )


def _cmd_adapt(args: argparse.Namespace) -> None:
    from rbfm.evaluation import EnvSpec
    from rbfm.fb.checkpoint import load_checkpoint
    from rbfm.inference import load_demos
    from rbfm.inference.adapt import AdaptConfig, adapt
    from rbfm.policy_files import check_z, load_z, save_z

    _check_out(args.out)
    cfg = AdaptConfig(
        budget=args.episodes,
        states=args.states,
        criterion="reward" if args.oracle else "demos",
    )
    demos = load_demos(args.demos).sample(args.num_demos, args.seed)
    if (args.perturbation is None) != (args.level is None):
        raise ConfigError("--perturbation and --level go together (neither: nominal)")
    env = EnvSpec(demos.domain, demos.task, args.perturbation, args.level).checked()
    z, info = load_z(args.z)
    model, meta = load_checkpoint(args.checkpoint, domain=demos.domain, device=args.device)
    check_z(args.z, z, info, meta)
    res = adapt(model, demos, z, env, cfg, seed=args.seed, progress=True)
    label = f"{'oracle' if args.oracle else 'adapt'}-k{res.episodes}"
    out = {
        **info,
        "method": f"{info.get('method', 'z')}+{label}",
        "adapted_from": str(args.z),
        "adaptation": {
            "criterion": cfg.criterion,
            "episodes": res.episodes,
            "states": cfg.states,
            "perturbation": args.perturbation,
            "level": args.level,
            "distances": res.distances,
            "best": res.best,
            "seconds": res.seconds,
        },
    }
    save_z(args.out, res.z, out)
    where = "nominal" if args.level is None else f"{args.perturbation}={args.level:g}"
    print(
        f"{label}: z written to {args.out} ({res.episodes} episodes in {where}, "
        f"{res.seconds:.1f} s); "
        f"B distance to the demonstrations {res.distances[0]:.3f} at the start z, "
        f"{min(res.distances):.3f} at the chosen one (candidate {res.best[-1]})"
    )


def _cmd_evaluate(args: argparse.Namespace) -> None:
    from rbfm.evaluation.sweep import write_csv
    from rbfm.policy_files import evaluate_files

    _check_count("--episodes", args.episodes)
    _check_out(args.out)
    domain, rows = evaluate_files(
        args.z,
        args.task,
        args.checkpoint,
        args.perturbation,
        args.levels,
        args.episodes,
        args.seed,
        args.cross_task,
        args.device,
        progress=True,
    )
    print(
        f"{domain}/{args.task}, {args.perturbation or 'nominal'}: mean return +- 95% CI "
        f"({args.episodes} episodes per task vector; the CI is across a method's task "
        "vectors when it has several, the 'seeds' column, else across its episodes)"
    )
    print(f"{'method':<12} {'level':>8} {'return':>18} {'seeds':>6} {'unstable':>9}")
    for r in rows:
        level = "-" if r.level is None else f"{r.level:g}"
        print(
            f"{r.method:<12} {level:>8} {r.mean:>9.1f} +- {r.ci95:<6.1f} {r.seeds:>6} "
            f"{r.unstable:>9}"
        )
    if args.out:
        extra = {"domain": domain, "task": args.task, "perturbation": args.perturbation or "none"}
        write_csv(args.out, rows, extra)
        print(f"wrote {args.out}")


def _cmd_render(args: argparse.Namespace) -> None:
    from rbfm.envs import get_perturbation
    from rbfm.evaluation import fb_policy
    from rbfm.evaluation.render import render_episodes, write_gif
    from rbfm.fb.checkpoint import load_checkpoint
    from rbfm.fb.zero_shot import task_vectors
    from rbfm.methods import display_label
    from rbfm.policy_files import check_z, load_z

    _check_count("--steps", args.steps)
    _check_out(args.out)
    try:
        height, width = (int(v) for v in args.size.lower().split("x"))
    except ValueError:
        height = width = 0
    if not (16 <= height <= 2048 and 16 <= width <= 2048):
        raise ConfigError(f"--size: {args.size!r} is not HEIGHTxWIDTH in 16..2048 pixels")
    model, meta = load_checkpoint(args.checkpoint, device=args.device)
    domain = meta["domain"]
    _check_tasks(domain, [args.task])
    if args.perturbation is not None:
        pert = get_perturbation(domain, args.perturbation)
        if args.level is None:
            args.level = pert.extreme
    policies = []
    for path in args.z or []:
        z, info = load_z(path)
        check_z(path, z, info, meta)
        policies.append((display_label(str(info.get("method", Path(path).stem))), z))
    if not policies:  # the model's own reward-inferred policy for the task
        z_all, _ = task_vectors(model, meta, [args.task], args.checkpoint, None, args.seed)
        policies.append(("zero-shot", z_all[args.task]))
    frames, fps = render_episodes(
        [(name, fb_policy(model, z)) for name, z in policies],
        domain,
        args.task,
        args.perturbation,
        args.level,
        args.seed,
        args.steps,
        args.every,
        (height, width),
    )
    path = write_gif(frames, args.out, fps)
    dynamics = "nominal" if args.perturbation is None else f"{args.perturbation}={args.level:g}"
    print(f"wrote {path}: {len(frames)} frames of {domain}/{args.task}, {dynamics}")


def _cmd_quickstart(args: argparse.Namespace) -> None:
    from rbfm.methods import display_name
    from rbfm.quickstart import QuickstartConfig, quickstart, reading

    _check_out_dir(args.out)
    cfg = QuickstartConfig(out=args.out, checkpoint=args.checkpoint)
    rows = quickstart(cfg)
    print(
        f"\ncheetah/{cfg.task} under {cfg.perturbation}: mean return +- 95% CI across "
        f"{cfg.seeds} inference seeds"
    )
    levels = list(dict.fromkeys(r.level for r in rows))
    methods = list(dict.fromkeys(r.method for r in rows))
    print(f"{'level':>8} " + " ".join(f"{display_name(m):>18}" for m in methods))
    for level in levels:
        cells = {r.method: f"{r.mean:7.1f} +- {r.ci95:<6.1f}" for r in rows if r.level == level}
        print(f"{level:>8g} " + " ".join(f"{cells[m]:>18}" for m in methods))
    print(reading(rows))


def _portable(path: str) -> str:
    """A path as given if relative, else its last part: no machine's absolute paths."""
    return path if not Path(path).is_absolute() else Path(path).name


def _cmd_export(args: argparse.Namespace) -> None:
    import torch

    from rbfm.data.dataset import find_buffer
    from rbfm.envs import TASKS
    from rbfm.fb.checkpoint import dataset_name, export_checkpoint, load_checkpoint
    from rbfm.fb.zero_shot import task_vectors

    # The data named here is the model's, whatever path the run recorded.
    data = None if args.dataset is None else dataset_name(find_buffer(Path(args.dataset)))
    model, meta = load_checkpoint(args.checkpoint)
    # The stored z when the run has them (its selection's), else inferred now (seed 1).
    dataset = None if "task_z" in meta else args.dataset
    task_z, _ = task_vectors(
        model, meta, list(TASKS[meta["domain"]]), args.checkpoint, dataset, seed=1
    )
    extra: dict[str, Any] = {
        "task_z": {t: z.tolist() for t, z in task_z.items()},
        "exported_from": _portable(args.checkpoint),
    }
    if data is not None:
        extra["dataset"] = {"name": data}
    stem = export_checkpoint(args.checkpoint, args.out, extra, torch.float16 if args.fp16 else None)
    print(f"wrote {stem}.safetensors and {stem}.json")


def _cmd_experiment(args: argparse.Namespace) -> None:
    from rbfm.experiments import load_spec, make_executor, plan, run_experiment
    from rbfm.experiments.plan import describe
    from rbfm.experiments.runner import EVAL_BATCH
    from rbfm.experiments.spec import with_overrides

    spec = with_overrides(load_spec(args.spec), args.seeds, args.episodes, args.steps)
    eval_batch = EVAL_BATCH if args.eval_batch is None else args.eval_batch
    _check_count("--eval-batch", eval_batch)
    out = Path(args.out or f"runs/experiments/{spec.name}")
    _check_out_dir(out)
    p = plan(spec)  # every field checked before anything starts
    print(
        f"experiment {spec.name}: {len(p.demos)} demonstration sets, {len(p.infers)} "
        f"inferences, {len(p.evals)} evaluations ({len(p.evals) * spec.episodes:,} episodes), "
        f"{len(p.ceilings)} of the experts themselves, {len(p.certs)} policies' certificates"
        + (f", {len(p.adapts)} adaptations" if p.adapts else "")
    )
    print(describe(p))
    if args.dry_run:
        return
    executor = make_executor(args.workers, args.ray)
    print(f"running on {executor.name} into {out}")
    summary = run_experiment(spec, out, executor, progress=not args.quiet, eval_batch=eval_batch)
    done = ", ".join(f"{n} {k}" for k, n in summary.computed.items())
    print(
        f"computed {done}; {summary.skipped} cells were already done; "
        f"{summary.seconds:.1f} s\nwrote {summary.results} and {summary.certificates}"
    )
    if args.figures:
        from rbfm.experiments.figures import draw_run_figures

        for path in draw_run_figures(out, summary.results):
            print(f"wrote {path}")


class _Help(argparse.HelpFormatter):
    """Every option's help ends with its default, unless the text already says it or
    there is none to show (None, a flag's False)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        shown = not any(action.default is v for v in (None, False, argparse.SUPPRESS))
        if shown and action.option_strings and "default" not in text:
            text += " (default: %(default)s)"
        return text

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        # Not at hyphens: names such as grid-walker are read and copied whole.
        flat = " ".join(text.split())
        return textwrap.fill(
            flat, width, initial_indent=indent, subsequent_indent=indent, break_on_hyphens=False
        )


def _command(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, **kwargs: Any
) -> argparse.ArgumentParser:
    return sub.add_parser(name, formatter_class=_Help, **kwargs)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rbfm")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    from rbfm.envs import DOMAINS
    from rbfm.experiments.spec import PRESETS
    from rbfm.exploration import AGENTS, RND_PRESETS

    parser = argparse.ArgumentParser(
        prog="rbfm",
        description="Robust Behavior Foundation Models: reward-free data, FB pretraining, "
        "robust imitation under dynamics shift.",
    )
    parser.add_argument("--version", action="version", version=f"rbfm {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = _command(
        sub,
        "quickstart",
        help="the whole pipeline on cheetah at a small scale: demonstrations, FB-IL, "
        "RBFM-Light, RBFM-Heavy and a perturbation sweep (table and plot)",
        description="On the cpu-sized cheetah shipped with rbfm: 10 noisy demonstrations of "
        "its walk policy, task vectors by FB-IL, RBFM-Light and RBFM-Heavy (3 seeds, one "
        "demonstration each), evaluated under six joint-friction levels; prints the table "
        "and a reading of it, writes OUT/sweep.csv and OUT/sweep.png (about a minute on 2 "
        "cores; docs/quickstart.md).",
    )
    p.add_argument(
        "--out",
        default="runs/quickstart",
        help="folder for the demonstrations, task vectors, table and plot",
    )
    p.add_argument(
        "--checkpoint",
        default=None,
        help="FB model to use (default: the cpu-sized cheetah shipped with rbfm, "
        "cheetah:rnd-v1, else train one)",
    )
    p.set_defaults(func=_cmd_quickstart)

    p = _command(
        sub,
        "collect",
        help="collect reward-free exploration data in ExORL format (resumable)",
        description="Collect episodes into OUT/<domain>/<agent>/buffer. Killed and rerun with "
        "the same arguments, it resumes where it stopped; a larger --transitions extends it.",
    )
    p.add_argument("--domain", required=True, choices=sorted(DOMAINS), help="DMC domain")
    p.add_argument(
        "--agent",
        required=True,
        choices=AGENTS,
        help="exploration agent (the paper's data: rnd, aps, proto)",
    )
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
        help="RND, APS and ProtoRL network sizes: paper (URLB) or cpu (default)",
    )
    p.add_argument(
        "--seed", type=int, default=0, help="the exploration agent's and the episodes' seed"
    )
    p.add_argument(
        "--task",
        default=None,
        help="task whose reward is stored (default: the domain's first task)",
    )
    p.add_argument("--device", default=None, help=DEVICE_HELP)
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a field of the agent's preset, e.g. update_every_steps=2 (repeatable; "
        "part of the collection's identity)",
    )
    p.add_argument(
        "--dynamics",
        default=None,
        choices=["train"],
        help="simulate each episode under physics drawn per episode (default: nominal). "
        "train: a quarter of the episodes nominal, the rest with every perturbation family "
        "of the domain drawn uniformly from nominal to 60%% of its range (the grid's fourth "
        "level); docs/models.md",
    )
    p.set_defaults(func=_cmd_collect)

    from rbfm.fb import FB_PRESETS

    p = _command(
        sub,
        "pretrain",
        help="train a forward-backward model on a reward-free dataset (resumable)",
        description="FB pretraining (Algorithm 1) with periodic zero-shot evaluation; keeps "
        "the best model by IQM and the latest. Killed and rerun with the same command, it "
        "resumes from the last checkpoint; a larger --steps extends a finished run.",
    )
    p.add_argument("--dataset", required=True, help="ExORL buffer or a directory above it")
    p.add_argument("--out", required=True, help="run directory")
    p.add_argument(
        "--domain",
        default=None,
        choices=sorted(DOMAINS),
        help="default: read from the dataset path",
    )
    p.add_argument(
        "--preset",
        default="cpu",
        choices=sorted(FB_PRESETS),
        help="FB sizes and schedule: paper (the paper's hyperparameters), cpu, tiny (tests)",
    )
    p.add_argument("--steps", type=int, default=None, help="updates (default: the preset's)")
    p.add_argument(
        "--transitions",
        type=int,
        default=None,
        help="uniform subsample of the dataset (default: min(1M, all))",
    )
    p.add_argument("--seed", type=int, default=0, help="network initialisation and batch sampling")
    p.add_argument("--device", default=None, help=DEVICE_HELP)
    p.add_argument("--bf16", action="store_true", help="bfloat16 autocast for the networks")
    p.add_argument(
        "--compile",
        action="store_true",
        help="torch.compile the update's networks: 30-60 s to compile, then 12-17%% faster "
        "updates with --bf16 on a CPU (none in fp32). A resumed run reproduces an "
        "uninterrupted one only with the same choice.",
    )
    p.add_argument(
        "--cuda-graph",
        action="store_true",
        help="on a GPU, replay the whole update as one CUDA graph after 3 eager updates: "
        "the eager update is bound by launching ~460 small kernels (docs/benchmarks.md). "
        "Not with --compile or average_tau > 0.",
    )
    p.add_argument(
        "--eval-every",
        type=int,
        default=None,
        help="updates between zero-shot evaluations (default: the preset's)",
    )
    p.add_argument("--eval-episodes", type=int, default=None, help="per task")
    p.add_argument(
        "--checkpoint-every",
        type=int,
        default=None,
        help="updates between resumable checkpoints (default: the preset's)",
    )
    p.add_argument("--log-every", type=int, default=1000, help="updates between log lines")
    p.add_argument(
        "--workers",
        type=int,
        default=0,
        help="rollout worker processes for evaluation (0: in-process)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch intra-op threads (default: torch's). A resumed run reproduces an "
        "uninterrupted one only with the same thread count.",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a field of the preset's FBConfig, e.g. target_pessimism=0 or "
        "batch_size=1024 (repeatable; part of the run's identity)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_pretrain)

    p = _command(
        sub,
        "zero-shot",
        help="evaluate a model's reward-inferred policies (z from 10k relabelled states)",
    )
    p.add_argument("--checkpoint", required=True, help=CHECKPOINT_HELP)
    p.add_argument(
        "--task",
        action="append",
        default=None,
        help="task to evaluate (repeatable; default: all of the domain's)",
    )
    p.add_argument(
        "--perturbation", default=None, help="family to evaluate under (default: nominal dynamics)"
    )
    p.add_argument(
        "--level", type=float, default=None, help="the family's level (default: its nominal value)"
    )
    p.add_argument("--episodes", type=int, default=10, help="episodes per task")
    p.add_argument(
        "--dataset",
        default=None,
        help="infer the tasks' z from this dataset (default: the z stored in the "
        "checkpoint, else the model's training dataset)",
    )
    p.add_argument("--random", action="store_true", help="also evaluate a uniform random policy")
    p.add_argument("--out", default=None, help="also write the table to this CSV")
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="initial states of the episodes, and the relabelled states the z come from",
    )
    p.add_argument("--device", default=None, help=DEVICE_HELP)
    p.add_argument(
        "--workers", type=int, default=0, help="rollout worker processes (0: in-process)"
    )
    p.set_defaults(func=_cmd_zero_shot)

    from rbfm.methods import NAMES

    p = _command(
        sub,
        "demos",
        help="generate expert demonstrations with a model's "
        "reward-inferred policy (nominal dynamics)",
    )
    p.add_argument("--checkpoint", required=True, help=CHECKPOINT_HELP)
    p.add_argument("--task", required=True, help=_task_help("the domain's task to demonstrate"))
    p.add_argument("--episodes", type=int, default=200, help="demonstration episodes rolled out")
    p.add_argument("--out", required=True, help="demonstrations file (.npz)")
    p.add_argument(
        "--dataset",
        default=None,
        help="infer the task's z from this dataset (default: the z stored in the "
        "checkpoint, else the model's training dataset)",
    )
    p.add_argument(
        "--action-noise",
        type=float,
        default=0.0,
        help="std of Gaussian noise on the expert's actions, clipped to [-1, 1]: "
        "demonstrations the model cannot reproduce exactly (default: 0, its own policy)",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="initial states of the demonstrations (and their action noise)",
    )
    p.add_argument("--device", default=None, help=DEVICE_HELP)
    p.set_defaults(func=_cmd_demos)

    p = _command(
        sub, "infer", help="infer a task vector z from demonstrations (or train a baseline policy)"
    )
    p.add_argument(
        "--checkpoint",
        default=None,
        help="FB model (not used by the baselines); " + CHECKPOINT_HELP,
    )
    p.add_argument("--demos", required=True, help="demonstrations file from `rbfm demos`")
    p.add_argument(
        "--method",
        required=True,
        choices=NAMES,
        help="FB task inference (fbil, rbfm-light, rbfm-heavy) or a baseline",
    )
    p.add_argument(
        "--preset",
        default="cpu",
        choices=["paper", "cpu"],
        help="baselines: paper (Tables 8-9) or cpu (far fewer steps)",
    )
    p.add_argument(
        "--eps",
        type=float,
        default=None,
        help="robustness radius (default: the method's config: 0.8 for RBFM-Light, RBFM-Heavy "
        "and BE-DROIL; DRBC's preset's, 0.5 at cpu)",
    )
    p.add_argument(
        "--settings",
        default="default",
        choices=["default", "paper"],
        help="FB methods: default (converged: full-batch descent, stopped by its own "
        "convergence rule) or paper (Tables 5-7); docs/inference.md (default: default)",
    )
    p.add_argument(
        "--steps",
        type=int,
        default=None,
        help="FB methods: the step cap (default 3000; paper: 3000 FB-IL, 5000 Light/Heavy); "
        "baselines: the training steps (default: the --preset's, 20000 at cpu)",
    )
    p.add_argument("--num-demos", type=int, default=4, help="episodes drawn per seed")
    p.add_argument(
        "--bf16",
        action="store_true",
        help="a bfloat16 copy of the actor (faster, for CPUs with bf16 units)",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="which --num-demos episodes are drawn, and the descent's batches",
    )
    p.add_argument("--device", default=None, help=DEVICE_HELP)
    p.add_argument(
        "--out", required=True, help="task-vector file (.json), or the baselines' policy stem"
    )
    p.set_defaults(func=_cmd_infer)

    p = _command(
        sub,
        "adapt",
        help="adapt a task vector to the environment it meets, from a few reward-free episodes",
        description="Runs --episodes episodes in the (perturbed) environment and moves z so "
        "that its states match the demonstrations' states in the model's B space; never "
        "reads a reward (but with --oracle). docs/inference.md, section 'Adapting to the "
        "dynamics met'.",
    )
    p.add_argument("--checkpoint", required=True, help="FB model of the z (shipped names work)")
    p.add_argument("--demos", required=True, help="demonstrations file from `rbfm demos`")
    p.add_argument("--z", required=True, help="task-vector file from `rbfm infer`")
    p.add_argument(
        "--perturbation", default=None, help=_family_help("family of the deployed environment")
    )
    p.add_argument("--level", type=float, default=None, help="its level (paper units)")
    p.add_argument("--episodes", type=int, default=10, help="episode budget (default: 10)")
    p.add_argument(
        "--states", type=int, default=1, help="initial states per candidate z (default: 1)"
    )
    p.add_argument("--num-demos", type=int, default=4, help="episodes drawn (as for infer)")
    p.add_argument("--seed", type=int, default=0, help="which demos are drawn; adaptation seed")
    p.add_argument(
        "--oracle",
        action="store_true",
        help="choose by the task's return instead (an upper bound for reports, not a method)",
    )
    p.add_argument("--device", default=None, help=DEVICE_HELP)
    p.add_argument("--out", required=True, help="adapted task-vector file (.json)")
    p.set_defaults(func=_cmd_adapt)

    p = _command(
        sub,
        "evaluate",
        help="evaluate task vectors and baseline policies under a perturbation sweep",
    )
    p.add_argument(
        "--checkpoint", default=None, help="the FB model of the task vectors; " + CHECKPOINT_HELP
    )
    p.add_argument(
        "--z",
        nargs="+",
        required=True,
        help="files from `rbfm infer`: task vectors (.json) and baseline policies",
    )
    p.add_argument(
        "--task", required=True, help=_task_help("task whose reward scores the episodes")
    )
    p.add_argument(
        "--perturbation", default=None, help=_family_help("family (default: nominal only)")
    )
    p.add_argument(
        "--levels",
        type=float,
        nargs="+",
        default=None,
        help="default: the family's six sweep levels",
    )
    p.add_argument("--episodes", type=int, default=10, help="episodes per task vector and level")
    p.add_argument(
        "--seed",
        type=int,
        default=EVAL_SEED,
        help="initial states of the evaluation episodes (default: %(default)s, apart from "
        "`rbfm demos`'s default seed 0, so that policies are not scored on the states "
        "their demonstrations started from; the experiment runner uses the same)",
    )
    p.add_argument("--device", default=None, help=DEVICE_HELP)
    p.add_argument(
        "--cross-task",
        action="store_true",
        help="score files inferred for another task than --task (refused otherwise)",
    )
    p.add_argument("--out", default=None, help="CSV file for the table")
    p.set_defaults(func=_cmd_evaluate)

    p = _command(
        sub,
        "experiment",
        help="run a slice of the paper's experiment grid (a preset or a TOML spec), "
        "resumably, locally or on Ray; results table and figures",
        description="Runs demonstrations -> task inference / baseline training -> evaluation "
        "as cells with stable ids, each stored atomically under --out. Killed and rerun, it "
        f"skips finished cells. Presets: {', '.join(PRESETS)} (see rbfm.experiments.spec).",
    )
    p.add_argument("spec", help="a preset name or a .toml spec file")
    p.add_argument("--out", default=None, help="run directory (default: runs/experiments/NAME)")
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="local worker processes (default: the machine's cores; 0: in this process)",
    )
    p.add_argument(
        "--ray",
        default=None,
        metavar="ADDRESS",
        help="run on Ray: 'auto' (the cluster this machine is in), 'local' (a private "
        'instance), or a cluster address; needs pip install "rbfm[ray]"',
    )
    p.add_argument("--seeds", type=int, default=None, help="override: the first N seeds")
    p.add_argument("--episodes", type=int, default=None, help="override: episodes per level")
    p.add_argument("--steps", type=int, default=None, help="override: every method's steps")
    p.add_argument(
        "--eval-batch",
        type=int,
        default=None,
        help="episodes per evaluation job (one lockstep batch; default: the runner's "
        "EVAL_BATCH, 400)",
    )
    p.add_argument("--figures", action="store_true", help="draw the figures and tables")
    p.add_argument("--dry-run", action="store_true", help="validate and print the plan only")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_experiment)

    p = _command(
        sub,
        "render",
        help="a GIF of policies side by side on a task, at a perturbation level (offscreen "
        "MuJoCo: EGL, or OSMesa with MUJOCO_GL=osmesa)",
    )
    p.add_argument("--checkpoint", required=True, help=CHECKPOINT_HELP)
    p.add_argument("--task", required=True, help="task whose reward the labels sum")
    p.add_argument(
        "--z",
        nargs="+",
        default=None,
        help="task-vector files from `rbfm infer`, one panel each (default: the model's "
        "reward-inferred policy for --task)",
    )
    p.add_argument("--perturbation", default=None, help="family (default: nominal dynamics)")
    p.add_argument("--level", type=float, default=None, help="default: the family's extreme")
    p.add_argument("--steps", type=int, default=500, help="control steps rendered")
    p.add_argument("--every", type=int, default=4, help="a frame every N control steps")
    p.add_argument("--size", default="240x320", help="HEIGHTxWIDTH of each panel, in pixels")
    p.add_argument("--seed", type=int, default=EVAL_SEED, help="the episode's initial state")
    p.add_argument("--device", default=None, help=DEVICE_HELP)
    p.add_argument("--out", required=True, help="GIF file to write")
    p.set_defaults(func=_cmd_render)

    p = _command(
        sub,
        "export",
        help="copy a checkpoint (e.g. a run's best) to a new "
        "place, with each task's reward-inferred z in its description",
    )
    p.add_argument("--checkpoint", required=True, help="the checkpoint to copy (e.g. RUN/best)")
    p.add_argument("--out", required=True, help="destination stem (writes .safetensors/.json)")
    p.add_argument(
        "--dataset",
        default=None,
        help="the model's training data: labels the tasks' z if the checkpoint stores "
        "none, and its name replaces the recorded one (default: the recorded dataset)",
    )
    p.add_argument(
        "--fp16",
        action="store_true",
        help="store the weights in float16: half the file (a paper-size model: 33 MB "
        "instead of 65), loaded back into float32",
    )
    p.set_defaults(func=_cmd_export)

    p = _command(
        sub,
        "plot",
        help="plot a pretraining run's IQM curve, or tables from `evaluate` (nominal: bars "
        "per task; sweeps: a panel per table), to a PNG",
    )
    p.add_argument("inputs", nargs="+", help="a pretraining run directory, or CSV tables")
    p.add_argument("--out", required=True, help="PNG file to write")
    p.add_argument("--title", default=None, help="figure title (default: derived from the inputs)")
    p.set_defaults(func=_cmd_plot)

    p = _command(sub, "info", help="summarise a dataset, with every task's relabelled rewards")
    p.add_argument("path", help="a buffer directory or any directory above it")
    p.set_defaults(func=_cmd_info)

    p = _command(
        sub,
        "pack",
        help="chosen episodes of a dataset in one compact file, to carry to another machine "
        "(e.g. a GPU whose transfers are limited); `rbfm unpack` writes them back",
    )
    p.add_argument("path", help="a buffer directory or any directory above it")
    p.add_argument("--out", required=True, help="the file to write (xz-compressed)")
    p.add_argument(
        "--first", type=int, default=None, help="only the first N episodes (default: all)"
    )
    p.add_argument(
        "--every",
        type=int,
        default=1,
        help="every Nth episode of those: 5 keeps episodes 0, 5, 10, ... (default: 1)",
    )
    p.add_argument(
        "--half",
        action="append",
        default=[],
        choices=["observation", "physics"],
        help="store this key in float16 (relative error <= 2^-11; repeatable)",
    )
    p.add_argument(
        "--replay",
        action="store_true",
        help="store only the actions (exactly); `rbfm unpack` regenerates the rest in the "
        "simulator. Needs a buffer written by `rbfm collect`: ~1/6 of --half's size",
    )
    p.set_defaults(func=_cmd_pack)

    p = _command(
        sub, "unpack", help="write a `rbfm pack` file's episodes back as ExORL episode files"
    )
    p.add_argument("path", help="the packed file")
    p.add_argument(
        "--out", required=True, help="dataset root: episodes go to OUT/<domain>/<algo>/buffer"
    )
    p.add_argument(
        "--workers",
        type=int,
        default=len(os.sched_getaffinity(0)),
        help="processes regenerating a --replay file's episodes (0: in this one) "
        "(default: the CPUs this process may use)",
    )
    p.set_defaults(func=_cmd_unpack)

    p = _command(sub, "envs", help="list domains, tasks and perturbation families")
    p.set_defaults(func=_cmd_envs)
    return parser


def _format_warning(
    message: Warning | str, category: type[Warning], *_: object, **__: object
) -> str:
    """A library warning on the command line: its text, not the source line that raised it."""
    return f"rbfm: warning: {message}\n"


# Rollouts and task inference run small networks on one state batch at a time: extra
# torch threads only spin. `rbfm zero-shot --checkpoint cheetah --task walk --episodes 2`
# took 11.2 s on torch's two threads and 4.6 s on one, on a 2-core machine whose cores
# other jobs held. OMP_NUM_THREADS, when set, wins; pretrain has --threads, collect
# and experiment jobs pin one thread themselves.
ONE_THREAD_COMMANDS = frozenset({"zero-shot", "demos", "infer", "adapt", "evaluate", "render"})


def main(argv: Sequence[str] | None = None) -> int:
    import rbfm

    given = sys.argv[1:] if argv is None else list(argv)
    if given[:1] == ["render"] and rbfm.GL_DEFAULTED:
        # Before dm_control is first imported (below): it fixes its backend then.
        os.environ["MUJOCO_GL"] = "egl"
    warnings.formatwarning = _format_warning
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
    except RbfmError as e:
        print(f"rbfm {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            f"rbfm {args.command}: interrupted; rerun the same command to resume", file=sys.stderr
        )
        return 130
    except BrokenPipeError:  # output piped into a reader that stopped (`| head`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    return 0


if __name__ == "__main__":
    sys.exit(main())
