"""Resumable reward-free data collection into ExORL episodes.

Determinism is what makes resuming exact: episode k's initial state is drawn from
a seed derived from (seed, k), the random agent's actions and APS's skills
likewise, and a learning agent's whole state (weights, optimisers, normalisers,
random generators) is checkpointed after every episode. A run killed at any moment and started again
with the same arguments drops its unfinished episode, restores the last
checkpoint and produces the same episodes an uninterrupted run would have.

Crash-safety order for a stateful agent: write episode k (temporary file, then
rename), then the checkpoint saying "next is k+1". An episode file newer than the
checkpoint is therefore an orphan from a kill between the two writes: it is
removed on resume and regenerated identically.

Dynamics-diverse collections (`CollectConfig.dynamics`) simulate each episode under
physics drawn from a `DynamicsDistribution` by (seed, index): every episode file stores
its levels, and collect.json the distribution and every episode's draw.
"""

from __future__ import annotations

import json
import math
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from rbfm.atomic import TMP_SUFFIX, atomic_write
from rbfm.checks import known_fields
from rbfm.data.episode import COLLECTION_FILE, Agent, run_episode
from rbfm.data.exorl import episode_files, parse_name, read_episode, write_episode
from rbfm.device import pick_device
from rbfm.envs import families, get_domain, make_env
from rbfm.envs.dynamics import DynamicsDistribution, dynamics_vector
from rbfm.errors import ConfigError, unknown
from rbfm.exploration.aps import APSAgent, aps_config
from rbfm.exploration.ddpg import DDPGAgent
from rbfm.exploration.proto import ProtoAgent, proto_config
from rbfm.exploration.replay import EpisodeReplay
from rbfm.exploration.rnd import RNDAgent, rnd_config
from rbfm.run_identity import bind_identity
from rbfm.threads import torch_threads

AGENTS = ("random", "rnd", "aps", "proto")
STATE_FILE = "collect_state.pt"


class RandomAgent:
    """Uniform actions in [-1, 1]; episode k's actions depend only on (seed, k)."""

    name = "random"

    def __init__(self, action_dim: int, length: int, seed: int) -> None:
        self.action_dim, self.length, self.seed = action_dim, length, seed
        self._actions = np.zeros((0, action_dim), np.float32)
        self._t = 0

    def begin_episode(self, index: int) -> None:
        rng = np.random.default_rng([self.seed, index, 1])
        self._actions = rng.uniform(-1, 1, (self.length, self.action_dim)).astype(np.float32)
        self._t = 0

    def act(self, obs: np.ndarray, step: int) -> np.ndarray:
        self._t += 1
        return np.asarray(self._actions[self._t - 1])


class _Explorer:
    """A learning agent behind the collector's interface: it learns from the episodes
    written so far."""

    def __init__(self, agent: DDPGAgent, replay: EpisodeReplay) -> None:
        self.agent, self.replay = agent, replay
        self.name = agent.name

    def begin_episode(self, index: int) -> None:
        self.agent.begin_episode(index)

    def act(self, obs: np.ndarray, step: int) -> np.ndarray:
        cfg = self.agent.cfg
        if (
            step >= cfg.num_seed_frames
            and step % cfg.update_every_steps == 0
            and self.replay.num_episodes > 0
        ):
            self.agent.update(self.replay)
        return self.agent.act(obs, step)

    def add(self, index: int, episode: dict[str, np.ndarray]) -> None:
        self.replay.add(episode, self.agent.skills(index))


def agent_config(agent: str, preset: str, overrides: tuple[tuple[str, Any], ...] = ()) -> Any:
    """The exploration agent's config: its preset with `overrides` (field, value) applied.
    Fields the agent's config lacks are rejected, naming the valid ones."""
    presets = {"rnd": rnd_config, "proto": proto_config, "aps": aps_config}
    base = presets[agent](preset)
    known_fields(type(base), dict(overrides), agent)
    return replace(base, **dict(overrides))


def _learner(
    cfg: CollectConfig, acfg: Any, obs_dim: int, action_dim: int, length: int
) -> DDPGAgent:
    if cfg.agent == "rnd":
        return RNDAgent(obs_dim, action_dim, acfg, cfg.seed, cfg.device)
    if cfg.agent == "proto":
        return ProtoAgent(obs_dim, action_dim, acfg, cfg.seed, cfg.device)
    return APSAgent(obs_dim, action_dim, acfg, cfg.seed, length, cfg.device)


@dataclass(frozen=True)
class CollectConfig:
    domain: str
    agent: str
    transitions: int
    out: str
    preset: str = "cpu"
    seed: int = 0
    task: str | None = None  # whose reward is stored; default: the domain's first task
    device: str | None = None
    # The cpu-preset RND networks are small: one intra-op thread runs them fastest
    # (measured: ~510 vs ~460 transitions/s with two on cheetah).
    torch_threads: int | None = 1
    # (field, value) pairs replacing the agent preset's (`--set`), e.g. more updates per
    # environment step than the cpu preset's one per 8 (docs/models.md).
    overrides: tuple[tuple[str, Any], ...] = ()
    # Each episode under physics drawn from this distribution; None: nominal physics.
    dynamics: DynamicsDistribution | None = None

    def identity(self) -> dict[str, Any]:
        """What must match for a rerun to continue the same collection."""
        spec = get_domain(self.domain)
        task = self.task or spec.tasks[0]
        preset = self.preset if self.agent != "random" else None
        return {
            "domain": self.domain,
            "agent": self.agent,
            "task": task,
            "preset": preset,
            "seed": self.seed,
            "overrides": dict(self.overrides),
            "dynamics": None if self.dynamics is None else self.dynamics.record(self.domain),
        }


def _upgrade(stored: dict[str, Any], identity: dict[str, Any]) -> dict[str, Any]:
    """Collections made before `overrides` or `dynamics` existed had none."""
    return {"overrides": {}, "dynamics": None, **stored}


def _record_draws(cfg: CollectConfig, path: Path, num_episodes: int) -> None:
    """Every episode's dynamics, beside the identity in collect.json."""
    assert cfg.dynamics is not None
    record = json.loads(path.read_text())
    record["episode_dynamics"] = {
        "families": list(families(cfg.domain)),
        "levels": [
            dynamics_vector(cfg.domain, cfg.dynamics.draw(cfg.domain, cfg.seed, k)).tolist()
            for k in range(num_episodes)
        ],
    }
    atomic_write(path, lambda tmp: tmp.write_text(json.dumps(record, indent=2)))


def _existing(buffer: Path) -> dict[int, Path]:
    found: dict[int, Path] = {}
    for f in episode_files(buffer):
        parsed = parse_name(f.name)
        if parsed is None:
            raise ConfigError(f"{f}: not an rbfm/ExORL episode name; this is not our buffer")
        found[parsed[0]] = f
    return found


def _save_state(path: Path, state: dict[str, Any]) -> None:
    atomic_write(path, lambda tmp: torch.save(state, tmp))


def collect(cfg: CollectConfig, progress: bool = True) -> Path:
    """Collects (or resumes collecting) `cfg.transitions` steps; returns the buffer directory.
    The explorer trains on `cfg.torch_threads` threads when set, the caller's count
    restored after."""
    n = cfg.torch_threads
    with nullcontext() if n is None or cfg.agent == "random" else torch_threads(n):
        return _collect(cfg, progress)


def _checked_agent_config(cfg: CollectConfig) -> Any:
    """The exploration agent's config (None for the random agent), validated before any
    work."""
    if cfg.agent not in AGENTS:
        raise unknown("exploration agent", cfg.agent, AGENTS)
    if cfg.transitions <= 0:
        raise ConfigError(f"transitions: {cfg.transitions} is out of range (valid: >= 1)")
    if cfg.agent != "random":
        pick_device(cfg.device)  # refused before the run's folder is made
        return agent_config(cfg.agent, cfg.preset, cfg.overrides)
    unused = {"overrides": bool(cfg.overrides), "device": cfg.device is not None}
    if given := [name for name, set_ in unused.items() if set_]:
        raise ConfigError(f"{given[0]}: the random agent has no network and no config to change")
    return None


def _restored_explorer(
    cfg: CollectConfig,
    acfg: Any,
    num_episodes: int,
    existing: dict[int, Path],
    state_path: Path,
) -> tuple[_Explorer, int, int]:
    """A learning explorer at its last checkpoint, its replay refilled from the episodes
    written up to it (later ones are deleted, to be regenerated); with the index of the
    next episode and the environment step."""
    spec = get_domain(cfg.domain)
    length = spec.episode_length
    learner = _learner(cfg, acfg, spec.obs_dim, spec.action_dim, length)
    replay = EpisodeReplay(
        max(num_episodes, len(existing)), length, spec.obs_dim, spec.action_dim, learner.cond_dim
    )
    next_index, step = 0, 0
    if state_path.exists():
        state = torch.load(state_path, weights_only=True)
        learner.load_state_dict(state["agent"])
        next_index, step = int(state["next_index"]), int(state["step"])
    for k in sorted(existing):
        if k >= next_index:
            existing.pop(k).unlink()  # written after the last checkpoint: regenerate it
    if sorted(existing) != list(range(next_index)):
        buffer = state_path.parent / "buffer"
        raise ConfigError(f"{buffer}: episodes {sorted(existing)} are not 0..{next_index - 1}")
    agent = _Explorer(learner, replay)
    for k in range(next_index):
        agent.add(k, read_episode(existing[k], spec))
    return agent, next_index, step


def _collect(cfg: CollectConfig, progress: bool) -> Path:
    acfg = _checked_agent_config(cfg)
    spec = get_domain(cfg.domain)
    task = cfg.identity()["task"]
    spec.reward_fn(task)
    algo_dir = Path(cfg.out) / cfg.domain / cfg.agent
    buffer = algo_dir / "buffer"
    buffer.mkdir(parents=True, exist_ok=True)
    bind_identity(algo_dir / COLLECTION_FILE, cfg.identity(), "collection", _upgrade)
    for tmp in buffer.glob(f".*{TMP_SUFFIX}"):
        tmp.unlink()  # half-written episodes of a killed run
    length = spec.episode_length
    num_episodes = math.ceil(cfg.transitions / length)
    if cfg.dynamics is not None:
        _record_draws(cfg, algo_dir / COLLECTION_FILE, num_episodes)
    existing = _existing(buffer)

    state_path = algo_dir / STATE_FILE
    agent: Agent
    if cfg.agent == "random":
        agent = RandomAgent(spec.action_dim, length, cfg.seed)
        todo, step = [k for k in range(num_episodes) if k not in existing], 0
    else:
        agent, next_index, step = _restored_explorer(cfg, acfg, num_episodes, existing, state_path)
        todo = list(range(next_index, num_episodes))

    env = make_env(cfg.domain, task, seed=cfg.seed)
    bar = tqdm(
        total=num_episodes * length,
        initial=(num_episodes - len(todo)) * length,
        unit="tr",
        unit_scale=True,
        desc=f"collect {cfg.domain}/{cfg.agent}",
        disable=not progress,
        smoothing=0.1,
    )
    # Stateless agents hand episodes to a writer thread (compression releases the GIL);
    # a stateful one writes before its checkpoint, in that order.
    with ThreadPoolExecutor(max_workers=1) as writer:
        pending: list[Future[Path]] = []
        for k in todo:
            if cfg.dynamics is not None:
                drawn = cfg.dynamics.draw(cfg.domain, cfg.seed, k)
                env = make_env(cfg.domain, task, seed=cfg.seed, dynamics=drawn)
            env.reseed(np.random.SeedSequence([cfg.seed, k]))
            agent.begin_episode(k)
            episode = run_episode(env, agent, step)
            if cfg.dynamics is not None:
                levels = dynamics_vector(cfg.domain, env.dynamics)
                episode["dynamics"] = np.tile(levels, (length + 1, 1))
            step += length
            if isinstance(agent, _Explorer):
                write_episode(buffer, k, episode)
                agent.add(k, episode)
                _save_state(
                    state_path,
                    {"next_index": k + 1, "step": step, "agent": agent.agent.state_dict()},
                )
            else:
                while pending and (pending[0].done() or len(pending) >= 4):
                    pending.pop(0).result()  # surfaces write errors; bounds memory
                pending.append(writer.submit(write_episode, buffer, k, episode))
            bar.update(length)
        for f in pending:
            f.result()
    bar.close()
    return buffer


def collect_info(buffer: Path) -> dict[str, Any]:
    """The settings a collection was made with (its collect.json), if any."""
    path = buffer.parent / COLLECTION_FILE
    return json.loads(path.read_text()) if path.exists() else {}
