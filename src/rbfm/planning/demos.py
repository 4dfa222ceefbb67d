"""Demonstrations and ceiling episodes from the MPPI planner, resumable episode by episode.

A planner episode costs 15-180 s on 2 cores, so each finished episode is written at once
to a parts folder beside the output (`<out>.parts/episode-0003.npz`); a rerun with the
same arguments loads those and plans only the missing ones. Episode i depends on
(seed, i) alone, so a resumed file equals an uninterrupted one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from rbfm import checks
from rbfm.atomic import atomic_write
from rbfm.checks import in_range, out_dir
from rbfm.data.demos import Demos, save_demos
from rbfm.envs import get_domain, make_env
from rbfm.envs.dynamics import Dynamics, check_dynamics
from rbfm.errors import DatasetError
from rbfm.planning.mppi import MPPIConfig, MPPIPlanner, PlannedEpisode, plan_episode

# Salts the episodes' seeds so planner initial states never coincide with the
# evaluation's, which draw from the plain seed.
_STREAM = 0x6D7063


def _part_key(domain: str, task: str, config: MPPIConfig, dynamics: Dynamics, seed: int) -> str:
    # The thread count changes no rollout, so it is not part of an episode's identity.
    settings = {k: v for k, v in config.record().items() if k != "threads"}
    record: dict[str, Any] = {"domain": domain, "task": task, "mpc": settings}
    record.update(dynamics=dict(dynamics), seed=seed)
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()[:16]


def planned_episode(
    domain: str,
    task: str,
    config: MPPIConfig,
    index: int,
    seed: int = 0,
    dynamics: Dynamics | None = None,
    steps: int | None = None,
    progress: bool = False,
) -> PlannedEpisode:
    """Episode `index` of the planner's stream for `seed`: its initial state and its
    sampling noise are drawn from (seed, index)."""
    in_range("mpc", "index", index, 0, integer=True)
    checks.seed("mpc", seed)
    _check_steps(steps)
    env = make_env(domain, task, seed=0, dynamics=dynamics)
    env.reseed(np.random.SeedSequence([seed, index, _STREAM]))
    planner = MPPIPlanner(domain, task, config, dynamics, seed=seed * 100_003 + index)
    total = env.step_limit if steps is None else steps
    with tqdm(total=total, desc=f"mpc {domain}/{task} #{index}", disable=not progress) as bar:
        return plan_episode(env, planner, steps, bar.update)


def _check_steps(steps: int | None) -> None:
    """An episode of one step holds no transition: refused before any is planned."""
    if steps is not None:
        in_range("mpc", "steps", steps, 2, integer=True)


def _save_part(path: Path, episode: PlannedEpisode) -> None:
    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            np.savez(f, **{k: getattr(episode, k) for k in PlannedEpisode.__dataclass_fields__})

    atomic_write(path, write)


def _load_part(path: Path) -> PlannedEpisode:
    try:
        with np.load(path, allow_pickle=False) as npz:
            return PlannedEpisode(*(npz[k] for k in PlannedEpisode.__dataclass_fields__))
    except (PermissionError, IsADirectoryError) as e:  # a whole episode may be behind it
        raise DatasetError(f"{path}: cannot read it ({e.strerror})") from None
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        # Not numpy's reason: for random bytes it suggests unpickling them.
        raise DatasetError(
            f"{path}: not a whole planner episode (empty, truncated or another file); "
            "delete it and rerun to plan it again"
        ) from None


def planned_episodes(
    domain: str,
    task: str,
    config: MPPIConfig,
    episodes: int,
    parts: Path,
    seed: int = 0,
    dynamics: Dynamics | None = None,
    steps: int | None = None,
    progress: bool = False,
) -> list[PlannedEpisode]:
    """Episodes 0..episodes-1 of the stream, each kept in `parts` as soon as it ends; the
    parts of other settings (another key) are never mixed in."""
    get_domain(domain).reward_fn(task)
    in_range("mpc", "episodes", episodes, 1, integer=True)
    checks.seed("mpc", seed)
    _check_steps(steps)
    dyn = check_dynamics(domain, dynamics or {})
    key = _part_key(domain, task, config, dyn, seed) + ("" if steps is None else f"-{steps}")
    out_dir(parts, "--parts")  # else the first episode's minutes are lost when it is kept
    parts.mkdir(parents=True, exist_ok=True)
    paths = [parts / f"{key}-episode-{i:04d}.npz" for i in range(episodes)]
    # Every kept episode is read before any is planned: a bad one stops the run at once,
    # not after the hours of planning the episodes before it.
    kept = {path: _load_part(path) for path in paths if path.exists()}
    out = []
    for i, path in enumerate(paths):
        if path not in kept:
            kept[path] = planned_episode(domain, task, config, i, seed, dyn, steps, progress)
            _save_part(path, kept[path])
        out.append(kept[path])
    return out


def episodes_demos(
    domain: str, task: str, episodes: list[PlannedEpisode], config: MPPIConfig, seed: int
) -> Demos:
    """Planner episodes as a demonstrations set, its settings in the metadata."""
    demos = Demos.from_arrays(
        domain,
        task,
        [e.observation for e in episodes],
        [e.action for e in episodes],
        [e.reward for e in episodes],
        [e.physics for e in episodes],
    )
    meta: dict[str, Any] = {"source": "mpc", "mpc": config.record(), "seed": seed}
    return dataclasses.replace(demos, meta={**demos.meta, **meta})


def mpc_demos(
    domain: str,
    task: str,
    episodes: int,
    out: Path,
    config: MPPIConfig,
    seed: int = 0,
    steps: int | None = None,
    progress: bool = True,
    parts: Path | None = None,
) -> Demos:
    """Planner demonstrations at nominal physics written to `out` (.npz), resumable
    through `<out>.parts/`, which is removed once `out` is whole, or through `parts`,
    which is kept: an experiment's `planner/` folder, whose "mpc" expert then plans none
    of these episodes again (the same settings, seed and index name the same file)."""
    kept = parts is not None
    parts = parts if parts is not None else out.with_name(out.name + ".parts")
    eps = planned_episodes(domain, task, config, episodes, parts, seed, None, steps, progress)
    demos = episodes_demos(domain, task, eps, config, seed)
    save_demos(out, demos)
    if not kept:
        shutil.rmtree(parts)
    return demos
