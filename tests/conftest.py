"""Shared helpers for the test suite."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rbfm.envs import get_domain
from rbfm.fb import FBModel, fb_config


@pytest.fixture(autouse=True)
def _single_thread() -> None:
    # Bitwise comparisons between runs need the same torch thread count everywhere.
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def model() -> FBModel:
    """A tiny untrained cheetah FB model (a module's own `model` fixture replaces it)."""
    torch.manual_seed(0)
    return FBModel(17, 6, fb_config("tiny")).eval()


def fake_episode(domain: str, steps: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A well-formed ExORL episode with random content (for format tests, not physics)."""
    spec = get_domain(domain)
    n = steps + 1
    return {
        "observation": rng.standard_normal((n, spec.obs_dim)).astype(np.float32),
        "action": rng.uniform(-1, 1, (n, spec.action_dim)).astype(np.float32),
        "reward": rng.uniform(0, 1, (n, 1)).astype(np.float32),
        "discount": np.ones((n, 1), np.float32),
        "physics": rng.standard_normal((n, spec.physics_dim)),
    }
