"""Task-vector and policy files, and the bodies of the commands that read or write them
(`rbfm infer`, `adapt`, `evaluate`, `render`, and `demos`, whose demonstrations files
they read); the experiment runner writes its task vectors with `save_z`.

- A task vector (FB methods): JSON with the z and its description (method, domain,
  task, the model's weights hash, settings, objective, ...).
- A policy (baselines): safetensors weights and a JSON description (format
  "rbfm-policy", method, dimensions, config); saving and loading by
  `rbfm.baselines` (`write_policy`, `load_policy`).
- Goal sequences (`goal`): a task vector per demonstrated step, safetensors beside a
  JSON description (format "rbfm-goals"; `rbfm.inference.goal`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rbfm import EVAL_SEED, checks
from rbfm.atomic import atomic_write, beside, standard_json, stem_of
from rbfm.baselines import BaselineResult, as_policy, load_policy, train_baseline, write_policy
from rbfm.baselines.common import FORMAT as POLICY_FORMAT
from rbfm.data.demos import Demos, save_demos
from rbfm.envs import checked_tasks, get_domain, get_perturbation
from rbfm.errors import ConfigError, RbfmError, unknown
from rbfm.evaluation.aggregate import mean_ci
from rbfm.evaluation.rollout import EnvSpec
from rbfm.evaluation.sweep import sweep, sweep_table, write_csv
from rbfm.fb.checkpoint import load_checkpoint, named_for_weights, read_meta, recorded_name
from rbfm.fb.model import FBModel
from rbfm.inference import InferenceResult, infer, method_config
from rbfm.inference.adapt import CRITERION_LABELS, AdaptConfig, AdaptResult, adapt
from rbfm.inference.goal import FORMAT as GOALS_FORMAT
from rbfm.inference.goal import (
    GoalPolicy,
    GoalSequences,
    goal_config,
    infer_sequences,
    read_goals,
    write_goals,
)
from rbfm.methods import NAMES, check_demos, check_named, display_label, get_method

_SHA256 = re.compile(r"[0-9a-f]{64}")


def save_z(path: str | os.PathLike[str], z: torch.Tensor, meta: dict[str, Any]) -> Path:
    path = Path(path)
    standard_json(path, meta)
    text = json.dumps({"z": z.detach().cpu().tolist(), **meta}, indent=2, allow_nan=False)
    atomic_write(path, lambda tmp: tmp.write_text(text))
    return path


def load_z(path: str | os.PathLike[str]) -> tuple[torch.Tensor, dict[str, Any]]:
    return _task_vector(path, _read_json(path))


def _read_json(path: str | os.PathLike[str]) -> Any:
    if not Path(path).is_file():
        raise ConfigError(f"{path}: no such file")
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:  # JSON's or UTF-8's defects
        raise ConfigError(f"{path}: not a task-vector or policy file ({e})") from e
    if isinstance(data, dict):  # z's own check names a NaN there; the rest would be copied
        standard_json(Path(path), {k: v for k, v in data.items() if k != "z"})
    return data


def _task_vector(path: str | os.PathLike[str], data: Any) -> tuple[torch.Tensor, dict[str, Any]]:
    """The z and description of a parsed task-vector file, validated."""
    held = {GOALS_FORMAT: "a z per step", POLICY_FORMAT: "a policy network"}
    if isinstance(data, dict) and (what := held.get(data.get("format", ""))):
        raise ConfigError(
            f"{path}: {data.get('method', 'its method')} is {what}, not a task vector"
        )
    try:
        z = torch.tensor(data.pop("z"), dtype=torch.float32)
    except (AttributeError, KeyError, TypeError, ValueError) as e:
        raise ConfigError(f"{path}: not a task-vector file written by `rbfm infer` ({e})") from e
    if z.ndim != 1 or not torch.isfinite(z).all():
        raise ConfigError(f"{path}: the task vector must be a finite 1-d list of numbers")
    for key in ("method", "domain", "task", "checkpoint"):  # names, read and copied as such
        if key in data and not isinstance(data[key], str):
            raise ConfigError(
                f"{path}: {key} is {json.dumps(data[key])} (valid: a name, as `rbfm infer` "
                "writes it; or no such field)"
            )
    sha = data.get("model_sha256")
    if sha is not None and not (isinstance(sha, str) and _SHA256.fullmatch(sha)):
        raise ConfigError(
            f"{path}: model_sha256 is {sha!r} (valid: the model's weights' SHA-256, 64 hex "
            "digits, as `rbfm infer` writes it; or no such field)"
        )
    return z, data


def recorded_model(info: dict[str, Any]) -> str:
    """The model a file records, by name; where that name now loads other weights than
    the file's (a domain's default replaced), the installed model with the file's."""
    name, sha = str(info["checkpoint"]), info.get("model_sha256")
    if sha is not None and read_meta(name)["sha256"] != sha:
        return named_for_weights(sha) or name
    return name


def on_sphere(path: str | os.PathLike[str], z: torch.Tensor, dim: int) -> None:
    """Refuses a task vector (d,), or goals (n, d), not of size `dim` on the sphere of
    radius sqrt(dim), where a model's policies take z."""
    if z.shape[-1] != dim:
        raise ConfigError(f"{path}: a {z.shape[-1]}-dim task vector, but the model's z has {dim}")
    norms, radius = z.reshape(-1, dim).norm(dim=1), dim**0.5
    worst = int((norms - radius).abs().argmax())
    if abs(float(norms[worst]) - radius) > 1e-3 * radius:
        what = "the task vector's" if z.dim() == 1 else f"goal {worst}'s"
        raise ConfigError(
            f"{path}: {what} norm is {float(norms[worst]):.4g}, but the model's policies "
            f"take z on the sphere of radius sqrt({dim}) = {radius:.4g} (every rbfm inference "
            "returns such a z); scale it to that norm"
        )


def check_z(
    path: str | os.PathLike[str], z: torch.Tensor, info: dict[str, Any], meta: dict[str, Any]
) -> None:
    """Refuses a task vector (d,), or goals (n, d) (a row per step), that does not belong
    to the model described by `meta`."""
    on_sphere(path, z, int(meta["config"]["z_dim"]))
    if info.get("domain") not in (None, meta["domain"]):
        raise ConfigError(
            f"{path}: a {info['domain']} task vector, but the model is a {meta['domain']} model"
        )
    sha = info.get("model_sha256")
    if sha is not None and sha != meta["sha256"]:
        known = named_for_weights(sha)
        hint = f": its model is `{known}` (--checkpoint {known})" if known else ""
        raise ConfigError(
            f"{path}: inferred with another model (weights {sha[:12]}...), not this checkpoint "
            f"({meta['sha256'][:12]}...){hint}"
        )


def z_files(paths: list[str], model_meta: dict[str, Any]) -> list[tuple[str, torch.Tensor]]:
    """Task-vector files of the model `model_meta` describes: (display label, z) each."""
    out = []
    for path in paths:
        z, info = load_z(path)
        check_z(path, z, info, model_meta)
        out.append((display_label(str(info.get("method", Path(path).stem))), z))
    return out


def load_any(
    path: str | os.PathLike[str],
) -> tuple[str, torch.Tensor | None, nn.Module | GoalSequences | None, dict[str, Any]]:
    """A file from `rbfm infer`, whichever kind: (method, z or None, policy network or
    goal sequences or None, description)."""
    data = _read_json(path)
    if isinstance(data, dict) and data.get("format") == POLICY_FORMAT:
        method, module, info = load_policy(path)
        return method, None, module, info
    if isinstance(data, dict) and data.get("format") == GOALS_FORMAT:
        return str(data.get("method", "goal")), None, read_goals(Path(path), data), data
    z, info = _task_vector(path, data)
    return str(info.get("method", Path(path).stem)), z, None, info


# `rbfm demos`'s episodes per expert when not given. A planner episode takes 15-300 s on
# 2 cores, so the model's 200 would take hours; 8 is what every committed planner
# demonstration file holds (docs/demonstrations.md).
DEMO_EPISODES = {"fb": 200, "mpc": 8}


def demos_to_file(
    expert: str,
    task: str,
    out: str | os.PathLike[str],
    episodes: int | None = None,
    seed: int = 0,
    checkpoint: str | None = None,
    dataset: str | None = None,
    action_noise: float = 0.0,
    domain: str | None = None,
    mpc: Mapping[str, Any] | None = None,
    parts: str | os.PathLike[str] | None = None,
    device: str | None = None,
) -> str:
    """`task`'s demonstrations at nominal dynamics written to `out` (.npz) by the expert
    "fb" (the policy of `checkpoint` with the task's z, from `dataset` if given, its
    actions with Gaussian `action_noise`) or "mpc" (a planner on `domain`'s simulator,
    `mpc` its settings, its episodes kept in `parts` if given); a line saying what was
    written and its mean return."""
    if expert not in DEMO_EPISODES:
        raise unknown("expert", expert, DEMO_EPISODES)
    is_mpc = expert == "mpc"
    if (domain is None) == is_mpc or (checkpoint is None) != is_mpc:
        raise ConfigError("--expert fb takes --checkpoint, --expert mpc takes --domain")
    if ((action_noise or dataset or device) and is_mpc) or ((mpc or parts) and not is_mpc):
        raise ConfigError(
            "--dataset, --action-noise and --device are --expert fb's (the planner runs on "
            "the simulator, not torch), --mpc and --parts mpc's"
        )
    episodes = DEMO_EPISODES[expert] if episodes is None else episodes
    checks.out_file(out)  # before the episodes (a planner's take minutes each)
    if domain is not None:  # the planner (as checked above)
        from rbfm.planning import mpc_config
        from rbfm.planning.demos import mpc_demos

        config = mpc_config(domain, mpc)
        kept = None if parts is None else Path(parts)
        demos = mpc_demos(domain, task, episodes, Path(out), config, seed, parts=kept)
    else:
        from rbfm.inference.expert_demos import expert_demos

        assert checkpoint is not None  # the model's policy (as checked above)
        demos = expert_demos(checkpoint, task, episodes, seed, action_noise, dataset, device)
        save_demos(out, demos)
    m, h = mean_ci(demos.returns)
    ci = f"+- {h:.1f} (95% CI)" if episodes > 1 else "(1 episode, no CI)"
    what = f"{episodes} {demos.domain}/{task} {expert} episode{'s' * (episodes > 1)}"
    return f"wrote {what} to {out}: return {m:.1f} {ci}"


def _fb_config(method: str, settings: str, overrides: dict[str, Any]) -> None:
    """An FB method's settings with `overrides`, or a one-line refusal naming the field."""
    if "eps" in overrides and not get_method(method).robust:
        raise ConfigError(f"eps applies to the robust methods only, not {method}")
    method_config(method, settings, **overrides)


def infer_to_file(
    model: FBModel,
    model_meta: dict[str, Any],
    checkpoint: str,
    demos: Demos,
    method: str,
    seed: int,
    out: str | os.PathLike[str],
    settings: str = "default",
    overrides: dict[str, Any] | None = None,
    described: dict[str, Any] | None = None,
    progress: bool = False,
) -> InferenceResult:
    """An FB method's task vector from `demos`, written to `out` with its description:
    the model's weights hash (so it is never scored with another model), the settings,
    and the method's full-set objective, steps and convergence."""
    overrides = dict(overrides or {})
    _fb_config(method, settings, overrides)  # refused before any work
    result = infer(model, demos, method, seed, progress, settings, **overrides)
    meta = {
        "method": method,
        "seed": seed,
        "domain": demos.domain,
        "task": demos.task,
        **(described or {}),
        "checkpoint": recorded_name(checkpoint),
        "model_sha256": model_meta["sha256"],
        "settings": settings,
        "overrides": overrides,
        "seconds": result.seconds,
        "steps": result.steps,
        # The method's objective on every demonstration transition at z (deterministic).
        "objective": result.objective,
        "converged": result.converged,
        # What stopped it when it did not converge: "step cap" or "stage cap".
        **({} if result.cap is None else {"cap": result.cap}),
        **result.extra,
    }
    save_z(out, result.z, meta)
    return result


def check_adapt_task(source: object, task: object, demos: Demos) -> None:
    """A task vector adapts towards demonstrations of its own task only."""
    if task not in (None, "", demos.task):
        raise ConfigError(
            f"{source}: a task vector for {task!r} cannot adapt to demonstrations of {demos.task!r}"
        )


def adaptation_record(res: AdaptResult, cfg: AdaptConfig, env: EnvSpec) -> dict[str, Any]:
    """What an adaptation did, as an adapted task vector's description records it: the
    criterion, episodes, environment, each candidate's distance and implied reward, the
    best candidate after each, which z it kept (cem: its generations and elites), and the
    time."""
    cem = {"population": cfg.population, "elites": cfg.elites,
           "generations": res.episodes // (cfg.states * cfg.population)}  # fmt: skip
    observed = {"observed": res.observed} if res.observed else {}  # criterion "states"
    return (
        (cem if cfg.search == "cem" else {})
        | observed
        | {
            "criterion": cfg.criterion,
            "episodes": res.episodes,
            "states": cfg.states,
            "perturbation": env.perturbation,
            "level": env.level,
            "distances": res.distances,
            "implied": res.implied,
            "best": res.best,
            "search": cfg.search,
            "keep": cfg.keep,
            "kept": res.kept,
            "seconds": res.seconds,
        }
    )


def adapt_to_file(
    checkpoint: str | None,
    z_file: str,
    demos: Demos,
    perturbation: str | None,
    level: float | None,
    cfg: AdaptConfig,
    seed: int,
    out: str | os.PathLike[str],
    device: str | None = None,
) -> str:
    """A task-vector file of `checkpoint` (None: the one the file records) adapted
    (rbfm.inference.adapt) to the demos' task under `perturbation` at `level` (both None:
    nominal), written to `out` with its description extended by the adaptation's record;
    a line saying how it went."""
    checks.seed("adapt", seed)
    env = EnvSpec(demos.domain, demos.task, perturbation, level).checked()
    z, info = load_z(z_file)
    cfg.searches()
    checkpoint = checkpoint or info.get("checkpoint")
    if not checkpoint:
        raise ConfigError(f"--checkpoint is needed: {z_file} records no model")
    model, model_meta = load_checkpoint(checkpoint, domain=demos.domain, device=device)
    check_z(z_file, z, info, model_meta)
    check_adapt_task(z_file, info.get("task"), demos)
    res = adapt(model, demos, z, env, cfg, seed=seed, progress=True)
    label = f"{CRITERION_LABELS[cfg.criterion]}-k{res.episodes}"
    method = f"{info.get('method', 'z')}+{label}"
    record = adaptation_record(res, cfg, env)
    save_z(
        out, res.z, {**info, "method": method, "adapted_from": str(z_file), "adaptation": record}
    )
    where = "nominal" if env.level is None else f"{env.perturbation}={env.level:g}"
    return (
        f"{label}: z written to {out} ({res.episodes} episodes in {where}, {res.seconds:.1f} "
        f"s); {_which_kept(res, cfg)}; "
        + (
            f"mean observation's distance {res.observed[0]:.3f} at the start z, "
            f"{res.observed[res.best[-1]]:.3f} at the best; "
            if res.observed
            else ""
        )
        + "B distance to the demonstrations "
        f"{res.distances[0]:.3f} at the start z, {res.distances[res.best[-1]]:.3f} at the "
        f"best; implied reward {res.implied[0]:.3f} and {res.implied[res.best[-1]]:.3f}"
    )


def _which_kept(res: AdaptResult, cfg: AdaptConfig) -> str:
    """Which z the adaptation returns, and why."""
    if cfg.search == "cem":
        return (
            f"the mean of generation {len(res.candidates) // cfg.population}'s "
            f"{cfg.elites} best of {cfg.population} candidates kept"
        )
    best = res.best[-1]
    if res.kept[-1] == best:
        return "the start z kept (it is the best)" if best == 0 else f"candidate {best} kept"
    return (
        f"the start z kept: the best, candidate {best}, is not clearly better over "
        f"{cfg.block}-step blocks (paired t-test, alpha {cfg.alpha:g})"
    )


def train_to_file(
    method: str,
    demos: Demos,
    preset: str,
    seed: int,
    out: str | os.PathLike[str],
    overrides: dict[str, Any] | None = None,
    described: dict[str, Any] | None = None,
    progress: bool = False,
) -> tuple[BaselineResult, dict[str, Any], Path]:
    """A baseline policy trained on `demos` and written to `out` (a stem); the run
    snapshots itself to `<stem>.resume.pt` and, called again, continues from it."""
    stem = stem_of(out)
    resume = beside(stem, ".resume.pt")
    result, config = train_baseline(method, demos, preset, seed, overrides, progress, resume)
    meta = {
        "seed": seed,
        "task": demos.task,
        **(described or {}),
        "preset": preset,
        "config": config,
        "steps": config["steps"],
        # this process's share when the run was resumed
        "seconds": result.seconds,
        "steps_timed": result.steps,
    }
    write_policy(stem, method, result.policy, demos.domain, meta)
    return result, config, stem


def imitate_to_file(
    method: str,
    demos: Demos,
    checkpoint: str | None,
    seed: int,
    out: str | os.PathLike[str],
    settings: str | None = None,
    preset: str | None = None,
    overrides: dict[str, Any] | None = None,
    described: dict[str, Any] | None = None,
    device: str | None = None,
) -> str:
    """Any method's result on `demos` written to `out`: an FB method's task vector of
    `checkpoint` (`settings`, `overrides`), or a baseline's policy (`preset`, and
    `overrides` of its config); a line saying what was written and how it ended.
    `settings` and `preset` None: not given (the method's default); given to a method
    that would ignore them, refused."""
    overrides = dict(overrides or {})
    checks.seed("infer", seed)
    check_named(method, settings, "--settings")
    check_named(method, preset, "--preset")
    check_demos(method, demos)
    settings = settings or "default"
    if get_method(method).kind == "goals":
        return goals_to_file(demos, checkpoint, seed, out, overrides, described, device)
    if not get_method(method).is_fb:
        if "bf16" in overrides:
            raise ConfigError(
                f"--bf16: FB methods only, not {method} (a baseline takes a --preset, and "
                "--steps for its training steps)"
            )
        if device is not None:
            raise ConfigError(f"--device: {method} trains on the CPU (FB methods take it)")
        res, config, stem = train_to_file(
            method, demos, preset or "cpu", seed, out, overrides, described, True
        )
        return (
            f"{method}: policy written to {stem}.safetensors/.json ({config['steps']} steps, "
            f"{res.steps} of them in {res.seconds:.1f} s here, {res.ms_per_step:.2f} ms/step)"
        )
    if checkpoint is None:
        raise ConfigError(f"--checkpoint is needed for {method}")
    _fb_config(method, settings, overrides)  # refused before the model loads
    model, meta = load_checkpoint(checkpoint, domain=demos.domain, device=device)
    fit = infer_to_file(
        model, meta, checkpoint, demos, method, seed, out, settings, overrides, described, True
    )
    n = int((demos.lengths - 1).sum())  # transitions: T-1 per episode
    return (
        f"{method} ({settings} settings): z written to {out} ({fit.steps} steps, "
        f"{fit.seconds:.1f} s, {fit.ms_per_step:.2f} ms/step); objective on all {n} "
        f"transitions {fit.objective:.4g}, {fit.stopped(settings)}"
    )


def goals_to_file(
    demos: Demos,
    checkpoint: str | None,
    seed: int,
    out: str | os.PathLike[str],
    overrides: dict[str, Any],
    described: dict[str, Any] | None = None,
    device: str | None = None,
) -> str:
    """The goal-based reduction's sequences written beside `out` (`.json` and
    `.safetensors`); a line saying what was written."""
    config = goal_config(overrides)  # it fits nothing: no steps, eps or bf16
    if checkpoint is None:
        raise ConfigError("--checkpoint is needed for goal")
    model, meta = load_checkpoint(checkpoint, domain=demos.domain, device=device)
    goals = infer_sequences(model, demos, config)
    info = {
        "method": "goal",
        "seed": seed,
        "domain": demos.domain,
        "task": demos.task,
        **(described or {}),
        "checkpoint": recorded_name(checkpoint),
        "model_sha256": meta["sha256"],
        "lookahead": config.lookahead,
        "seconds": goals.seconds,
    }
    path = write_goals(stem_of(out), goals, info)
    steps = sum(len(z) for z in goals.z)
    return (
        f"goal: {len(goals.z)} z sequences ({steps} steps) written to {path} and its "
        f".safetensors ({goals.seconds:.2f} s)"
    )


Loaded = tuple[str, str, torch.Tensor | None, nn.Module | GoalSequences | None, dict[str, Any]]


def _agreed(loaded: list[Loaded], key: str, option: str) -> str:
    """The `key` every file records (its task, the model it was inferred for), or an
    error asking for `option` where they record none or several."""
    found = sorted({str(info[key]) for *_, info in loaded if info.get(key) is not None})
    if len(found) != 1:
        recorded = f"record {', '.join(found)}" if found else f"do not record their {key}"
        raise ConfigError(f"{option} is needed: the files {recorded}")
    return found[0]


def _recorded_model(vectors: list[Loaded]) -> tuple[str, dict[str, Any]]:
    """The model the task vectors were inferred with, where they agree on one (by its
    contents: one model may be recorded under several names) and record where it is."""
    models = {e[-1].get("model_sha256") for e in vectors}
    recorded = [e for e in vectors if e[-1].get("checkpoint")]
    if None in models or not recorded:
        raise ConfigError("--checkpoint is needed: the files do not record their model")
    if len(models) > 1:
        raise ConfigError(f"--checkpoint is needed: the files record {len(models)} models")
    path, *_, info = recorded[0]
    try:
        name = recorded_model(info)
        return name, read_meta(name)
    except RbfmError as e:
        raise ConfigError(
            f"{path} records the model {info['checkpoint']}, which cannot be read: pass "
            f"--checkpoint ({e})"
        ) from e


def evaluate_files(
    paths: list[str],
    task: str | None = None,
    checkpoint: str | None = None,
    perturbation: str | None = None,
    levels: list[float] | None = None,
    episodes: int = 10,
    seed: int = EVAL_SEED,
    cross_task: bool = False,
    device: str | None = None,
    out: str | os.PathLike[str] | None = None,
    progress: bool = False,
) -> str:
    """`rbfm evaluate`: task-vector and policy files from `rbfm infer`, evaluated together
    under a sweep (every file's episode k from the same initial state), as a table in the
    paper's method order (and a CSV at `out`). The task and the model default to those
    the files were inferred for, where they agree. Refused before any rollout: files of
    different domains, a task vector of another model, a file inferred for another task
    (unless `cross_task`), levels outside the family's range."""
    checks.in_range("evaluate", "episodes", episodes, 1, integer=True)
    checks.seed("evaluate", seed)
    checks.out_file(out)
    if not paths:
        raise ConfigError("evaluate: no files given (task vectors from `rbfm infer`, policies)")
    if cross_task and task is None:  # the files' own task would be scored: nothing crosses
        raise ConfigError("--cross-task: needs --task, the task to score the files on")
    if len({Path(p).resolve() for p in paths}) != len(paths):  # counted as two seeds
        raise ConfigError("evaluate: a file is given twice")
    if levels is not None:  # else ignored (nominal), or the sweep's levels run instead
        if perturbation is None:
            raise ConfigError("--levels: needs a --perturbation family to set the levels of")
        if not levels or len(set(levels)) != len(levels):
            raise ConfigError("--levels: give distinct levels (none: the family's sweep)")
    loaded: list[Loaded] = [(str(path), *load_any(path)) for path in paths]
    task = task or _agreed(loaded, "task", "--task")
    meta = None
    of_model = [e for e in loaded if e[2] is not None or isinstance(e[3], GoalSequences)]
    if checkpoint is not None:
        meta = read_meta(checkpoint)
    elif of_model:
        checkpoint, meta = _recorded_model(of_model)
    zs, policies, goals, domains = [], [], [], set()
    if meta is not None:  # a policy of another domain than the model's is refused too
        domains.add(meta["domain"])
    for path, method, z, module, info in loaded:
        if isinstance(module, GoalSequences):
            assert meta is not None
            check_z(path, torch.cat(module.z), info, meta)  # each goal on the model's sphere
            goals.append((method, module))
        elif module is not None:
            policies.append((method, as_policy(module)))
        else:
            assert z is not None
            if meta is not None:
                check_z(path, z, info, meta)
            zs.append((method, z))
        domains.add(info.get("domain"))
        made_for = info.get("task")
        if made_for not in (None, task) and not cross_task:
            raise ConfigError(
                f"{path}: inferred for the task {made_for!r}, not --task {task!r} "
                "(pass --cross-task to score it on another task deliberately)"
            )
    # The paper's order (FB-IL, Light, Heavy, then the baselines), whatever the order of
    # the files (shell globs sort them alphabetically).
    rank = {m: i for i, m in enumerate(NAMES)}
    zs.sort(key=lambda e: rank.get(e[0], len(NAMES)))
    policies.sort(key=lambda e: rank.get(e[0], len(NAMES)))
    model, domain = None, str(next(iter(domains)))
    if device is not None and not (zs or goals):
        raise ConfigError("--device: policies run on the CPU; task vectors and goals take it")
    if zs or goals:
        assert checkpoint is not None
        model, meta = load_checkpoint(checkpoint, device=device)
        domains.add(meta["domain"])
        domain = meta["domain"]
        policies += [(method, GoalPolicy(model, g)) for method, g in goals]
    if len(domains) != 1:
        raise ConfigError(f"the files are for different domains: {sorted(map(str, domains))}")
    checked_tasks(domain, [task])
    swept: list[float | None] = [None]
    if perturbation is not None:
        pert = get_perturbation(domain, perturbation)
        swept = [pert.check(x) for x in levels or pert.levels]
    rows = sweep(
        model,
        zs,
        domain,
        task,
        perturbation,
        swept,
        episodes,
        seed,
        policies=policies,
        progress=progress,
    )
    dynamics = perturbation or "nominal"
    text = (
        f"{domain}/{task}, {dynamics}: mean return +- 95% CI ({episodes} episodes\n"
        "per task vector; across a method's task vectors, the 'seeds', else its episodes)\n"
        + sweep_table(rows)
    )
    if out:
        family = perturbation or "none"
        write_csv(out, rows, {"domain": domain, "task": task, "perturbation": family})
        text += f"\nwrote {out}"
    return text


def render_files(
    checkpoint: str,
    task: str,
    z_paths: list[str],
    perturbation: str | None,
    level: float | None,
    seed: int,
    steps: int,
    every: int,
    size: str,
    out: str,
    device: str | None = None,
) -> str:
    """`rbfm render`: the task-vector files' policies (default: the model's zero-shot
    policy for `task`) side by side at `level` (default: the family's extreme), as a GIF
    at `out`; a line saying what was written."""
    from rbfm.evaluation import fb_policy
    from rbfm.evaluation.render import parse_size, render_episodes, write_gif
    from rbfm.fb.reward_inference import task_vectors

    shape = parse_size(size)
    model, meta = load_checkpoint(checkpoint, device=device)
    domain = meta["domain"]
    checked_tasks(domain, [task])
    # Past its end the environment starts another episode, which the GIF would join on.
    checks.in_range("render", "steps", steps, 1, get_domain(domain).episode_length, integer=True)
    if perturbation is not None and level is None:
        level = get_perturbation(domain, perturbation).extreme
    policies = z_files(z_paths, meta)
    if not policies:
        z_all, _ = task_vectors(model, meta, [task], checkpoint, None, seed)
        policies.append(("zero-shot", z_all[task]))
    named = [(name, fb_policy(model, z)) for name, z in policies]
    frames, fps = render_episodes(
        named, domain, task, perturbation, level, seed, steps, every, shape
    )
    path = write_gif(frames, out, fps)
    dynamics = "nominal" if perturbation is None else f"{perturbation}={level:g}"
    return f"wrote {path}: {len(frames)} frames of {domain}/{task}, {dynamics}"
