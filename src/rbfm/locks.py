"""A folder held by one process at a time: an fcntl lock on a file in it, which the OS
drops when its holder dies, however it dies, so a killed run never blocks the next."""

from __future__ import annotations

import fcntl
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rbfm.errors import ConfigError, InUseError

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
    fd = _open(root / LOCK_NAME)
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


def _open(lock: Path) -> int:
    """The lock file, opened for writing, or a one-line refusal: the holder's id is
    written into it, so a lock that is a link, symbolic or hard, would overwrite the file
    it links to; any other kind of file is no lock either."""
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as e:
        if lock.is_symlink():
            raise ConfigError(
                f"{lock}: a symbolic link; remove it (a run makes its own lock file)"
            ) from None
        advice = "remove it or choose another folder" if lock.exists() else "choose another folder"
        raise ConfigError(
            f"{lock}: cannot be this run's lock file ({e.strerror}); {advice}"
        ) from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:
        os.close(fd)
        why = "a hard link of another file" if stat.S_ISREG(info.st_mode) else "not a plain file"
        raise ConfigError(f"{lock}: cannot be this run's lock file ({why}); remove it")
    return fd
