"""The rollout engine: many episodes in lockstep, one batched policy call per step.

Environments live in worker processes (each steps its share of the episodes
while the others step theirs); the policy runs once per control step in the
calling process on the observations of every running episode. Unstable physics
(MuJoCo's divergence warnings such as BADQACC raise dm_control's PhysicsError,
or a non-finite observation) ends that episode, which is recorded as unstable,
and the rest of the run goes on.
"""

from __future__ import annotations

import functools
import multiprocessing as mp
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import mujoco
import numpy as np
from dm_control.rl.control import PhysicsError
from tqdm import tqdm

from rbfm.checks import in_range
from rbfm.envs import RbfmEnv, check_pair, get_domain, make_env
from rbfm.envs.env import PhysicsStep

# Maps the observations of the running episodes (n, obs_dim) and their indices in the
# batch (n,) to actions (n, action_dim); the indices let one call serve episodes that
# run different task vectors. A policy with a memory of the episode (a context model's,
# `rbfm.evaluation.fb_policy.ContextPolicy`) also has `begin(n)`, called before a batch
# of n new episodes, and `executed(obs, idx, actions)`, called with the actions the
# episodes then executed; wrappers (noise, dispatch) pass both on.
Policy = Callable[[np.ndarray, np.ndarray], np.ndarray]


def begin(policy: Policy, n: int) -> None:
    """Tells a policy with a memory that n new episodes start."""
    hook = getattr(policy, "begin", None)
    if hook is not None:
        hook(n)


def executed(policy: Policy, obs: np.ndarray, idx: np.ndarray, actions: np.ndarray) -> None:
    """Tells a policy with a memory what its episodes `idx` did at `obs`."""
    hook = getattr(policy, "executed", None)
    if hook is not None:
        hook(obs, idx, actions)


class Wrapper:
    """A policy around another (`self.policy`) that passes `begin` and `executed` on:
    subclasses change the actions or the indices, never the memory's bookkeeping."""

    policy: Policy

    def begin(self, n: int) -> None:
        begin(self.policy, n)

    def executed(self, obs: np.ndarray, idx: np.ndarray, actions: np.ndarray) -> None:
        executed(self.policy, obs, idx, actions)


class Shifted(Wrapper):
    """A policy seen through an offset of its episode indices (a chunk of a batch)."""

    def __init__(self, policy: Policy, offset: int) -> None:
        self.policy, self.offset = policy, offset

    def __call__(self, obs: np.ndarray, idx: np.ndarray) -> np.ndarray:
        return self.policy(obs, idx + self.offset)

    def executed(self, obs: np.ndarray, idx: np.ndarray, actions: np.ndarray) -> None:
        executed(self.policy, obs, idx + self.offset, actions)


@dataclass(frozen=True)
class EnvSpec:
    domain: str
    task: str
    perturbation: str | None = None
    level: float | None = None

    def checked(self) -> EnvSpec:
        """This spec, refused unless its family and level go together and the level lies
        in the family's range: before any episode is paid for."""
        check_pair(self.domain, self.perturbation, self.level)
        return self


@dataclass(frozen=True)
class RolloutResult:
    returns: np.ndarray  # per episode
    lengths: np.ndarray
    unstable: np.ndarray  # bool: ended early by a physics failure
    seconds: float
    # With record=True, per episode: observation and physics (T+1 rows, row 0 the
    # reset, as in ExORL), action and reward (T rows).
    trajectories: list[dict[str, np.ndarray]] | None = None

    @property
    def env_steps(self) -> int:
        return int(self.lengths.sum())


@dataclass
class _Dynamics:
    """One (domain, perturbation, level): a template environment whose dm_control reset
    samples every initial state and whose readers read every episode, its MuJoCo model
    (shared by every episode run under it, read-only while stepping), and the MjData of
    finished episodes, kept for reuse."""

    env: RbfmEnv
    spare: list[PhysicsStep] = field(default_factory=list)  # each steps its own MjData


class _Shard:
    """The episodes one worker runs, kept across batches (and jobs) in the process.

    An episode is a bare MjData on its dynamics' shared model: the template env resets
    with the episode's seed, its integration state is copied over and `mj_forward`
    completes it, as dm_control's reset ends. Building a dm_control environment per
    episode (copying model, data and named indexers, ~40 ms) cost more than a whole
    cheetah episode; a fresh MjData costs ~1 ms and a reused one nothing. Stepping is
    `PhysicsStep`. Episodes equal those of `RbfmEnv.step` bitwise (tested).
    """

    def __init__(self, max_dynamics: int = 24) -> None:
        # A template holds a model (~12 MB, textures included) and its data (~14 MB):
        # the least recently used are dropped beyond `max_dynamics`.
        self.max_dynamics = max_dynamics
        self._dynamics: dict[tuple[str, str | None, float | None], _Dynamics] = {}
        self.active: list[tuple[_Dynamics, PhysicsStep]] = []
        self.steps = np.zeros(0, np.int64)

    def _get(self, spec: EnvSpec) -> _Dynamics:
        key = (spec.domain, spec.perturbation, spec.level)
        dyn = self._dynamics.pop(key, None)
        if dyn is None:
            task = get_domain(spec.domain).tasks[0]  # rewards come from features, per task
            dyn = _Dynamics(make_env(spec.domain, task, spec.perturbation, spec.level))
        self._dynamics[key] = dyn  # most recently used last
        return dyn

    def reset(
        self, episodes: Sequence[tuple[EnvSpec, tuple[int, int]]], record: bool = False
    ) -> tuple[np.ndarray, np.ndarray | None]:
        self.record = record
        for dyn, data in self.active:
            dyn.spare.append(data)
        needed = {(s.domain, s.perturbation, s.level) for s, _ in episodes}
        missing = len(needed - self._dynamics.keys())
        for key in [k for k in self._dynamics if k not in needed]:  # least recent first
            if len(self._dynamics) + missing <= self.max_dynamics:
                break
            del self._dynamics[key]
        domain = get_domain(episodes[0][0].domain)
        if any(s.domain != domain.name for s, _ in episodes):
            raise ValueError("one batch runs one domain (observations share one shape)")
        state = mujoco.mjtState.mjSTATE_INTEGRATION
        obs = np.empty((len(episodes), domain.obs_dim), np.float32)
        self.active = []
        for i, (spec, seed) in enumerate(episodes):
            dyn = self._get(spec)
            env, model = dyn.env, dyn.env.physics.model.ptr
            env.reseed(np.random.SeedSequence(seed))
            env.reset()
            if dyn.spare:
                step = dyn.spare.pop()
            else:
                step = PhysicsStep(model, mujoco.MjData(model), env.n_sub_steps)
            data = step.data
            buf = np.empty(mujoco.mj_stateSize(model, state))
            mujoco.mj_getState(model, env.physics.data.ptr, buf, state)
            mujoco.mj_resetData(model, data)
            mujoco.mj_setState(model, data, buf, state)
            mujoco.mj_forward(model, data)
            obs[i] = env.observation(data)
            self.active.append((dyn, step))
        self.steps = np.zeros(len(episodes), np.int64)
        self.limits = np.array([dyn.env.step_limit for dyn, _ in self.active])
        self.alive = np.ones(len(episodes), bool)
        # Rewards are computed per task over all its episodes at once, from features.
        groups: dict[str, list[int]] = {}
        for i, (spec, _) in enumerate(episodes):
            groups.setdefault(spec.task, []).append(i)
        self.groups = [(domain.reward_fn(t), np.array(ix)) for t, ix in groups.items()]
        self.domain = domain
        return obs, self._physics()

    def _physics(self) -> np.ndarray | None:
        """Each episode's physics.get_state(): qpos, qvel, act."""
        if not self.record:
            return None
        return np.stack(
            [np.concatenate((s.data.qpos, s.data.qvel, s.data.act)) for _, s in self.active]
        )

    def step(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """Steps the live episodes: (obs, reward, done, unstable, physics or None)."""
        n = len(self.active)
        obs = np.zeros((n, self.domain.obs_dim), np.float32)
        features = np.zeros((n, len(self.domain.feature_names)))
        reward, unstable = np.zeros(n), np.zeros(n, bool)
        for i in np.flatnonzero(self.alive):
            dyn, step = self.active[i]
            try:
                step(actions[i])
            except PhysicsError:
                unstable[i] = True
                continue
            obs[i], features[i] = dyn.env.observation(step.data), dyn.env.features(step.data)
        self.steps[self.alive] += 1
        for reward_fn, ix in self.groups:
            reward[ix] = reward_fn(self.domain.features(features[ix]))
        reward[unstable | ~self.alive] = 0.0
        # A diverged state can also surface as non-finite numbers without a warning.
        bad = self.alive & ~(np.isfinite(obs).all(1) & np.isfinite(reward))
        unstable |= bad
        done = self.alive & (unstable | (self.steps >= self.limits))
        self.alive &= ~done
        return obs, reward, done, unstable, self._physics()


def _trajectories(
    history: list[tuple[np.ndarray, ...]], lengths: np.ndarray
) -> list[dict[str, np.ndarray]]:
    obs = np.stack([h[0] for h in history], 1)
    physics = np.stack([h[1] for h in history], 1)
    actions = np.stack([h[2] for h in history[1:]], 1)
    rewards = np.stack([h[3] for h in history[1:]], 1)
    return [
        {
            "observation": obs[i, : t + 1],
            "physics": physics[i, : t + 1],
            "action": actions[i, :t],
            "reward": rewards[i, :t],
        }
        for i, t in enumerate(lengths)
    ]


@functools.cache
def _local_shard() -> _Shard:
    """This process's shard: its templates and spare MjData serve every later run here."""
    return _Shard()


def _worker(conn: Connection) -> None:
    import torch
    from absl import logging as absl_logging

    # The pool's parallelism is its processes: torch's default (a thread per core) in
    # every worker would put workers x cores threads on the cores.
    torch.set_num_threads(1)

    # MuJoCo's instability warnings are recorded in the result, not logged per step.
    absl_logging.set_verbosity(absl_logging.ERROR)
    shard = _Shard()
    while True:
        cmd, payload = conn.recv()
        if cmd == "close":
            return
        try:
            conn.send(("ok", getattr(shard, cmd)(*payload)))
        except Exception as e:
            conn.send(("error", f"{type(e).__name__}: {e}"))


class RolloutEngine:
    """Runs batches of episodes over `workers` processes (0: in this process).

    Use as a context manager, or call close(); workers persist between runs so
    repeated evaluations do not pay process start-up and model loading again.
    """

    def __init__(self, workers: int = 2, max_envs: int = 400) -> None:
        in_range("RolloutEngine", "workers", workers, 0, integer=True)
        # A cheetah environment holds ~13 MB (MuJoCo's arena): 400 is ~5 GB.
        self.workers, self.max_envs = workers, max_envs
        self._conns: list[Connection] = []
        self._procs: list[Any] = []
        self._local = _local_shard() if workers == 0 else None
        if workers:
            ctx = mp.get_context("forkserver")
            ctx.set_forkserver_preload(["rbfm.evaluation.rollout"])
            for _ in range(workers):
                parent, child = ctx.Pipe()
                proc = ctx.Process(target=_worker, args=(child,), daemon=True)
                proc.start()
                self._conns.append(parent)
                self._procs.append(proc)

    def __enter__(self) -> RolloutEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for conn in self._conns:
            conn.send(("close", ()))
        for proc in self._procs:
            proc.join(timeout=5)
        self._conns, self._procs = [], []

    def _call(self, cmd: str, payloads: list[tuple[Any, ...]]) -> list[Any]:
        if self._local is not None:
            return [getattr(self._local, cmd)(*payloads[0])]
        conns = self._conns[: len(payloads)]  # fewer shards than workers: the rest wait
        for conn, payload in zip(conns, payloads, strict=True):
            conn.send((cmd, payload))
        results = []
        for conn in conns:
            status, value = conn.recv()
            if status == "error":
                raise RuntimeError(f"rollout worker failed: {value}")
            results.append(value)
        return results

    def run(
        self,
        spec: EnvSpec | Sequence[EnvSpec],
        policy: Policy,
        episodes: int | None = None,
        seed: int = 0,
        record: bool = False,
        seeds: Sequence[tuple[int, int]] | None = None,
        progress: str | None = None,
    ) -> RolloutResult:
        """Runs `episodes` episodes of `spec`, or one episode per entry of a list of specs.

        The k-th episode of each spec starts from the initial state of seed (seed, k),
        whatever the workers and whatever else shares the batch. `progress` names a
        progress bar over the batch's control steps (none by default). Batches larger
        than `max_envs` run in consecutive chunks (same results, bounded memory).
        """
        start = time.perf_counter()
        specs = [spec] * (episodes or 0) if isinstance(spec, EnvSpec) else list(spec)
        if not specs:
            raise ValueError("no episodes to run")
        count: dict[EnvSpec, int] = {}
        plan = []
        for s in specs:
            count[s] = count.get(s, 0) + 1
            plan.append((s, (seed, count[s] - 1)))
        if seeds is not None:  # explicit initial-state seeds, e.g. the same for several agents
            if len(seeds) != len(plan):
                raise ValueError(f"{len(seeds)} seeds for {len(plan)} episodes")
            plan = [(s, (int(k[0]), int(k[1]))) for (s, _), k in zip(plan, seeds, strict=True)]
        starts = range(0, len(plan), self.max_envs)
        begin(policy, len(plan))
        parts = []
        for i, lo in enumerate(starts):
            label = progress
            if progress is not None and len(starts) > 1:
                label = f"{progress} {i + 1}/{len(starts)}"
            chunk = plan[lo : lo + self.max_envs]
            chunk_policy = policy if lo == 0 else Shifted(policy, lo)
            parts.append(self._run_batch(chunk, chunk_policy, record, label))
        returns, lengths, unstable = (np.concatenate([p[k] for p in parts]) for k in range(3))
        trajectories = [t for p in parts for t in p[3]] if record else None
        seconds = time.perf_counter() - start
        return RolloutResult(returns, lengths, unstable, seconds, trajectories)

    def _run_batch(
        self,
        plan: list[tuple[EnvSpec, tuple[int, int]]],
        policy: Policy,
        record: bool,
        progress: str | None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, np.ndarray]]]:
        """One lockstep batch: (returns, lengths, unstable, trajectories if recorded)."""
        n = len(plan)
        # Fewer episodes than workers: one episode per worker, the others idle (an
        # episode's return does not depend on its shard).
        shards = np.array_split(np.arange(n), max(min(self.workers, n), 1))
        first = self._call("reset", [([plan[i] for i in s], record) for s in shards])
        obs = np.concatenate([o for o, _ in first])
        history: list[tuple[np.ndarray, ...]] = []
        if record:
            history.append((obs, np.concatenate([p for _, p in first])))
        returns, lengths = np.zeros(n), np.zeros(n, np.int64)
        unstable, alive = np.zeros(n, bool), np.ones(n, bool)
        horizon = max(get_domain(s.domain).episode_length for s, _ in plan)
        bar = tqdm(total=horizon, desc=progress, unit="step", disable=progress is None, leave=False)
        while alive.any():
            idx = np.flatnonzero(alive)
            act = policy(obs[idx], idx)
            executed(policy, obs[idx], idx, act)
            actions = np.zeros((n, act.shape[-1]), np.float32)
            actions[idx] = act
            results = self._call("step", [(actions[s],) for s in shards])
            new_obs, reward, done, bad = (np.concatenate([r[k] for r in results]) for k in range(4))
            returns[alive] += reward[alive]
            lengths[alive] += ~bad[alive]
            unstable |= bad
            obs = np.where(alive[:, None], new_obs, obs)
            alive &= ~done
            bar.update(1)
            if record:
                physics = np.concatenate([r[4] for r in results])
                history.append((obs, physics, actions, reward))
        bar.close()
        return returns, lengths, unstable, _trajectories(history, lengths) if record else []
