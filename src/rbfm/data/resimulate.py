"""Episodes of `rbfm collect` regenerated from their actions.

The collector reseeds the initial-state sampler with (seed, index) before each episode's
reset and MuJoCo is deterministic, so an episode is a function of its collection's
(domain, task, seed), its index and its actions: the actions, ~1/7 of a quadruped
episode's bytes and nothing the simulator can recompute, regenerate the observations,
rewards and physics states bitwise on the same MuJoCo build and processor. On another
processor the floating point may differ in the last bits and chaos amplifies that over
1,000 steps: the regenerated episode is then still the dynamics' own response to the same
actions from the same initial state, just not the stored one, which `digests` detects.
A dynamics-diverse collection's episodes run under the physics its record lists per
episode (`episode_dynamics`), so those levels regenerate them too.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mujoco
import numpy as np

from rbfm.data.episode import COLLECTION_FILE, run_episode
from rbfm.data.exorl import DTYPES, Episode, episode_keys, validate_episode
from rbfm.envs import RbfmEnv, families, get_domain, make_env
from rbfm.envs.dynamics import dynamics_of_vector
from rbfm.errors import DatasetError

_PHYSICS = mujoco.mjtState.mjSTATE_PHYSICS  # what the collector stores per row


@dataclass(frozen=True)
class Collection:
    """What regenerates a collection's episodes besides their actions."""

    domain: str
    task: str
    seed: int
    # Per episode index, its dynamics levels (`rbfm.envs.families` order); None: nominal.
    levels: tuple[tuple[float, ...], ...] | None = None

    @classmethod
    def of_record(cls, record: Mapping[str, Any], where: Path) -> Collection:
        """From a `collect.json` record (`where` names it in errors)."""
        try:
            domain, task, seed = str(record["domain"]), str(record["task"]), int(record["seed"])
        except (KeyError, TypeError, ValueError) as e:
            raise DatasetError(f"{where}: not a collection record ({e})") from e
        if record.get("dynamics") is None:
            return cls(domain, task, seed)
        names = list(families(domain))
        unusable = DatasetError(
            f"{where}: a dynamics-diverse collection whose record does not list each "
            f"episode's levels of {', '.join(names)} (episode_dynamics)"
        )
        drawn = record.get("episode_dynamics")
        if not isinstance(drawn, Mapping) or drawn.get("families") != names:
            raise unusable
        try:
            levels = tuple(tuple(float(v) for v in row) for row in drawn["levels"])
        except (KeyError, TypeError, ValueError) as e:
            raise unusable from e
        if not all(len(row) == len(names) and np.isfinite(row).all() for row in levels):
            raise unusable
        return cls(domain, task, seed, levels)

    def env(self) -> RbfmEnv:
        return make_env(self.domain, self.task, seed=self.seed)

    def episode_env(self, index: int, nominal: RbfmEnv) -> RbfmEnv:
        """The environment episode `index` ran in: `nominal` unless the collection drew
        physics per episode, then one made under that episode's levels."""
        if self.levels is None:
            return nominal
        if not 0 <= index < len(self.levels):
            raise DatasetError(
                f"episode {index}: the collection's record lists dynamics for episodes "
                f"0-{len(self.levels) - 1} only"
            )
        dynamics = dynamics_of_vector(self.domain, np.array(self.levels[index]))
        return make_env(self.domain, self.task, seed=self.seed, dynamics=dynamics)


def collection_record(buffer: Path) -> dict[str, Any]:
    """The `collect.json` that `rbfm collect` writes beside the buffer."""
    path = buffer.parent / COLLECTION_FILE
    if not path.is_file():
        raise DatasetError(
            f"{path}: missing; regenerating episodes needs the collection's domain, task "
            "and seed, which `rbfm collect` records there"
        )
    try:
        record = json.loads(path.read_text())
    except ValueError as e:
        raise DatasetError(f"{path}: not a collection record ({e})") from e
    if not isinstance(record, dict):
        raise DatasetError(f"{path}: not a collection record (not an object)")
    return record


class _Scripted:
    """The collector's agent interface, playing back one episode's stored actions."""

    def __init__(self, actions: np.ndarray) -> None:
        self.actions, self.t = actions, 0

    def begin_episode(self, index: int) -> None:
        self.t = 0

    def act(self, obs: np.ndarray, step: int) -> np.ndarray:
        self.t += 1
        return np.asarray(self.actions[self.t])


def digests(episode: Mapping[str, np.ndarray]) -> dict[str, str]:
    """SHA-256 of each of an episode's arrays in its stored dtype: equal digests, equal
    bits. Per key, to tell a physics divergence from, say, another numpy's rounding of
    one observation feature."""
    return {
        k: hashlib.sha256(np.ascontiguousarray(episode[k], DTYPES[k]).tobytes()).hexdigest()
        for k in episode_keys(episode)
    }


def initial_physics(collection: Collection, env: RbfmEnv, index: int) -> np.ndarray:
    """Episode `index`'s reset state, as the collector drew it (`env`: the collection's
    nominal environment)."""
    env = collection.episode_env(index, env)
    env.reseed(np.random.SeedSequence([collection.seed, index]))
    env.reset()
    state = np.empty(get_domain(collection.domain).physics_dim)
    mujoco.mj_getState(env.physics.model.ptr, env.physics.data.ptr, state, _PHYSICS)
    return state


def regenerate(collection: Collection, env: RbfmEnv, index: int, actions: np.ndarray) -> Episode:
    """Episode `index` of the collection, stepped through `actions` (T+1 rows, row 0 the
    reset's zero action) exactly as the collector stepped it (`env`: the collection's
    nominal environment)."""
    spec = get_domain(collection.domain)
    if actions.shape != (spec.episode_length + 1, spec.action_dim):
        raise DatasetError(
            f"episode {index}: actions of shape {actions.shape}; {collection.domain} episodes "
            f"have ({spec.episode_length + 1}, {spec.action_dim})"
        )
    env = collection.episode_env(index, env)
    env.reseed(np.random.SeedSequence([collection.seed, index]))
    episode = run_episode(env, _Scripted(actions), 0)
    if collection.levels is not None:
        episode["dynamics"] = np.tile(collection.levels[index], (len(actions), 1))
    validate_episode(episode, spec, f"episode {index} regenerated")
    return episode
