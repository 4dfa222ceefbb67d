"""The rollout engine: many episodes in lockstep, one batched policy call per step.

Environments live in worker processes (each steps its share of the episodes
while the others step theirs); the policy runs once per control step in the
calling process on the observations of every running episode. Unstable physics
(MuJoCo's divergence warnings such as BADQACC raise dm_control's PhysicsError,
or a non-finite observation) ends that episode, which is recorded as unstable,
and the rest of the run goes on.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
from dm_control.rl.control import PhysicsError
from tqdm import tqdm

from rbfm.envs import RbfmEnv, get_domain, make_env

# Maps the observations of the running episodes (n, obs_dim) and their indices in the
# batch (n,) to actions (n, action_dim); the indices let one call serve episodes that
# run different task vectors.
Policy = Callable[[np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class EnvSpec:
    domain: str
    task: str
    perturbation: str | None = None
    level: float | None = None


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


class _Shard:
    """The episodes one worker runs: envs kept between calls, reseeded per episode."""

    def __init__(self) -> None:
        self._envs: dict[EnvSpec, list[RbfmEnv]] = {}

    def reset(
        self, episodes: Sequence[tuple[EnvSpec, tuple[int, int]]], record: bool = False
    ) -> tuple[np.ndarray, np.ndarray | None]:
        self.record = record
        # Environments are kept for the specs of this batch only: memory stays bounded
        # by one batch across the levels of a sweep.
        needed = {spec for spec, _ in episodes}
        self._envs = {s: pool for s, pool in self._envs.items() if s in needed}
        used: dict[EnvSpec, int] = {}
        self.active = []
        for spec, seed in episodes:
            pool = self._envs.setdefault(spec, [])
            k = used[spec] = used.get(spec, 0) + 1
            if len(pool) < k:
                pool.append(make_env(spec.domain, spec.task, spec.perturbation, spec.level))
            env = pool[k - 1]
            env.reseed(np.random.SeedSequence(seed))
            self.active.append(env)
        self.alive = np.ones(len(episodes), bool)
        obs = np.stack([env.reset().observation for env in self.active])
        return obs, self._physics()

    def _physics(self) -> np.ndarray | None:
        if not self.record:
            return None
        return np.stack([env.physics.get_state() for env in self.active])

    def step(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """Steps the live episodes: (obs, reward, done, unstable, physics or None)."""
        n = len(self.active)
        obs = np.zeros((n, self.active[0].spec.obs_dim), np.float32)
        reward, done, unstable = np.zeros(n), np.zeros(n, bool), np.zeros(n, bool)
        for i in np.flatnonzero(self.alive):
            try:
                ts = self.active[i].step(actions[i])
            except PhysicsError:
                done[i] = unstable[i] = True
                continue
            obs[i], reward[i], done[i] = ts.observation, ts.reward, ts.last()
        # A diverged state can also surface as non-finite numbers without a warning.
        bad = self.alive & ~(np.isfinite(obs).all(1) & np.isfinite(reward))
        done |= bad
        unstable |= bad
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


def _worker(conn: Connection) -> None:
    from absl import logging as absl_logging

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
        # A cheetah environment holds ~13 MB (MuJoCo's arena): 400 is ~5 GB.
        self.workers, self.max_envs = workers, max_envs
        self._conns: list[Connection] = []
        self._procs: list[Any] = []
        self._local = _Shard() if workers == 0 else None
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
        for conn, payload in zip(self._conns, payloads, strict=True):
            conn.send((cmd, payload))
        results = []
        for conn in self._conns:
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
        parts = []
        for i, lo in enumerate(starts):
            label = progress
            if progress is not None and len(starts) > 1:
                label = f"{progress} {i + 1}/{len(starts)}"
            chunk = plan[lo : lo + self.max_envs]
            parts.append(self._run_batch(chunk, _shifted(policy, lo), record, label))
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
        shards = np.array_split(np.arange(n), max(self.workers, 1))
        if any(len(s) == 0 for s in shards):
            raise ValueError(f"{n} episodes cannot be split over {self.workers} workers")
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


def _shifted(policy: Policy, offset: int) -> Policy:
    """The policy of a chunk: its episode indices are offset within the whole batch."""
    if offset == 0:
        return policy
    return lambda obs, idx: policy(obs, idx + offset)
