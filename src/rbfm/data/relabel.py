"""Task rewards recomputed from stored physics states.

For each state the simulator is put back exactly where the environment left it
after `env.step`: dm_control ends every step with `mj_step1`, which recomputes
positions, velocities, sensors and subtree momenta from (qpos, qvel, act). Doing
the same here (not `env.step`, not a bare `set_state`) is what makes the
relabelled rewards equal the collected ones, including walker flip's angular
momentum and the velocity-based rewards. The per-state pass only reads a handful
of features; the rewards are then computed for all states at once.

States of dynamics-diverse data are put back into the physics they were simulated
under: subtree momenta and so walker's speed rewards depend on the body masses.
"""

from __future__ import annotations

import mujoco
import numpy as np
from tqdm import tqdm

from rbfm.data.dataset import Dataset, Transitions, load_dataset
from rbfm.envs import get_domain
from rbfm.envs.dynamics import apply_dynamics, dynamics_of_vector
from rbfm.errors import DatasetError


def physics_features(
    domain: str,
    states: np.ndarray,
    progress: bool = True,
    dynamics: np.ndarray | None = None,
) -> np.ndarray:
    """The reward features (domain.feature_names) of each physics state, shape (N, F);
    `dynamics` (N, families) gives each state's perturbation levels (default nominal)."""
    spec = get_domain(domain)
    states = np.asarray(states, dtype=np.float64)
    if states.ndim != 2 or states.shape[1] != spec.physics_dim:
        raise DatasetError(
            f"physics states have shape {states.shape}; the {domain} domain stores "
            f"(N, {spec.physics_dim})"
        )
    # States grouped by the physics they were simulated under: one model built per group.
    groups: list[tuple[dict[str, float], np.ndarray]] = [({}, np.arange(len(states)))]
    if dynamics is not None:
        levels, inverse = np.unique(dynamics, axis=0, return_inverse=True)
        order = np.argsort(inverse, kind="stable")
        parts = np.split(order, np.cumsum(np.bincount(inverse))[:-1])
        groups = [
            (dynamics_of_vector(domain, v), rows) for v, rows in zip(levels, parts, strict=True)
        ]
    out = np.empty((len(states), len(spec.feature_names)))
    what = mujoco.mjtState.mjSTATE_PHYSICS
    bar = tqdm(
        total=len(states),
        desc=f"relabelling {domain}",
        disable=not progress,
        unit="state",
        mininterval=0.5,
    )
    for levels_of_group, rows in groups:
        physics = spec.build_physics()
        model, data = physics.model.ptr, physics.data.ptr
        apply_dynamics(model, data, domain, levels_of_group)
        read = spec.feature_reader(model)
        for i in rows:
            mujoco.mj_setState(model, data, states[i], what)
            mujoco.mj_step1(model, data)
            out[i] = read(data)
        bar.update(len(rows))
    bar.close()
    return out


def _states(
    dataset: Dataset | Transitions | np.ndarray, domain: str
) -> tuple[np.ndarray, np.ndarray | None]:
    """The physics states and, for dynamics-diverse data, their dynamics."""
    if isinstance(dataset, Dataset):
        if dataset.domain.name != domain:
            raise DatasetError(
                f"{dataset.directory} is a {dataset.domain.name} dataset, not {domain}"
            )
        rows, r = dataset.rows, dataset.transition_rows
        return rows["physics"][r], rows["dynamics"][r] if "dynamics" in rows else None
    if isinstance(dataset, Transitions):
        return dataset.next_physics, dataset.next_dynamics
    return dataset, None


def relabel(
    dataset: Dataset | Transitions | np.ndarray,
    domain: str,
    task: str,
    progress: bool = False,
) -> np.ndarray:
    """One reward per transition (computed at its s' physics row), in the dataset's order.

    `dataset` may also be an (N, physics_dim) array of physics states.
    """
    reward_fn = get_domain(domain).reward_fn(task)
    states, dynamics = _states(dataset, domain)
    features = physics_features(domain, states, progress, dynamics)
    return np.asarray(reward_fn(get_domain(domain).features(features)), dtype=np.float64)


def relabel_all(
    dataset: Dataset | Transitions | np.ndarray, domain: str, progress: bool = False
) -> dict[str, np.ndarray]:
    """Rewards of every task of the domain from a single pass over the states."""
    spec = get_domain(domain)
    states, dynamics = _states(dataset, domain)
    features = spec.features(physics_features(domain, states, progress, dynamics))
    return {task: np.asarray(fn(features), dtype=np.float64) for task, fn in spec.rewards.items()}


def describe_with_tasks(path: str, progress: bool = True) -> str:
    """A dataset's summary with every task's relabelled rewards: mean per step, and the
    episode returns' mean, best and mean by tenth of the episodes in collection order.
    The tenths show whether the exploration agent's data was still improving when it
    stopped (walker RND: walk's tenths rise 60 -> 201 and fall back to 164)."""
    ds = load_dataset(path)
    lines = [
        ds.summary(),
        "relabelled rewards: mean per step; episode return: mean, best, and mean by tenth "
        "of the episodes in collection order",
    ]
    for task, r in relabel_all(ds, ds.domain.name, progress).items():
        ret = ds.episode_returns(r)
        tenths = " ".join(f"{part.mean():.0f}" for part in np.array_split(ret, min(10, len(ret))))
        lines.append(f"  {task:<14} {r.mean():.4f} {ret.mean():8.1f} {ret.max():8.1f}   {tenths}")
    return "\n".join(lines)
