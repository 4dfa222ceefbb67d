"""Reward-free offline datasets: loading, a consolidated cache, and transitions.

A transition is (s, a, s', a', discount): rows t-1 and t of one episode plus the
action of row t+1. The last step of an episode has no recorded next action, so an
episode of T steps yields T-1 transitions; no transition crosses an episode end.
"""

from __future__ import annotations

import json
import os
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from rbfm.atomic import atomic_write
from rbfm.data.exorl import KEYS, OPTIONAL_KEYS, episode_files, read_episode
from rbfm.envs import DOMAINS, DomainSpec, get_domain
from rbfm.errors import DatasetError

CACHE_DIR = ".rbfm_cache"
_CACHE_VERSION = 2  # 2: the optional `dynamics` rows


@dataclass(frozen=True)
class Transitions:
    """Arrays of N transitions; `next_physics` is the simulator state at s', and
    `next_dynamics` the perturbation levels it was simulated under (dynamics-diverse data
    only; `rbfm.envs.families` order)."""

    observation: np.ndarray
    action: np.ndarray
    next_observation: np.ndarray
    next_action: np.ndarray
    discount: np.ndarray
    reward: np.ndarray  # the reward stored at collection time (the collecting task's)
    next_physics: np.ndarray
    next_dynamics: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.observation)

    def subset(self, index: np.ndarray) -> Transitions:
        arrays: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        picked: dict[str, Any] = {k: a if a is None else a[index] for k, a in arrays.items()}
        return Transitions(**picked)

    def subsample(self, n: int, seed: int) -> Transitions:
        """n transitions drawn uniformly without replacement, reproducibly from `seed`."""
        return self.subset(draw_transitions(len(self), n, seed))


def draw_transitions(total: int, n: int, seed: int) -> np.ndarray:
    if not 0 < n <= total:
        raise ValueError(f"cannot subsample {n} transitions from {total}")
    return np.sort(np.random.default_rng(seed).choice(total, size=n, replace=False))


class Dataset:
    """The episodes of one ExORL buffer directory, as concatenated row arrays."""

    def __init__(
        self,
        domain: DomainSpec,
        directory: Path,
        files: list[str],
        rows: dict[str, np.ndarray],
        lengths: np.ndarray,
    ) -> None:
        self.domain, self.directory, self.files, self.rows = domain, directory, files, rows
        self.episode_lengths = lengths  # steps T per episode (rows are T+1)
        self.episode_starts = np.concatenate([[0], np.cumsum(lengths + 1)[:-1]]).astype(np.int64)
        # Row index of s' for each transition: rows 1..T-1 of every episode.
        self.transition_rows = np.concatenate(
            [start + np.arange(1, t) for start, t in zip(self.episode_starts, lengths, strict=True)]
        ).astype(np.int64)

    @property
    def transition_episodes(self) -> np.ndarray:
        """The episode (file) index of each transition."""
        return np.repeat(np.arange(self.num_episodes), self.episode_lengths - 1)

    def episode_returns(self, rewards: np.ndarray) -> np.ndarray:
        """Per-episode sums of one-per-transition rewards (e.g. from `relabel`)."""
        return np.bincount(self.transition_episodes, rewards, minlength=self.num_episodes)

    @property
    def algo(self) -> str:
        return self.directory.parent.name

    @property
    def num_episodes(self) -> int:
        return len(self.files)

    @property
    def num_steps(self) -> int:
        return int(self.episode_lengths.sum())

    def __len__(self) -> int:
        return len(self.transition_rows)

    def transitions(self, index: np.ndarray | None = None) -> Transitions:
        """Transitions `index` (all of them by default), in file-name then time order."""
        r = self.transition_rows if index is None else self.transition_rows[index]
        rows = self.rows
        return Transitions(
            observation=rows["observation"][r - 1],
            action=rows["action"][r],
            next_observation=rows["observation"][r],
            next_action=rows["action"][r + 1],
            discount=rows["discount"][r, 0],
            reward=rows["reward"][r, 0],
            next_physics=rows["physics"][r],
            next_dynamics=rows["dynamics"][r] if "dynamics" in rows else None,
        )

    def subsample(self, n: int, seed: int) -> Transitions:
        """n transitions drawn uniformly without replacement, reproducibly from `seed`."""
        return self.transitions(draw_transitions(len(self), n, seed))

    def summary(self) -> str:
        rewards = self.rows["reward"][self.transition_rows, 0]
        return "\n".join(
            [
                f"dataset     {self.directory}",
                f"domain      {self.domain.name} (obs {self.domain.obs_dim}, "
                f"action {self.domain.action_dim}, physics {self.domain.physics_dim})",
                f"algorithm   {self.algo}",
                f"episodes    {self.num_episodes} ({self.num_steps:,} steps)",
                f"transitions {len(self):,} (s, a, s', a')",
                f"stored reward per step: mean {rewards.mean():.4f}, max {rewards.max():.4f}; "
                f"episode return mean {self.episode_returns(rewards).mean():.1f} "
                "(over the transitions' steps)",
            ]
        )


def find_buffer(path: Path) -> Path:
    """The single ExORL buffer directory at or below `path`."""
    if not path.exists():
        raise DatasetError(f"{path}: no such directory")
    if not path.is_dir():
        raise DatasetError(f"{path}: not a directory")
    if path.name == "buffer" or any(path.glob("*.npz")):
        return path
    found = sorted(p for p in path.rglob("buffer") if p.is_dir() and CACHE_DIR not in p.parts)
    if not found:
        raise DatasetError(
            f"{path}: no ExORL buffer directory (<domain>/<algo>/buffer/*.npz) found below it"
        )
    if len(found) > 1:
        listing = "\n  ".join(str(p) for p in found)
        raise DatasetError(f"{path}: several buffers below it; pass one of:\n  {listing}")
    return found[0]


def infer_domain(buffer: Path, domain: str | None) -> DomainSpec:
    """The named domain, else the one the buffer's path names (<domain>/<algo>/buffer);
    a path that names another domain than the one asked for is refused."""
    named = next((p for p in reversed(buffer.resolve().parts) if p in DOMAINS), None)
    if domain is not None:
        spec = get_domain(domain)
        if named is not None and named != spec.name:
            raise DatasetError(f"{buffer}: the path names {named}, not {spec.name}")
        return spec
    if named is not None:
        return DOMAINS[named]
    raise DatasetError(
        f"{buffer}: cannot tell the domain from the path (expected <domain>/<algo>/buffer); "
        f"pass domain= one of {', '.join(DOMAINS)}"
    )


def _manifest(domain: DomainSpec, files: list[Path]) -> dict[str, object]:
    stats = [(f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in files]
    return {"version": _CACHE_VERSION, "domain": domain.name, "files": stats}


def read_episodes(files: list[Path], domain: DomainSpec) -> list[dict[str, np.ndarray]]:
    """Reads and validates the files' episodes, on threads, with a progress bar."""
    # zlib releases the GIL, so threads decompress episodes in parallel.
    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        results = pool.map(lambda f: read_episode(f, domain), files)
        # disable=None: a bar on a terminal, none in log files.
        return list(
            tqdm(results, total=len(files), desc="reading episodes", unit="ep", disable=None)
        )


def _load_cache(cache: Path, manifest: dict[str, object]) -> dict[str, np.ndarray] | None:
    try:
        if json.loads((cache / "manifest.json").read_text()) != json.loads(json.dumps(manifest)):
            return None
        keys = [*KEYS, *(k for k in OPTIONAL_KEYS if (cache / f"{k}.npy").exists()), "lengths"]
        return {k: np.load(cache / f"{k}.npy") for k in keys}
    except (OSError, ValueError):
        return None


def _save_npy(arr: np.ndarray, path: Path) -> None:
    # A file object: given a path, np.save would append ".npy" to the temporary name.
    with open(path, "wb") as f:
        np.save(f, arr)


def _write_cache(cache: Path, arrays: dict[str, np.ndarray], manifest: dict[str, object]) -> None:
    try:
        cache.mkdir(exist_ok=True)
        (cache / "manifest.json").unlink(missing_ok=True)  # invalid until fully rewritten
        for key in OPTIONAL_KEYS:
            if key not in arrays:
                (cache / f"{key}.npy").unlink(missing_ok=True)  # a buffer that had it
        for key, arr in arrays.items():
            atomic_write(cache / f"{key}.npy", partial(_save_npy, arr))
        text = json.dumps(manifest)
        atomic_write(cache / "manifest.json", lambda tmp: tmp.write_text(text))
    except OSError as e:
        warnings.warn(f"could not write the dataset cache in {cache}: {e}", stacklevel=3)


def _keys(episodes: list[dict[str, np.ndarray]], buffer: Path) -> list[str]:
    """The keys every episode has; an optional key some episodes lack is an error."""
    keys = list(KEYS)
    for key in OPTIONAL_KEYS:
        have = sum(key in ep for ep in episodes)
        if have and have != len(episodes):
            raise DatasetError(
                f"{buffer}: {have} of {len(episodes)} episodes have {key!r}; a buffer mixes "
                "collections (one dynamics-diverse, one not)"
            )
        keys += [key] * bool(have)
    return keys


def load_dataset(
    path: str | os.PathLike[str], domain: str | None = None, cache: bool = True
) -> Dataset:
    """Loads an ExORL buffer (`path` is the buffer directory or any directory above it).

    The first load validates every episode and writes a consolidated array cache next
    to the buffer (`<algo>/.rbfm_cache`); later loads read the cache in seconds, and it
    is rebuilt whenever an episode file is added, removed or changed.
    """
    buffer = find_buffer(Path(path))
    spec = infer_domain(buffer, domain)
    files = episode_files(buffer)
    if not files:
        raise DatasetError(f"{buffer}: no episode files (*.npz)")
    manifest = _manifest(spec, files)
    cache_dir = buffer.parent / CACHE_DIR
    arrays = _load_cache(cache_dir, manifest) if cache else None
    if arrays is None:
        read_episode(files[0], spec)  # one file of another layout is refused before the rest
        episodes = read_episodes(files, spec)
        arrays = {k: np.concatenate([ep[k] for ep in episodes]) for k in _keys(episodes, buffer)}
        arrays["lengths"] = np.array([len(ep["observation"]) - 1 for ep in episodes])
        if cache:
            _write_cache(cache_dir, arrays, manifest)
    lengths = arrays.pop("lengths")
    ds = Dataset(spec, buffer, [f.name for f in files], arrays, lengths)
    if len(ds) == 0:  # every episode of one step: no (s, a, s', a') to train on
        raise DatasetError(
            f"{buffer}: {len(files)} episodes and no transition (s, a, s', a'); an episode "
            "of T steps gives T-1, so each needs at least 2 steps"
        )
    return ds
