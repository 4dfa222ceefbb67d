"""Seeded construction without touching the caller's global random state."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Inside: torch's global CPU generator seeded with `seed` (what nn.Module
    initialisers draw from); outside: the caller's generator state, unchanged. A library
    call must not reseed its user's experiment. Build modules on the CPU inside, then
    move them."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield
