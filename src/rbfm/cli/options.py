"""Every option of the command line, declared once, and the registry of commands. A
command names its options with a default (or REQUIRED, or a `Use` when its help, choices
or check differ); one built on a config dataclass takes the defaults of its fields."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import inspect
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from rbfm import checks

_R = TypeVar("_R")
Run = Callable[[argparse.Namespace], None]
Check = Callable[[str, Any], None]  # (the option as typed, its value)
REQUIRED = object()


@dataclass(frozen=True)
class Opt:
    help: str
    type: Callable[[str], Any] = str  # bool: a flag, False unless given
    extra: dict[str, Any] = field(default_factory=dict)  # argparse's nargs, action, ...
    positional: bool = False
    check: str | None = None  # a key of CHECKS, unless the command's Use names another


_KEEP, _SEARCH = {"choices": ["clear", "best"]}, {"choices": ["line", "cone", "cem"]}
MODEL = "FB model: a run folder, a checkpoint or a shipped name (walker; docs/models.md)"
OPTIONS: dict[str, Opt] = {
    "action_noise": Opt("Gaussian noise std on the expert's actions (clipped to [-1, 1])", float),
    "agent": Opt("exploration agent (the paper's data: rnd, aps, proto)"),
    "bf16": Opt("bfloat16 autocast for the networks", bool),
    "checkpoint": Opt(MODEL),
    "checkpoint_every": Opt("updates between resumable checkpoints (default: the preset's)", int),
    "compile": Opt("torch.compile the update (resume with the same; docs/benchmarks.md)", bool),
    "cross_task": Opt("score files inferred for another task than --task", bool),
    "cuda_graph": Opt("on a GPU, replay the update as one CUDA graph (docs/benchmarks.md)", bool),
    "dataset": Opt("infer the tasks' z from this dataset (default: the checkpoint's stored z)"),
    "criterion": Opt(
        "adaptation's choice: demos (B distance), implied (the start z's reward), states (mean "
        "observation), reward (the task's: the oracle, an upper bound for reports)",
        extra={"choices": ["demos", "implied", "states", "reward"]},
    ),
    "cosine": Opt("the cone search's cosine of each candidate to the start z", float),
    "keep": Opt("clear: z unless clearly beaten (line, cone); best (cem)", extra=_KEEP),
    "demos": Opt("demonstrations file from `rbfm demos` or `save_demos`"),
    "device": Opt("torch device, e.g. cpu or cuda:1 (default: cuda if available, else cpu)"),
    "domain": Opt("DMC domain"),
    "dry_run": Opt("validate and print the plan only", bool),
    "forget_stale": Opt("compute again finished cells whose demonstrations changed", bool),
    "dynamics": Opt(
        "each episode under physics drawn per episode (default: nominal); train: docs/models.md",
        extra={"choices": ["train"]},
    ),
    "episodes": Opt("episodes per task", int),
    "expert": Opt(
        "fb: the model's policy; mpc: a planner on the simulator", extra={"choices": ["fb", "mpc"]}
    ),
    "mpc": Opt(
        "planner setting FIELD=VALUE (repeatable; docs/demonstrations.md)",
        extra={"action": "append"},
    ),
    "eps": Opt("robustness radius (default: the method's: 0.8; DRBC's preset's)", float),
    "eval_batch": Opt("episodes per evaluation job (default: the runner's, 400)", int),
    "eval_episodes": Opt("zero-shot episodes per task at each evaluation", int),
    "eval_every": Opt("updates between zero-shot evaluations (default: the preset's)", int),
    "every": Opt("a frame every N control steps", int),
    "figures": Opt("draw the figures and tables", bool),
    "first": Opt("only the first N episodes (default: all)", int),
    "fp16": Opt("store the weights in float16 (half the file), loaded back as float32", bool),
    "half": Opt(
        "store this key in float16 (repeatable)",
        extra={"action": "append", "choices": ["observation", "physics"]},
    ),
    "inputs": Opt("a pretraining run directory, or CSV tables", str, {"nargs": "+"}, True),
    "level": Opt("the family's level, in its unit (`rbfm envs`)", float),
    "levels": Opt("levels to evaluate (default: the family's six)", float, {"nargs": "+"}),
    "log_every": Opt("updates between log lines", int),
    "method": Opt(
        "FB task inference (fbil, rbfm-light, rbfm-heavy), a reduction (er, fm, goal) or a baseline"
    ),
    "nominal": Opt("regenerate a dynamics-diverse --replay file at nominal physics", bool),
    "num_demos": Opt("demonstration episodes drawn per seed from the file's", int),
    "out": Opt("where to write", check="file"),
    "parts": Opt("--expert mpc: keep each episode here (an experiment's planner/ reuses them)"),
    "path": Opt("a buffer directory or any directory above it", positional=True),
    "perturbation": Opt("perturbation family (default: nominal dynamics)"),
    "preset": Opt("named sizes"),
    "quiet": Opt("no progress bar", bool),
    "random": Opt("also evaluate a uniform random policy", bool),
    "ray": Opt("run on Ray: auto, local or a cluster address (pip install 'rbfm[ray]')"),
    "replay": Opt("store only the actions; `rbfm unpack` regenerates the rest", bool),
    "search": Opt("adaptation search (cem: cross-entropy; docs/inference.md)", extra=_SEARCH),
    "seed": Opt("random seed", int, check="seed"),
    "seeds": Opt("override: the first N seeds", int),
    "set": Opt(
        "override a preset's field (repeatable; part of the run's identity)",
        extra={"action": "append", "metavar": "KEY=VALUE"},
    ),
    "settings": Opt(
        "FB-IL, RBFM-Light, RBFM-Heavy: default (converged, the default) or paper (Tables 5-7)",
        extra={"choices": ["default", "paper"]},
    ),
    "size": Opt("HEIGHTxWIDTH of each panel, in pixels"),
    "spec": Opt("a preset name or a .toml spec file (docs/spec.md)", positional=True),
    "states": Opt("initial states (episodes) per candidate z", int),
    "steps": Opt("steps", int),
    "task": Opt("task"),
    "tasks": Opt("only these tasks, comma-separated", lambda t: tuple(t.split(","))),
    "threads": Opt("torch threads (default: torch's; resume with the same)", int),
    "title": Opt("figure title (default: derived from the inputs)"),
    "transitions": Opt("environment steps", int),
    "workers": Opt("worker processes (0: in this one)", int),
    "z": Opt("task-vector files from `rbfm infer`", extra={"nargs": "+"}),
}


@dataclass(frozen=True)
class Use:
    """An option as one command uses it: its default, and what differs from OPTIONS."""

    default: Any = None
    help: str | None = None
    choices: list[str] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    check: str | None = None


# What a given value must be, checked (option as typed, value) before the command runs:
# an output is refused before any compute is spent on it.
CHECKS: dict[str, Check] = {
    "count": checks.count,
    "seed": checks.seed_option,
    "file": lambda option, path: checks.out_file(path),
    "file, folder made": lambda option, path: checks.out_file(path, made=True),
    "folder": lambda option, path: checks.out_dir(path, option),
}


@dataclass(frozen=True)
class Command:
    run: Run
    help: str
    description: str | None
    options: dict[str, Any]
    config: type | None


COMMANDS: dict[str, Command] = {}


def command(
    name: str, help: str, description: str | None = None, config: type | None = None, **options: Any
) -> Callable[[Run], Run]:
    """Registers a command; `options` maps option names to a default, REQUIRED or a Use.
    With `config`, its other fields that are options follow, defaulting to the field's
    default (required where it has none)."""

    def register(run: Run) -> Run:
        COMMANDS[name] = Command(run, help, description, options, config)
        return run

    return register


def _config_options(cls: type | None, given: dict[str, Any]) -> dict[str, Any]:
    fields = dataclasses.fields(cls) if cls else ()  # type: ignore[arg-type]
    return {
        f.name: REQUIRED if f.default is dataclasses.MISSING else f.default
        for f in fields
        # A flag is False unless given, whatever the field's default: commands name theirs.
        if f.name in OPTIONS and f.name not in given and OPTIONS[f.name].type is not bool
    }


def add_command(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str) -> None:
    cmd = COMMANDS[name]
    p = sub.add_parser(name, help=cmd.help, description=cmd.description, formatter_class=Help)
    checked: dict[str, Check] = {}
    for option, use in (cmd.options | _config_options(cmd.config, cmd.options)).items():
        opt, use = OPTIONS[option], use if isinstance(use, Use) else Use(use)
        if check := use.check or opt.check:
            checked[option] = CHECKS[check]
        kwargs = opt.extra | use.extra | {"help": use.help or opt.help}
        if opt.type is bool:
            kwargs["action"] = "store_true"
        else:
            kwargs["type"] = opt.type
        if use.choices is not None:
            kwargs["choices"] = use.choices
        if opt.positional:
            p.add_argument(option, **kwargs)
            continue
        if use.default is REQUIRED:
            kwargs["required"] = True
        elif opt.type is not bool:
            kwargs["default"] = [] if kwargs.get("action") == "append" else use.default
        p.add_argument("--" + option.replace("_", "-"), **kwargs)
    p.set_defaults(func=functools.partial(_checked_run, cmd.run, checked))


def _checked_run(run: Run, checked: dict[str, Check], args: argparse.Namespace) -> None:
    for option, check in checked.items():  # in the order the command names its options
        if (value := getattr(args, option)) is not None:
            check("--" + option.replace("_", "-"), value)
    out = getattr(args, "out", None)
    checks.out_is_no_input(out, {k: getattr(args, k, None) for k in checks.INPUT_OPTIONS})
    run(args)


class Help(argparse.HelpFormatter):
    """Every option's help ends with its default, unless the text already says it or
    there is none to show (None, a flag's False, an empty list)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        hidden = any(action.default is v for v in (None, False, argparse.SUPPRESS))
        hidden |= action.default == []
        if action.option_strings and not hidden:
            text += "" if "default" in text else " (default: %(default)s)"
        return text

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        # Not at hyphens: names such as grid-walker are read and copied whole.
        return textwrap.fill(" ".join(text.split()), width, initial_indent=indent,
                             subsequent_indent=indent, break_on_hyphens=False)  # fmt: skip


def call(api: Callable[..., _R], args: argparse.Namespace, **given: Any) -> _R:
    """`api` (a function or a config dataclass) on the options named as its parameters,
    `given` ones set: options take the API's names, so a command only adds what differs."""
    names = inspect.signature(api).parameters
    return api(**{k: v for k, v in vars(args).items() if k in names} | given)


def listed(what: str, by: str) -> str:
    """`what` with its choices per domain: by "tasks" or "families"."""
    from rbfm.envs import TASKS, families

    names = {d: families(d) if by == "families" else t for d, t in TASKS.items()}
    return f"{what} ({'; '.join(d + ': ' + ', '.join(v) for d, v in names.items())})"
