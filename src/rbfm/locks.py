"""A folder held by one process at a time: an fcntl lock on a file in it, which the OS
drops when its holder dies, however it dies, so a killed run never blocks the next."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rbfm.errors import InUseError

LOCK_NAME = "run.lock"

# Folders this process holds: taking one again (the command line around the runner that
# also takes it) is a no-op, where a second flock of this process would refuse itself.
_HELD: set[Path] = set()


@contextmanager
def hold(folder: str | os.PathLike[str]) -> Iterator[None]:
    """Holds `folder` (made if missing) for the block, its process id in LOCK_NAME; raises
    InUseError naming the holder's when another process holds it."""
    root = Path(folder).resolve()
    if root in _HELD:
        yield
        return
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode().strip() or "unknown"
            raise InUseError(
                f"{folder}: another run is writing into it (process {holder}); wait for it "
                "to end, or choose another folder"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        _HELD.add(root)
        try:
            yield
        finally:
            _HELD.discard(root)
    finally:
        os.close(fd)  # releases the lock
