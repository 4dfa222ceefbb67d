"""Environments: the three DMC domains, their twelve tasks and nine perturbation families."""

from rbfm.envs.domains import DOMAINS, TASKS, DomainSpec, checked_tasks, get_domain
from rbfm.envs.env import RbfmEnv, flatten_observation, make_env
from rbfm.envs.perturbations import (
    NOMINAL,
    PERTURBATIONS,
    Perturbation,
    check_pair,
    families,
    get_perturbation,
)

__all__ = [
    "DOMAINS",
    "NOMINAL",
    "PERTURBATIONS",
    "TASKS",
    "DomainSpec",
    "Perturbation",
    "RbfmEnv",
    "check_pair",
    "checked_tasks",
    "families",
    "flatten_observation",
    "get_domain",
    "get_perturbation",
    "make_env",
]
