"""The main job in a few calls: a model by name, your demonstrations, a policy by any
method, and its return under a perturbation.

    model = rbfm.load_model("cheetah:rnd-v1")
    demos = rbfm.Demos.from_arrays("cheetah", "run", observations, actions)
    fbil = rbfm.imitate(demos, "fbil", model)          # a task vector of the model
    drbc = rbfm.imitate(demos, "drbc", steps=2000)      # a policy network of its own
    rbfm.evaluate(fbil, perturbation="joint_friction", level=25.0).mean()

Every method has the same call; FB methods (fbil, rbfm-light, rbfm-heavy) need the FB
model, the baselines (drbc, bedroil) train their own network. `Imitation.save` writes
the same files as `rbfm infer`, which `load_imitation` and `rbfm evaluate` read.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from rbfm import EVAL_SEED, checks
from rbfm.checks import in_range, out_file
from rbfm.data.demos import Demos
from rbfm.envs import NOMINAL
from rbfm.errors import ConfigError
from rbfm.evaluation import EnvSpec, Policy, RolloutEngine, fb_policy
from rbfm.fb.checkpoint import recorded_name
from rbfm.fb.model import FBModel
from rbfm.inference.goal import GoalSequences
from rbfm.methods import DEFAULT_METHOD
from rbfm.threads import one_torch_thread


@dataclass(repr=False)
class Model:
    """An FB model with its description (domain, tasks' reward-inferred z, ...)."""

    fb: FBModel
    meta: dict[str, Any]
    name: str

    def __repr__(self) -> str:
        tasks = ", ".join(self.tasks) or "none stored"
        return f"Model({self.name}: {self.domain}, d={self.fb.cfg.z_dim}, tasks: {tasks})"

    @property
    def domain(self) -> str:
        return str(self.meta["domain"])

    @property
    def tasks(self) -> tuple[str, ...]:
        return tuple(self.meta.get("task_z", {}))

    def task_z(self, task: str) -> torch.Tensor:
        """The task's reward-inferred z stored with the model (its expert's)."""
        stored = self.meta.get("task_z", {})
        if task not in stored:
            raise ConfigError(
                f"{self.name} stores no z for {task!r}; it has: {', '.join(stored) or 'none'}"
            )
        return torch.tensor(stored[task], dtype=torch.float32)


def load_model(name: str | os.PathLike[str], device: str | None = None) -> Model:
    """A shipped model by name (`walker`, `cheetah:rnd-v1`, ...), a pretraining run
    directory, or a checkpoint file."""
    from rbfm.fb.checkpoint import load_checkpoint

    _a_path("load_model", name, "a model's name (`rbfm models`), a run directory or a checkpoint")
    fb, meta = load_checkpoint(name, device=device)
    return Model(fb.requires_grad_(False), meta, str(name))


def _a_path(where: str, value: object, what: str) -> None:
    """Refuses a value that names no file (an int, an Imitation's z...) by its type."""
    if not isinstance(value, (str, os.PathLike)):
        raise ConfigError(f"{where}: {value!r} is {type(value).__name__}, not a path; pass {what}")


def list_models() -> None:
    """Prints every model that `load_model` takes by name: domain, size, zero-shot IQM,
    whether this install has it, how to get it, and last "N of M installed" (as `rbfm
    models`). Reads descriptions and file sizes only; `rbfm.fb.checkpoint.listed_models`
    gives the rows as data."""
    from rbfm.fb.checkpoint import models_table

    print(models_table())


@dataclass(repr=False)
class Imitation:
    """What a method inferred from demonstrations: a task vector of `model` (FB
    methods), a sequence of them (`goal`), or a policy network (baselines)."""

    method: str
    domain: str
    task: str
    z: torch.Tensor | None = None
    model: Model | None = None
    network: nn.Module | None = None
    seconds: float = 0.0
    info: dict[str, Any] | None = None
    goals: GoalSequences | None = None  # `goal`: a z per demonstrated step

    def __repr__(self) -> str:
        info = self.info or {}
        what = f"z of {self.model.name}" if self.model is not None else "policy network"
        if self.goals is not None and self.model is not None:
            what = f"{len(self.goals.z)} z sequences of {self.model.name}"
        notes = [f"{k}={info[k]}" for k in ("converged", "seed") if k in info]
        if isinstance(info.get("adaptation"), dict):
            notes.append(_adaptation_note(info["adaptation"]))
        extra = "".join(f", {n}" for n in notes)
        return f"Imitation({self.method}, {self.domain}/{self.task}, {what}{extra})"

    def policy(self) -> Policy:
        """The rollout engine's policy: pi_z of the model, or the network."""
        from rbfm.baselines import as_policy
        from rbfm.inference.goal import GoalPolicy

        self._check()
        if self.goals is not None:
            assert self.model is not None
            return GoalPolicy(self.model.fb, self.goals)
        if self.z is not None:
            assert self.model is not None
            return fb_policy(self.model.fb, self.z.float())  # a float64 z: the actor's dtype
        assert self.network is not None
        return as_policy(self.network)

    def _check(self) -> None:
        """Refuses a policy whose actions would be NaN (the rollout engine would end each
        episode at its first step as a physics failure and count a return of 0), and a z
        or goals that are not the model's: its size, on its sphere (as files are)."""
        from rbfm.policy_files import on_sphere

        z = self.z
        if z is not None and not (
            isinstance(z, torch.Tensor) and z.dim() == 1 and z.is_floating_point()
        ):
            shape = f"shape {tuple(z.shape)}" if isinstance(z, torch.Tensor) else type(z).__name__
            raise ConfigError(
                f"{self.method} imitation: z is {shape}; it must be a 1-d torch float tensor, "
                "as the methods return it"
            )
        tensors = {"z": [] if z is None else [z]}
        if self.goals is not None:
            tensors["goal z"] = [*self.goals.z, self.goals.starts]
        if self.network is not None:
            tensors["network weights"] = list(self.network.parameters())
        for what, values in tensors.items():
            if not all(bool(torch.isfinite(t).all()) for t in values):
                raise ConfigError(f"{self.method} imitation: NaN or infinite values in its {what}")
        every = torch.cat(self.goals.z) if self.goals is not None else z
        if every is not None and self.model is not None:
            on_sphere(f"{self.method} imitation", every, self.model.fb.cfg.z_dim)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """A task-vector file (`path` as given), or a policy's or goal sequences' `.json`
        and `.safetensors` pair (`x.v2.json` or `x.v2`: `x.v2.json`, `x.v2.safetensors`);
        returns the `.json` path."""
        from rbfm.atomic import beside, stem_of
        from rbfm.baselines import write_policy
        from rbfm.inference.goal import write_goals
        from rbfm.policy_files import check_z, save_z

        self._check()  # before anything is written: its loader would refuse it
        out_file(path, option="save")
        meta = {"method": self.method, "domain": self.domain, "task": self.task}
        if self.z is not None or self.goals is not None:
            assert self.model is not None
            name = recorded_name(self.model.name)
            sha = {"model_sha256": self.model.meta["sha256"], "checkpoint": name}
            if self.goals is not None:  # a .json description beside a .safetensors
                return write_goals(stem_of(path), self.goals, meta | sha | (self.info or {}))
            assert self.z is not None
            check_z(path, self.z, meta | sha, self.model.meta)  # of another domain's model
            return save_z(Path(path), self.z, meta | sha | (self.info or {}))
        assert self.network is not None
        stem = stem_of(path)
        write_policy(stem, self.method, self.network, self.domain, meta | (self.info or {}))
        return beside(stem, ".json")


def _adaptation_note(record: dict[str, Any]) -> str:
    """An adapted z's record in a line: `rbfm.adapt`'s (`adaptation_record`) or a stage's
    (its cell, family, level and budget); a field a file lacks is left out."""
    where = record.get("perturbation", record.get("family"))
    where = "nominal" if where in (None, NOMINAL) else str(where)
    level = record.get("level")
    if isinstance(level, (int, float)) and not isinstance(level, bool):
        where += f"={level:g}"
    kept = record.get("kept", record.get("best"))  # old files: the best
    which = ""
    if record.get("search") == "cem":  # no candidate kept: the elites' mean
        which = ": the elites' mean" + (
            f" of generation {record['generations']}" if "generations" in record else ""
        )
    elif isinstance(kept, list) and kept:
        which = ": the start z kept" if kept[-1] == 0 else f": candidate {kept[-1]} kept"
    return f"adapted with {record.get('episodes', '?')} episodes in {where}{which}"


def _plain(value: Any) -> Any:
    """numpy's scalars as Python's (a seed from np.arange), checked and recorded as such."""
    return value.item() if isinstance(value, np.generic) else value


@one_torch_thread
def imitate(
    demos: Demos,
    method: str = DEFAULT_METHOD,
    model: Model | str | os.PathLike[str] | None = None,
    seed: int = 0,
    settings: str | None = None,
    **overrides: Any,
) -> Imitation:
    """Infers a policy for `demos` with `method`. `settings`: the FB methods' named
    settings ("default", "paper") or the baselines' preset ("cpu", "paper"), refused for a
    method that would ignore it (`rbfm.methods.check_named`); `overrides`
    set fields of the method's config (e.g. eps=0.5, steps=2000). `model`: a `Model`, or
    what `load_model` takes (a shipped model's name, a run directory, a checkpoint)."""
    from rbfm.baselines import train_baseline
    from rbfm.inference import infer, method_config
    from rbfm.methods import check_demos, check_named, get_method

    if not isinstance(demos, Demos):
        raise ConfigError(
            f"imitate: demos is a {type(demos).__name__}; pass a Demos (rbfm.load_demos(path))"
        )
    seed = _plain(seed)
    overrides = {k: _plain(v) for k, v in overrides.items()}  # checked and recorded as Python's
    checks.seed("imitate", seed)
    check_named(method, settings)  # before the model loads
    check_demos(method, demos)
    if model is not None and not isinstance(model, Model):
        model = load_model(model)
    if get_method(method).kind == "goals":  # a z per step, not one task vector
        from rbfm.inference.goal import goal_config, infer_sequences

        if model is None or model.domain != demos.domain:
            given = "" if model is None else f", not {model.name}"
            raise ConfigError(f"imitate: goal needs a {demos.domain} model (model=){given}")
        cfg = goal_config(overrides)
        goals = infer_sequences(model.fb, demos, cfg)
        record = {"seed": seed, "lookahead": cfg.lookahead}
        return Imitation(method, demos.domain, demos.task, None, model, None, goals.seconds,
                         record, goals)  # fmt: skip
    if get_method(method).is_fb:
        if model is None:
            raise ConfigError(f"imitate: {method} infers a task vector of an FB model: pass model=")
        if model.domain != demos.domain:
            raise ConfigError(
                f"imitate: demonstrations of {demos.domain} for a {model.domain} model"
            )
        # The config's fields only: `infer` would take `progress` as its own argument.
        method_config(method, settings or "default", **overrides)
        res = infer(model.fb, demos, method, seed, settings=settings or "default", **overrides)
        fit: dict[str, Any] = {"converged": res.converged, "objective": res.objective, "seed": seed}
        if settings:
            fit["settings"] = settings
        if overrides:  # e.g. whiten=True: a z that differs from the method's plain one
            fit["overrides"] = overrides
        return Imitation(method, demos.domain, demos.task, res.z, model, None, res.seconds, fit)
    if model is not None:
        raise ConfigError(f"imitate: {method} trains its own policy; it takes no model")
    result, config = train_baseline(method, demos, settings or "cpu", seed, overrides)
    info: dict[str, Any] = {"config": config, "seed": seed}
    return Imitation(
        method, demos.domain, demos.task, None, None, result.policy, result.seconds, info
    )


@one_torch_thread
def adapt(
    imitation: Imitation | str | os.PathLike[str],
    demos: Demos,
    perturbation: str | None = None,
    level: float | None = None,
    episodes: int = 10,
    seed: int = 0,
    search: str = "line",
    criterion: str = "demos",
    keep: str | None = None,
) -> Imitation:
    """An FB imitation's z adapted with `episodes` reward-free episodes in the environment
    it meets (`rbfm.inference.adapt`; `search` "line", "cone", or "cem", the cross-entropy
    method, for budgets of whole generations of 16 episodes; `criterion` "demos": its
    states matched to the demonstrations' in B's space, "implied": the most of its z's
    reward B(s)^T z, "states": its mean observation matched to theirs, in units of their
    spread). `keep` "clear" (line and cone's default): the start z stays unless
    the best candidate is better by a paired test over its episodes' blocks; "best" (cem's
    only): the search's answer whatever the margin.
    `imitation`: an `Imitation` or a file `load_imitation` reads. With no perturbation it
    adapts at nominal physics. What it did, and which z it kept, is `info["adaptation"]`."""
    from rbfm.inference.adapt import AdaptConfig
    from rbfm.inference.adapt import adapt as adapt_z
    from rbfm.policy_files import adaptation_record, check_adapt_task

    if not isinstance(demos, Demos):
        raise ConfigError(
            f"adapt: demos is a {type(demos).__name__}; pass a Demos (rbfm.load_demos(path))"
        )
    episodes, seed = _plain(episodes), _plain(seed)
    checks.seed("adapt", seed)
    in_range("adapt", "episodes", episodes, 1, integer=True)
    if not isinstance(imitation, Imitation):
        imitation = load_imitation(imitation)
    if imitation.z is None or imitation.model is None:
        what = "a z per step" if imitation.goals is not None else "a policy network"
        raise ConfigError(f"adapt: {imitation.method} is {what}; only task vectors adapt")
    if criterion not in ("demos", "implied", "states"):
        raise ConfigError(
            f"adapt: criterion {criterion!r} (valid: demos, implied, states; the reward oracle "
            "is for reports: rbfm.inference.adapt)"
        )
    check_adapt_task(f"adapt: {imitation.method}", imitation.task, demos)
    env = EnvSpec(imitation.domain, imitation.task, perturbation, level).checked()
    cfg = AdaptConfig(budget=episodes, search=search, criterion=criterion, keep=keep)
    cfg.searches()
    res = adapt_z(imitation.model.fb, demos, imitation.z, env, cfg, seed)
    info = (imitation.info or {}) | {"adaptation": adaptation_record(res, cfg, env)}
    return Imitation(
        imitation.method,
        imitation.domain,
        imitation.task,
        res.z,
        imitation.model,
        None,
        res.seconds,
        info,
    )


def load_imitation(
    path: str | os.PathLike[str], model: Model | str | os.PathLike[str] | None = None
) -> Imitation:
    """An imitation saved by `Imitation.save` or `rbfm infer`. A task vector is of the
    model it was inferred for: by default the one its file records, else `model` (a
    `Model` or what `load_model` takes; both checked against the weights' hash the file
    records)."""
    from rbfm.inference.goal import GoalSequences
    from rbfm.policy_files import check_z, load_any, recorded_model

    _a_path("load_imitation", path, "a file that Imitation.save or `rbfm infer` wrote")
    if model is not None and not isinstance(model, Model):
        model = load_model(model)

    method, z, network, info = load_any(path)
    goals = network if isinstance(network, GoalSequences) else None
    if z is not None or goals is not None:
        if model is None:
            if not info.get("checkpoint"):
                raise ConfigError(f"{path}: a task vector that records no model; pass model=")
            model = load_model(recorded_model(info))
        every = torch.cat(goals.z) if goals is not None else z
        assert every is not None
        check_z(path, every, info, model.meta)
    net = None if goals is not None else network
    assert not isinstance(net, GoalSequences)
    domain = str(info.get("domain", model.domain if model else ""))
    task = str(info.get("task", ""))
    return Imitation(method, domain, task, z, model, net, 0.0, info, goals)


@one_torch_thread
def evaluate(
    imitation: Imitation | str | os.PathLike[str],
    task: str | None = None,
    perturbation: str | None = None,
    level: float | None = None,
    episodes: int = 10,
    seed: int = EVAL_SEED,
) -> np.ndarray:
    """The returns of `episodes` episodes of the imitation's task (or `task`) under a
    perturbation family at a level (paper units; `rbfm envs` lists them). `imitation`: an
    `Imitation` or a file `load_imitation` reads."""
    episodes, seed = _plain(episodes), _plain(seed)
    in_range("evaluate", "episodes", episodes, 1, integer=True)
    checks.seed("evaluate", seed)
    if not isinstance(imitation, Imitation):
        imitation = load_imitation(imitation)
    task = imitation.task if task is None else task  # "" is refused, not the default
    spec = EnvSpec(imitation.domain, task, perturbation, level).checked()
    with RolloutEngine(0) as engine:
        result = engine.run(spec, imitation.policy(), episodes, seed=seed)
    if n := int(result.unstable.sum()):
        warnings.warn(
            f"evaluate: {n} of {episodes} episodes ended early by a physics failure; their "
            "returns count the steps before it",
            RuntimeWarning,
            stacklevel=2,
        )
    return result.returns
