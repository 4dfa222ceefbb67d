"""Executors: where jobs run. The runner hands them a list of jobs and consumes results
as they finish; they never touch the run directory.

- `LocalExecutor(workers)`: a pool of worker processes on this machine (0: in this
  process, one job after another).
- `RayExecutor(address)`: the same jobs as Ray tasks, one CPU each, on a local Ray
  instance (`"local"`), the cluster this machine belongs to (`"auto"`), or a cluster's
  address. Results travel back through Ray's object store, so the run directory only
  has to exist on the driver; checkpoints must be readable at the same path on every
  node (the shipped models are, being in the installed package).

Both run exactly the same job functions with one torch thread each, so the same spec
gives bitwise the same results table on either.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any, Protocol, TypeVar

from rbfm.errors import ConfigError

J = TypeVar("J")
R = TypeVar("R")


class Executor(Protocol):
    name: str
    parallel: int  # jobs that run at once

    def map_unordered(self, fn: Callable[[J], R], jobs: list[J]) -> Iterator[tuple[int, R]]: ...

    def close(self) -> None: ...


def _exit_with(driver: int) -> None:
    """Ends this worker once the driver process is gone. A driver killed by SIGTERM or
    SIGKILL runs no cleanup, and the forkserver its workers are forked from lives as long
    as they do, so they would go on computing cells nobody stores, competing for the cores
    with the rerun that resumes them."""
    while True:
        time.sleep(1.0)
        try:
            os.kill(driver, 0)
        except (ProcessLookupError, PermissionError):  # gone (its pid now another user's)
            os._exit(1)


def _init_worker(driver: int | None = None) -> None:
    """One torch thread; given the driver's pid, a watchdog that ends this worker with it
    (Ray manages its own workers' lives)."""
    import torch

    torch.set_num_threads(1)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if driver is not None:
        threading.Thread(target=_exit_with, args=(driver,), daemon=True).start()


class LocalExecutor:
    """Jobs over `workers` processes (default: the machine's cores); 0 runs them here."""

    def __init__(self, workers: int | None = None) -> None:
        self.workers = (os.cpu_count() or 1) if workers is None else workers
        if self.workers < 0:
            raise ConfigError(f"workers: {self.workers} is out of range (valid: >= 0)")
        self.name = f"local ({self.workers} worker{'s' if self.workers != 1 else ''})"
        self.parallel = max(self.workers, 1)
        self._pool: ProcessPoolExecutor | None = None

    def map_unordered(self, fn: Callable[[J], R], jobs: list[J]) -> Iterator[tuple[int, R]]:
        """Yields (index, result) as jobs finish; at most `workers` jobs are in flight, so
        an interrupted run has computed little that it did not store."""
        if self.workers == 0:
            for i, job in enumerate(jobs):
                yield i, fn(job)
            return
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                self.workers,
                mp_context=mp.get_context("forkserver"),
                initializer=_init_worker,
                initargs=(os.getpid(),),
            )
        pending = iter(enumerate(jobs))
        running: dict[Future[R], int] = {}
        for i, job in pending:
            running[self._pool.submit(fn, job)] = i
            if len(running) >= self.workers:
                break
        while running:
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for fut in done:
                i = running.pop(fut)
                nxt = next(pending, None)
                if nxt is not None:
                    running[self._pool.submit(fn, nxt[1])] = nxt[0]
                yield i, fut.result()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None


class RayExecutor:
    """Jobs as Ray tasks (one CPU each). `address`: "local" starts a private instance on
    this machine; "auto" joins the running cluster; otherwise a cluster address."""

    def __init__(self, address: str = "auto", num_cpus: int | None = None) -> None:
        try:
            import ray
        except ImportError as e:
            raise ConfigError(
                '--ray needs Ray: pip install "rbfm[ray]" (or run without --ray)'
            ) from e
        self._ray = ray
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
            try:
                if address == "local":
                    ray.init(num_cpus=num_cpus, **kwargs)
                else:
                    ray.init(address=address, **kwargs)
            except (ConnectionError, RuntimeError) as e:
                raise ConfigError(
                    f"--ray {address}: no Ray cluster could be joined ({e}); start one "
                    "(`ray start --head`), use --ray local for a private instance, or run "
                    "without --ray"
                ) from e
        self.parallel = max(int(ray.cluster_resources().get("CPU", 1)), 1)
        self.name = f"ray ({address}, {self.parallel} CPUs)"
        self._remote: dict[Callable[..., Any], Any] = {}

    def map_unordered(self, fn: Callable[[J], R], jobs: list[J]) -> Iterator[tuple[int, R]]:
        ray = self._ray
        if fn not in self._remote:
            self._remote[fn] = ray.remote(num_cpus=1)(_ray_call).options(max_retries=2)
        task = self._remote[fn]
        refs = {task.remote(fn, job): i for i, job in enumerate(jobs)}
        while refs:
            done, _ = ray.wait(list(refs), num_returns=1)
            for ref in done:
                yield refs.pop(ref), ray.get(ref)

    def close(self) -> None:
        self._remote.clear()


def _ray_call(fn: Callable[[J], R], job: J) -> R:
    _init_worker()
    return fn(job)


def make_executor(workers: int | None = None, ray: str | None = None) -> Executor:
    if ray is not None:
        return RayExecutor(ray, num_cpus=workers or None)
    return LocalExecutor(workers)
