"""Progress bars for long library calls: drawn only when the caller asks (the command
line does; notebooks and tests get silence by default)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

from tqdm import tqdm

T = TypeVar("T")


def steps_bar(steps: Iterable[T], desc: str, enabled: bool) -> Iterable[T]:
    """The optimisation steps, with a progress bar when `enabled` (the command line)."""
    return tqdm(steps, desc=desc, unit="step", disable=not enabled, leave=False, mininterval=0.5)
