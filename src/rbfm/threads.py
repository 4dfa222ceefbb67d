"""One torch thread for the work of small networks on one batch at a time (inference,
baselines' training, rollouts): more threads only spin, 2.4x slower on two threads of a
busy 2-core machine (docs/reference.md). The command line sets it for its whole process;
the Python API for the duration of each call, restoring the caller's setting after.
`OMP_NUM_THREADS`, when set, is the user's choice and wins (but in the quickstart, whose
table is the same on every machine only on one thread). The count is the process's: API
calls made at once from several Python threads may restore it in the wrong order.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import ParamSpec, TypeVar

import torch

P = ParamSpec("P")
R = TypeVar("R")


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """torch on `n` threads inside the block, the caller's count restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def one_torch_thread(fn: Callable[P, R]) -> Callable[P, R]:
    """`fn` run on one torch thread unless `OMP_NUM_THREADS` is set."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with nullcontext() if "OMP_NUM_THREADS" in os.environ else torch_threads(1):
            return fn(*args, **kwargs)

    return wrapper
