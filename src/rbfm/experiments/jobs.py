"""The units of work an executor runs: pure functions from a payload to a result.

Jobs read nothing but their payload and the model checkpoint it names, and write
nothing: the runner (the driver) owns the run directory. So the same job gives the same
result in this process, in a worker process or on a Ray node, and a job killed half-way
leaves no trace. Each job runs torch on one thread: the executors parallelise across
jobs, and results are bitwise reproducible only at a fixed thread count.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rbfm.data.demos import Demos
from rbfm.experiments.certificate import Certificate, heavy_certificates, tv_certificates
from rbfm.fb.context import demo_inputs
from rbfm.fb.model import FBModel
from rbfm.inference.goal import GoalPolicy, GoalSequences
from rbfm.methods import SEQUENCE_METHODS
from rbfm.planning.mppi import MPPIConfig, PlannedEpisode

# A baseline policy as jobs carry it: (method, its policy file's metadata, state dict).
BaselineState = tuple[str, dict[str, Any], dict[str, np.ndarray]]


@functools.lru_cache(maxsize=4)
def _model(stem: str) -> FBModel:
    from rbfm.fb.checkpoint import load_checkpoint

    model, _ = load_checkpoint(stem, device="cpu")
    return model.requires_grad_(False)


def _one_thread() -> None:
    torch.set_num_threads(1)


@dataclass(frozen=True)
class DemosJob:
    checkpoint: str  # the expert's model ("" for the planner)
    domain: str
    task: str
    z: list[float]
    episodes: int
    seed: int
    noise: float = 0.0  # std of the Gaussian action noise (0: the deterministic expert)
    planner: dict[str, Any] | None = None  # the MPPI planner's settings: it demonstrates
    # Where the planner keeps each episode as it ends (`rbfm.planning.demos`): the one
    # thing a job writes, since a planner episode costs minutes; keyed by its settings,
    # so a folder shared by runs never mixes two planners' episodes.
    parts: str | None = None


def run_demos(job: DemosJob) -> Demos:
    from rbfm.inference import generate_demos

    if job.planner is not None:
        from rbfm.planning.demos import episodes_demos

        config, episodes = _planned(
            job.domain, job.task, job.planner, job.episodes, job.seed, {}, job.parts
        )
        return episodes_demos(job.domain, job.task, episodes, config, job.seed)
    _one_thread()
    model = _model(job.checkpoint)
    z = torch.tensor(job.z)
    return generate_demos(
        model, job.domain, job.task, z, job.episodes, job.seed, action_noise=job.noise
    )


def _planned(
    domain: str,
    task: str,
    planner: dict[str, Any],
    episodes: int,
    seed: int,
    dynamics: dict[str, float],
    parts: str | None,
) -> tuple[MPPIConfig, list[PlannedEpisode]]:
    from rbfm.planning.demos import planned_episodes

    if parts is None:
        raise ValueError("a planner job needs a parts folder")
    config = MPPIConfig(**planner)
    return config, planned_episodes(domain, task, config, episodes, Path(parts), seed, dynamics)


@dataclass(frozen=True)
class PlanJob:
    """The planner inside the simulator at one (family, level): an "mpc" expert's
    ceiling there, `episodes` of its stream `seed`."""

    cell: str
    domain: str
    task: str
    planner: dict[str, Any]
    dynamics: dict[str, float]  # {} at nominal
    episodes: int
    seed: int
    parts: str


def run_plan(job: PlanJob) -> list[EvalOutput]:
    _, episodes = _planned(
        job.domain, job.task, job.planner, job.episodes, job.seed, job.dynamics, job.parts
    )
    returns = np.array([e.total for e in episodes])
    return [EvalOutput(job.cell, returns, 0)]


@dataclass(frozen=True)
class InferJob:
    method: str
    config: dict[str, Any]
    preset: str | None  # baselines
    seed: int
    demos: Demos  # the episodes drawn for this seed
    checkpoint: str | None  # FB methods
    resume: str | None = None  # baselines: snapshot file (paper presets run for hours)


@dataclass
class InferOutput:
    seconds: float
    steps: int
    z: list[float] | None = None  # FB methods
    policy: dict[str, np.ndarray] | None = None  # baselines: the state dict
    extra: dict[str, float] = field(default_factory=dict)
    # FB methods: the method's own objective on every demonstration transition at the
    # returned z, and whether the descent stopped by its convergence rule (not its cap).
    objective: float | None = None
    converged: bool | None = None
    goals: GoalSequences | None = None  # `goal`: a task vector per demonstrated step


@dataclass(frozen=True)
class CertJob:
    demos: Demos  # the episodes the policy was inferred from
    radii: tuple[float, ...]
    steps: int  # the cap on each radius's Heavy fit
    checkpoint: str | None = None  # FB methods: the model, and the policy's task vector
    z: list[float] | None = None
    policy: BaselineState | None = None  # baselines


def run_cert(job: CertJob) -> list[Certificate]:
    """A policy's certificates on its demonstrations: the TV set's exact worst case and
    the Heavy set's bound. The Heavy critic reads the FB features F(s, a, z_w) at the
    warm-start z for task vectors, and raw (s, a) pairs for baselines (as BE-DROIL)."""
    from rbfm.inference.expert_demos import warm_start

    _one_thread()
    context = _model(job.checkpoint).cfg.context if job.checkpoint is not None else 0
    t = {k: torch.as_tensor(v) for k, v in demo_inputs(job.demos, context).items()}
    obs, act = t["observation"], t["action"]
    with torch.no_grad():
        if job.checkpoint is not None:
            assert job.z is not None
            model = _model(job.checkpoint)
            pi = model.act(obs, torch.tensor(job.z).expand(len(obs), -1))
            zw = warm_start(model, job.demos).expand(len(obs), -1)
            feat = torch.cat(list(model.forward_map(obs, act, zw)), -1)
            nxt_obs, nxt_act = t["next_observation"], t["next_action"]
            nxt = torch.cat(list(model.forward_map(nxt_obs, nxt_act, zw)), -1)
        else:
            assert job.policy is not None
            pi = _baseline(*job.policy)(obs)
            feat = torch.cat([obs, act], -1)
            nxt = torch.cat([t["next_observation"], t["next_action"]], -1)
        losses = (pi - act).square().sum(-1)
    return tv_certificates(losses, job.radii) + heavy_certificates(
        losses, feat, nxt, job.radii, job.steps
    )


# (checkpoint, method) pairs this process has already run. The first inference in a
# process pays one-off costs (thread pool, allocator, first kernels: cheetah FB-IL's
# first seed of a run took 5.3 s, the next four 3.6-4.3 s), which Table 1 must not count;
# so it follows a discarded run of WARMUP_STEPS steps. Inference seeds its own
# generators, so the warm-up changes no result. Baselines train for minutes: not warmed.
_WARMED: set[tuple[str, str]] = set()
WARMUP_STEPS = 20


def _warm_up(job: InferJob, model: FBModel, run: Callable[..., Any], config_cls: type) -> None:
    key = (str(job.checkpoint), job.method)
    # A method without a step budget (ER's closed form) has no short run to warm up with.
    stepped = "steps" in {f.name for f in dataclasses.fields(config_cls)}
    if stepped and key not in _WARMED:
        run(model, job.demos, config_cls(**{**job.config, "steps": WARMUP_STEPS}), job.seed, False)
        _WARMED.add(key)


def run_infer(job: InferJob) -> InferOutput:
    """Task inference (FB methods) or baseline training."""
    from pathlib import Path

    _one_thread()
    if job.method in SEQUENCE_METHODS:
        from rbfm.inference.goal import GoalConfig, infer_sequences

        assert job.checkpoint is not None
        goals = infer_sequences(_model(job.checkpoint), job.demos, GoalConfig(**job.config))
        return InferOutput(goals.seconds, 0, goals=goals)
    if job.checkpoint is not None:
        from rbfm.inference import METHODS

        model = _model(job.checkpoint)
        run, config_cls = METHODS[job.method]
        _warm_up(job, model, run, config_cls)
        result = run(model, job.demos, config_cls(**job.config), job.seed, False)
        return InferOutput(
            result.seconds,
            result.steps,
            z=result.z.tolist(),
            extra=result.extra,
            objective=result.objective if math.isfinite(result.objective) else None,
            converged=result.converged,
        )
    from rbfm.baselines import train_baseline

    assert job.preset is not None
    start = time.perf_counter()
    res, _ = train_baseline(
        job.method,
        job.demos,
        job.preset,
        job.seed,
        job.config,
        resume=None if job.resume is None else Path(job.resume),
    )
    state = {k: v.detach().cpu().numpy() for k, v in res.policy.state_dict().items()}
    return InferOutput(time.perf_counter() - start, int(job.config["steps"]), policy=state)


@dataclass(frozen=True)
class EvalEntry:
    cell: str
    domain: str
    task: str
    family: str | None  # None: nominal
    level: float | None
    episodes: int
    eval_seed: int
    z: list[float] | None  # a task vector of the job's model, or
    policy: BaselineState | None
    noise: float = 0.0  # std of Gaussian action noise on pi_z (a noisy expert's ceiling)
    goals: GoalSequences | None = None  # or a task vector per step of the job's model


@dataclass(frozen=True)
class EvalJob:
    checkpoint: str | None  # the FB model of the entries' task vectors
    entries: list[EvalEntry]


@dataclass(frozen=True)
class EvalOutput:
    cell: str
    returns: np.ndarray
    unstable: int


def _baseline(method: str, meta: dict[str, Any], state: dict[str, np.ndarray]) -> torch.nn.Module:
    from rbfm.baselines import build_policy

    dims = int(meta["obs_dim"]), int(meta["action_dim"])
    module = build_policy(method, *dims, tuple(meta["config"]["hidden"]))
    module.load_state_dict({k: torch.as_tensor(v) for k, v in state.items()})
    return module.eval()


def run_eval(job: EvalJob) -> list[EvalOutput]:
    """Every entry's episodes in one lockstep batch (chunked by the engine above its
    limit): one actor call per step serves every task vector of the model. Outputs are
    in the order of `job.entries`."""
    from rbfm.baselines import as_policy
    from rbfm.evaluation import EnvSpec, RolloutEngine, fb_policy, noisy_policy
    from rbfm.evaluation.sweep import dispatch

    _one_thread()
    fb = [e for e in job.entries if e.z is not None and not e.noise]
    noisy = [e for e in job.entries if e.z is not None and e.noise]
    seq = [e for e in job.entries if e.goals is not None]
    base = [e for e in job.entries if e.policy is not None]
    order = fb + noisy + seq + base
    groups = []
    if fb:
        assert job.checkpoint is not None
        z = torch.tensor([e.z for e in fb]).repeat_interleave(
            torch.tensor([e.episodes for e in fb]), 0
        )
        groups.append((0, len(z), fb_policy(_model(job.checkpoint), z)))
    start = sum(e.episodes for e in fb)
    for e in noisy:
        assert job.checkpoint is not None and e.z is not None
        seeds = [(e.eval_seed, k) for k in range(e.episodes)]
        act = noisy_policy(fb_policy(_model(job.checkpoint), torch.tensor(e.z)), e.noise, seeds)
        groups.append((start, start + e.episodes, act))
        start += e.episodes
    for e in seq:  # each its own policy: its episodes keep their own step counters
        assert job.checkpoint is not None and e.goals is not None
        groups.append((start, start + e.episodes, GoalPolicy(_model(job.checkpoint), e.goals)))
        start += e.episodes
    for e in base:
        assert e.policy is not None
        groups.append((start, start + e.episodes, as_policy(_baseline(*e.policy))))
        start += e.episodes
    specs = [EnvSpec(e.domain, e.task, e.family, e.level) for e in order for _ in range(e.episodes)]
    seeds = [(e.eval_seed, k) for e in order for k in range(e.episodes)]
    with RolloutEngine(0) as engine:
        res = engine.run(specs, dispatch(groups), seeds=seeds)
    del engine
    # A job's environments (~10 MB of MuJoCo data each, up to 400) sit in reference cycles:
    # freed now, not after the next job has built its own (two jobs' worth OOM-killed a
    # 24 GB machine with 2 workers).
    gc.collect()
    out, lo = {}, 0
    for e in order:  # task vectors, noisy ones, goals, baseline policies: to the job's order
        part = slice(lo, lo + e.episodes)
        out[e.cell] = EvalOutput(e.cell, res.returns[part].copy(), int(res.unstable[part].sum()))
        lo += e.episodes
    return [out[e.cell] for e in job.entries]


@dataclass(frozen=True)
class AdaptTask:
    cell: str
    z: list[float]  # the inferred task vector the search starts from
    demos: Demos  # the demonstrations it was inferred from
    domain: str
    task: str
    family: str | None  # None: nominal
    level: float | None
    seed: int  # the inference seed: the adaptation's initial states (seed, offset + j)


@dataclass(frozen=True)
class AdaptJob:
    checkpoint: str
    config: dict[str, Any]  # an `AdaptConfig`'s fields, the same for every task
    tasks: list[AdaptTask]


@dataclass(frozen=True)
class AdaptOutput:
    cell: str
    candidates: list[list[float]]
    distances: list[float]
    implied: list[float]
    returns: list[float]
    best: list[int]
    unstable: int
    seconds: float


def run_adapt(job: AdaptJob) -> list[AdaptOutput]:
    """Every task's adaptation, their episodes run together round by round (a result is
    what the task alone gives: `adapt_many`). Outputs in the order of `job.tasks`."""
    from rbfm.evaluation import EnvSpec, RolloutEngine
    from rbfm.inference.adapt import AdaptConfig, AdaptProblem, adapt_many
    from rbfm.inference.expert_demos import demo_embedding

    _one_thread()
    model = _model(job.checkpoint)
    problems = [
        AdaptProblem(
            torch.tensor(t.z),
            demo_embedding(model, t.demos),
            EnvSpec(t.domain, t.task, t.family, t.level),
            t.seed,
        )
        for t in job.tasks
    ]
    with RolloutEngine(0) as engine:
        # A stage's config names no `keep`: the search's best, as every stage ran.
        cfg = AdaptConfig(**({"keep": "best"} | job.config))
        results = adapt_many(model, problems, cfg, engine)
    del engine
    gc.collect()  # as run_eval: free the environments before the next job builds its own
    return [
        AdaptOutput(
            t.cell,
            [c.tolist() for c in r.candidates],
            r.distances,
            r.implied,
            r.returns,
            r.kept,  # the best after each candidate: stages keep it ("best")
            r.unstable,
            r.seconds,
        )
        for t, r in zip(job.tasks, results, strict=True)
    ]
