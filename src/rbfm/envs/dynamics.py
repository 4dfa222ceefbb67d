"""Several perturbation families at once, and the training distribution over them.

A `Dynamics` is one level per family of a domain (families absent stay nominal). The
evaluation grid perturbs one family at a time; dynamics-diverse data draws all of a
domain's families at once, per episode, from `DynamicsDistribution`.

The training range of each family runs from nominal to the grid's fourth level (60% of
the way to the paper's extreme), so that the grid's two strongest levels measure
extrapolation. A share of episodes stays fully nominal: every demonstration a user
imitates comes from nominal physics, and the nominal model's data is the reference the
diverse model is compared with there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import mujoco
import numpy as np

from rbfm.envs.perturbations import families, get_perturbation
from rbfm.errors import ConfigError

Dynamics = Mapping[str, float]


def check_dynamics(domain: str, dynamics: Dynamics) -> dict[str, float]:
    """Validates every (family, level) of `dynamics` for `domain`."""
    return {f: get_perturbation(domain, f).check(float(v)) for f, v in dynamics.items()}


def apply_dynamics(
    model: mujoco.MjModel, data: mujoco.MjData, domain: str, dynamics: Dynamics
) -> None:
    """Writes every family's level into a nominal model (the families touch disjoint fields,
    so their order does not matter)."""
    for family, level in check_dynamics(domain, dynamics).items():
        get_perturbation(domain, family).apply(model, data, level)


def dynamics_vector(domain: str, dynamics: Dynamics) -> np.ndarray:
    """The levels in `families(domain)` order, nominal where absent: what an episode stores."""
    return np.array(
        [dynamics.get(f, get_perturbation(domain, f).nominal) for f in families(domain)],
        np.float64,
    )


def dynamics_of_vector(domain: str, vector: np.ndarray) -> dict[str, float]:
    """The inverse of `dynamics_vector`, keeping only the perturbed families."""
    names = families(domain)
    if np.shape(vector) != (len(names),):
        raise ConfigError(
            f"a {domain} dynamics vector has {len(names)} levels ({', '.join(names)}), "
            f"got shape {np.shape(vector)}"
        )
    out = {f: float(v) for f, v in zip(names, vector, strict=True)}
    return {f: v for f, v in out.items() if v != get_perturbation(domain, f).nominal}


@dataclass(frozen=True)
class DynamicsDistribution:
    """Per episode: fully nominal with probability `nominal_share`, else every family's
    level drawn uniformly, independently, between nominal and `train_fraction` of the way
    to the paper's extreme. Draws depend only on (seed, episode index), so collections
    resume and extend exactly."""

    nominal_share: float = 0.25
    train_fraction: float = 0.6  # the grid's fourth of six levels

    def __post_init__(self) -> None:
        if not 0.0 <= self.nominal_share <= 1.0:
            raise ConfigError(f"nominal_share must be in [0, 1], got {self.nominal_share}")
        if not 0.0 < self.train_fraction <= 1.0:
            raise ConfigError(f"train_fraction must be in (0, 1], got {self.train_fraction}")

    def ranges(self, domain: str) -> dict[str, tuple[float, float]]:
        """(nominal, limit) of each family of the domain, in the paper's units."""
        out = {}
        for family in families(domain):
            p = get_perturbation(domain, family)
            limit = p.nominal + self.train_fraction * (p.extreme - p.nominal)
            out[family] = (p.nominal, float(np.round(limit, 9)))
        return out

    def draw(self, domain: str, seed: int, index: int) -> dict[str, float]:
        """Episode `index`'s dynamics (perturbed families only; {} is nominal)."""
        rng = np.random.default_rng([seed, index, 0xD1])
        nominal = rng.random() < self.nominal_share
        # From nominal towards the limit: the limit is below nominal where a family's
        # perturbation lowers a value (cheetah's range of motion, quadruped's ctrlrange).
        levels = {
            f: lo + float(rng.random()) * (hi - lo) for f, (lo, hi) in self.ranges(domain).items()
        }
        return {} if nominal else levels

    def record(self, domain: str) -> dict[str, Any]:
        """What a collection stores in its collect.json."""
        return {
            "nominal_share": self.nominal_share,
            "train_fraction": self.train_fraction,
            "ranges": {f: list(r) for f, r in self.ranges(domain).items()},
        }


PRESETS = {"train": DynamicsDistribution()}
