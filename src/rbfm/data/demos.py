"""Expert demonstrations: the type and its file format.

A file holds E episodes concatenated (observation and physics with T+1 rows per
episode, action and reward with T), their lengths and returns, and a JSON
description (domain, task, checkpoint, seed). Inference methods and baselines draw a
few episodes at random per seed and use their (s, a, s', a') transitions. Generating
demonstrations by rollouts of a model is `rbfm.inference.generate_demos`.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rbfm import checks
from rbfm.atomic import atomic_write, parse_json, standard_json
from rbfm.data.exorl import is_real
from rbfm.envs import get_domain
from rbfm.envs.domains import DomainSpec
from rbfm.errors import ConfigError, DatasetError

_KEYS = ("observation", "action", "physics", "reward", "lengths", "returns")


def _episode_arrays(name: str, given: object, dtype: type = np.float64) -> list[np.ndarray]:
    """`Demos.from_arrays`' per-episode arrays as `dtype`, each refused by name where it
    is not one rectangular array of real numbers (a bool or complex one is refused as a
    file's is, not cast)."""
    where = "Demos.from_arrays"
    if isinstance(given, (str, bytes)) or not isinstance(given, (Sequence, np.ndarray)):
        raise DatasetError(
            f"{where}: {name} is {'None' if given is None else type(given).__name__}; pass a "
            "list with one array per episode (docs/demonstrations.md)"
        )
    out: list[np.ndarray] = []
    for i, x in enumerate(given):
        try:
            a = np.asarray(x)
        except ValueError:  # numpy's own message is about sequences and inhomogeneous shapes
            raise DatasetError(
                f"{where}: episode {i}'s {name} are not one rectangular array (rows of "
                "different lengths?)"
            ) from None
        if not is_real(a.dtype):
            raise DatasetError(
                f"{where}: episode {i}'s {name} hold {a.dtype} values; expected real numbers"
            )
        with np.errstate(over="ignore"):  # a value beyond float32's range: refused later
            out.append(a.astype(dtype))
    return out


def _check_episodes(
    spec: DomainSpec,
    obs: list[np.ndarray],
    acts: list[np.ndarray] | None,
    rewards: Sequence[np.ndarray] | None,
    physics: Sequence[np.ndarray] | None,
) -> np.ndarray:
    """Each episode's arrays against each other and the domain, so that the common slips
    are named per episode (a total that matches can hide two that do not); returns the
    episodes' lengths T (with no actions, each episode's observations less one)."""
    where = "Demos.from_arrays"
    if acts is not None and len(obs) != len(acts):
        raise DatasetError(
            f"{where}: {len(obs)} observation sequences for {len(acts)} action sequences"
        )
    for name, given in (("reward", rewards), ("physics", physics)):
        if given is not None and len(given) != len(obs):
            raise DatasetError(f"{where}: {len(given)} {name} sequences for {len(obs)} episodes")
    lengths = []
    for i, o in enumerate(obs):
        if o.ndim != 2 or o.shape[1] != spec.obs_dim:
            raise DatasetError(
                f"{where}: episode {i}'s observations have shape {o.shape}; {spec.name}'s "
                f"are (T+1, {spec.obs_dim}) in the layout of docs/demonstrations.md"
            )
        steps = len(o) - 1
        if acts is None and steps < 2:  # else its length would be counted from nothing
            raise DatasetError(
                f"{where}: episode {i} has {len(o)} observation(s); an episode needs at least "
                "3 (two steps, one transition)"
            )
        if acts is not None:
            a = acts[i]
            if a.ndim != 2 or a.shape[1] != spec.action_dim:
                raise DatasetError(
                    f"{where}: episode {i}'s actions have shape {a.shape}; {spec.name}'s are "
                    f"(T, {spec.action_dim})"
                )
            if len(o) != len(a) + 1:
                raise DatasetError(
                    f"{where}: episode {i} has {len(o)} observations for {len(a)} actions; "
                    "each episode needs T+1 (the reset's first, then one after each action)"
                )
        if rewards is not None and np.shape(rewards[i]) != (steps,):
            raise DatasetError(
                f"{where}: episode {i}'s rewards have shape {np.shape(rewards[i])}, expected "
                f"({steps},): one per step"
            )
        if physics is not None and len(physics[i]) != len(o):
            raise DatasetError(
                f"{where}: episode {i} has {len(physics[i])} physics states for {len(o)} "
                "observations"
            )
        lengths.append(steps)
    return np.array(lengths, np.int64)


@dataclass(frozen=True)
class Demos:
    domain: str
    task: str
    observation: np.ndarray  # (sum(T+1), obs_dim)
    action: np.ndarray  # (sum(T), action_dim); (0, action_dim): states only, see has_actions
    physics: np.ndarray  # (sum(T+1), physics_dim)
    reward: np.ndarray  # (sum(T),)
    lengths: np.ndarray  # (E,) steps per episode
    returns: np.ndarray  # (E,)
    meta: dict[str, Any]

    @classmethod
    def from_arrays(
        cls,
        domain: str,
        task: str,
        observations: Sequence[np.ndarray],
        actions: Sequence[np.ndarray] | None = None,
        rewards: Sequence[np.ndarray] | None = None,
        physics: Sequence[np.ndarray] | None = None,
    ) -> Demos:
        """Your own demonstrations: per episode, its T+1 observations (the first the
        reset's) and the T actions taken, in the domain's layout (`rbfm envs`);
        optionally its T rewards and T+1 physics states. Checked as a demonstrations file
        is (shapes, finite values, actions in [-1, 1]); no reward means zeros. With no
        actions the demonstrations are states only (motion capture, another body's
        controller): `er`, `fm` and `goal` read those; the methods that clone actions
        refuse them (`has_actions`)."""
        for name, given in (("observations", observations), ("actions", actions)):
            if isinstance(given, np.ndarray) and given.ndim == 2:
                raise DatasetError(
                    f"Demos.from_arrays: {name} is one 2-d array; pass a list with one array "
                    f"per episode (one episode: [{name}])"
                )
        obs = _episode_arrays("observations", observations, np.float32)
        acts = None if actions is None else _episode_arrays("actions", actions, np.float32)
        spec = get_domain(domain)
        given_rewards = None if rewards is None else _episode_arrays("rewards", rewards)
        given_physics = None if physics is None else _episode_arrays("physics", physics)
        lengths = _check_episodes(spec, obs, acts, given_rewards, given_physics)
        reward = (
            np.concatenate([np.ravel(r) for r in given_rewards])
            if given_rewards is not None
            else np.zeros(int(lengths.sum()))
        )
        arrays = {
            "observation": np.concatenate(obs) if obs else np.zeros((0, 0), np.float32),
            "action": (
                np.concatenate(acts) if acts else np.zeros((0, spec.action_dim), np.float32)
            ),
            "physics": (
                np.concatenate(given_physics)
                if given_physics is not None
                else np.zeros((0, spec.physics_dim))
            ),
            "reward": reward,
            "lengths": lengths,
        }
        steps = np.concatenate([[0], np.cumsum(lengths)])
        arrays["returns"] = np.array([reward[a:b].sum() for a, b in itertools.pairwise(steps)])
        meta = {"source": "arrays", "rewards": rewards is not None}
        return _validated(domain, task, arrays, meta, "Demos.from_arrays")

    @property
    def num_episodes(self) -> int:
        return len(self.lengths)

    @property
    def has_actions(self) -> bool:
        """False for states-only demonstrations (an action array of no rows)."""
        return len(self.action) > 0

    def require_actions(self, reader: str) -> None:
        """Refuses states-only demonstrations for `reader`, which clones their actions."""
        if not self.has_actions:
            source = self.meta.get("path", f"these {self.domain}/{self.task} demonstrations")
            raise DatasetError(
                f"{reader} reads the actions taken, and {source} hold states only (no "
                "actions); er, fm and goal read states alone"
            )

    def _offsets(self) -> tuple[np.ndarray, np.ndarray]:
        steps = np.concatenate([[0], np.cumsum(self.lengths)])
        rows = steps + np.arange(len(steps))  # T+1 rows per episode
        return rows, steps

    def episodes(self, index: np.ndarray) -> Demos:
        """The demos restricted to some episodes (indices into 0..num_episodes-1)."""
        index = np.asarray(index)
        if (
            index.ndim != 1
            or not index.size
            or not np.issubdtype(index.dtype, np.integer)
            or not ((index >= 0) & (index < self.num_episodes)).all()
        ):
            raise ConfigError(
                f"Demos.episodes: {index.tolist()!r} names no episodes (valid: a non-empty 1-d "
                f"array of integers in 0..{self.num_episodes - 1})"
            )
        rows, steps = self._offsets()
        row_idx = np.concatenate([np.arange(rows[i], rows[i + 1]) for i in index])
        step_idx = np.concatenate([np.arange(steps[i], steps[i + 1]) for i in index])
        return Demos(
            self.domain,
            self.task,
            self.observation[row_idx],
            self.action[step_idx] if self.has_actions else self.action,
            self.physics[row_idx] if len(self.physics) else self.physics,
            self.reward[step_idx],
            self.lengths[index],
            self.returns[index],
            self.meta,
        )

    def sample(self, n: int, seed: int) -> Demos:
        """n episodes drawn at random (without replacement) from seed."""
        seed = int(seed) if isinstance(seed, np.integer) else seed
        n = int(n) if isinstance(n, np.integer) else n
        checks.seed("Demos.sample", seed)
        if isinstance(n, bool) or not isinstance(n, int) or not 0 < n <= self.num_episodes:
            source = self.meta.get("path", f"{self.domain}/{self.task} demonstrations")
            raise ConfigError(
                f"cannot draw {n} demonstrations from the {self.num_episodes} episodes of "
                f"{source} (valid: an integer in 1..{self.num_episodes})"
            )
        return self.episodes(
            np.random.default_rng(seed).choice(self.num_episodes, n, replace=False)
        )

    def transitions(self) -> dict[str, np.ndarray]:
        """(s, a, s', a') for every step that has a next action: T-1 per episode."""
        self.require_actions("a method that clones actions (fbil, rbfm-light, ...)")
        rows, steps = self._offsets()
        out: dict[str, list[np.ndarray]] = {
            k: [] for k in ("observation", "action", "next_observation", "next_action")
        }
        for i, t in enumerate(self.lengths):
            obs = self.observation[rows[i] : rows[i + 1]]
            act = self.action[steps[i] : steps[i + 1]]
            out["observation"].append(obs[: t - 1])
            out["action"].append(act[: t - 1])
            out["next_observation"].append(obs[1:t])
            out["next_action"].append(act[1:t])
        return {k: np.concatenate(v) for k, v in out.items()}

    def observations(self) -> list[np.ndarray]:
        """s_0..s_T of each episode."""
        rows, _ = self._offsets()
        return [self.observation[rows[i] : rows[i + 1]] for i in range(self.num_episodes)]

    def next_states(self) -> list[np.ndarray]:
        """s_{t+1}, t = 0..T-1, of each episode (for the warm start)."""
        return [obs[1:] for obs in self.observations()]


def content_sha256(demos: Demos) -> str:
    """SHA-256 of the episodes' arrays (each name, then its bytes, in name order), not of
    the description: what an inference reads. Rollouts regenerated on a CPU with other
    vector units can differ in their last bits, and this names the difference."""
    h = hashlib.sha256()
    for k in sorted(_KEYS):
        h.update(k.encode())
        h.update(np.ascontiguousarray(getattr(demos, k)).tobytes())
    return h.hexdigest()


def save_demos(path: str | os.PathLike[str], demos: Demos) -> Path:
    path = Path(path)
    meta = {"domain": demos.domain, "task": demos.task, **demos.meta}
    standard_json(path, meta)  # load_demos would refuse the file

    def write(tmp: Path) -> None:
        # A file object: given the path, numpy would append ".npz" to the temporary name.
        with open(tmp, "wb") as f:
            np.savez_compressed(
                f, meta=np.array(json.dumps(meta)), **{k: getattr(demos, k) for k in _KEYS}
            )

    atomic_write(path, write)
    return path


def load_demos(path: str | os.PathLike[str], domain: str | None = None) -> Demos:
    """Loads and validates a demonstrations file; errors name the file and the defect."""
    path = Path(path)
    if not path.exists():
        raise DatasetError(f"{path}: no such demonstrations file")
    if path.is_file() and not zipfile.is_zipfile(path):
        raise DatasetError(
            f"{path}: unreadable: not an .npz archive (demonstrations files are written by "
            "`rbfm demos` or save_demos)"
        )
    try:
        with np.load(path, allow_pickle=False) as npz:
            missing = [k for k in (*_KEYS, "meta") if k not in npz.files]
            if missing:
                raise DatasetError(
                    f"{path}: not an rbfm demonstrations file (missing {missing}); write "
                    "your own arrays as one with Demos.from_arrays and save_demos "
                    "(docs/demonstrations.md)"
                )
            if extra := sorted(set(npz.files) - {*_KEYS, "meta"}):
                raise DatasetError(
                    f"{path}: arrays {extra} are not a demonstrations file's (it holds "
                    f"{', '.join(_KEYS)} and meta); rbfm would ignore them, so the file is "
                    "refused: write it with Demos.from_arrays and save_demos"
                )
            arrays = {k: np.asarray(npz[k]) for k in _KEYS}
            meta = parse_json(str(npz["meta"]))
    except DatasetError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise DatasetError(f"{path}: unreadable ({type(e).__name__}: {e})") from e
    if not isinstance(meta, dict):
        found = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
        raise DatasetError(
            f"{path}: meta must be a JSON table (domain, task, ...), found "
            f"{found.get(type(meta), 'a number')}; save_demos writes it"
        )
    for key in ("domain", "task"):
        if not isinstance(meta.get(key), str):
            raise DatasetError(
                f"{path}: meta's {key} is {json.dumps(meta.get(key))}; expected a name "
                "(save_demos writes it)"
            )
    spec = get_domain(meta["domain"])
    if domain is not None and spec.name != domain:
        raise DatasetError(f"{path}: demonstrations of {spec.name}, not {domain}")
    rest = {k: v for k, v in meta.items() if k not in ("domain", "task")} | {"path": str(path)}
    return _validated(spec.name, meta["task"], arrays, rest, str(path))


# The dtype Demos keeps each array in.
_DTYPES = {
    "observation": np.float32,
    "action": np.float32,
    "physics": np.float64,
    "reward": np.float64,
    "returns": np.float64,
}


def _locate(key: str, row: int, lengths: np.ndarray) -> str:
    """Which episode (and step) row `row` of a concatenated array `key` belongs to."""
    if key == "returns":
        return f"episode {row}"
    per_episode = lengths + 1 if key in ("observation", "physics") else lengths
    ends = np.cumsum(per_episode)
    episode = int(np.searchsorted(ends, row, side="right"))
    return f"episode {episode}, step {row - int(ends[episode] - per_episode[episode])}"


def _validated(
    domain: str, task: str, arrays: dict[str, np.ndarray], meta: dict[str, Any], where: str
) -> Demos:
    """Demos from arrays, every shape, value and bound checked; errors start with `where`.
    A physics array of no rows means the states are unknown (demonstrations from outside
    rbfm's simulator): nothing in inference reads them."""
    spec = get_domain(domain)
    spec.reward_fn(task)  # the task must be one of the domain's
    if scalars := [k for k in _KEYS if np.ndim(arrays[k]) == 0]:
        raise DatasetError(f"{where}: {', '.join(scalars)} holds one value, not an array")
    lengths = np.asarray(arrays["lengths"])
    if lengths.ndim != 1 or not np.issubdtype(lengths.dtype, np.integer):
        raise DatasetError(
            f"{where}: lengths must be a 1-d array of integers; found {lengths.dtype} "
            f"of shape {lengths.shape}"
        )
    if len(lengths) == 0:
        raise DatasetError(f"{where}: holds no episodes")
    physics_rows = 0 if len(arrays["physics"]) == 0 else int((lengths + 1).sum())
    action_rows = 0 if len(arrays["action"]) == 0 else int(lengths.sum())  # 0: states only
    expected = {
        "observation": (int((lengths + 1).sum()), spec.obs_dim),
        "physics": (physics_rows, spec.physics_dim),
        "action": (action_rows, spec.action_dim),
    }
    for key, shape in expected.items():
        if arrays[key].shape != shape:
            raise DatasetError(
                f"{where}: {key} has shape {arrays[key].shape}, expected {shape} "
                f"for {len(lengths)} {spec.name} episodes"
            )
    if (short := np.flatnonzero(lengths < 2)).size:
        raise DatasetError(
            f"{where}: episode {short[0]} has {lengths[short[0]]} step(s); an episode needs "
            "at least 2 (one transition)"
        )
    n_steps = int(lengths.sum())
    for key, n in (("reward", n_steps), ("returns", len(lengths))):
        if arrays[key].shape != (n,):
            raise DatasetError(f"{where}: {key} has shape {arrays[key].shape}, expected ({n},)")
    # Checked after the cast to the dtypes Demos keeps: a float64 value beyond float32's
    # range would otherwise pass and turn into inf there.
    cast = {}
    for key, dtype in _DTYPES.items():
        kind = arrays[key].dtype
        if not is_real(kind):
            raise DatasetError(f"{where}: {key} holds {kind} values; expected real numbers")
        with np.errstate(over="ignore"):
            cast[key] = np.asarray(arrays[key], dtype)
        finite = np.isfinite(cast[key])
        finite = finite.all(axis=tuple(range(1, finite.ndim)))  # per row
        if not finite.all():
            raise DatasetError(
                f"{where}: {key} holds NaN or infinite values "
                f"({_locate(key, int(np.argmin(finite)), lengths)}), counting values beyond "
                f"{np.dtype(dtype).name}'s range"
            )
    sums = np.add.reduceat(cast["reward"], np.cumsum(lengths) - lengths)
    if not np.allclose(cast["returns"], sums, rtol=1e-5, atol=1e-3):
        episode = int(np.argmax(np.abs(cast["returns"] - sums)))
        raise DatasetError(
            f"{where}: episode {episode}'s return is {cast['returns'][episode]:g}, but its "
            f"rewards sum to {sums[episode]:g}; returns must be the sums of the rewards"
        )
    size = np.abs(cast["action"]).max(1) if action_rows else np.zeros(0)
    if (size > 1 + 1e-5).any():
        step = int(size.argmax())
        episode = int(np.searchsorted(np.cumsum(lengths), step, side="right"))
        raise DatasetError(
            f"{where}: actions must lie in [-1, 1] (the environments' bounds); episode "
            f"{episode} holds {size[step]:g}"
        )
    return Demos(
        spec.name,
        task,
        cast["observation"],
        cast["action"],
        cast["physics"],
        cast["reward"],
        lengths.astype(np.int64),
        cast["returns"],
        meta,
    )
