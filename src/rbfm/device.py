"""Device selection: CUDA when present, overridable everywhere with a `device` argument."""

from __future__ import annotations

import torch


def pick_device(name: str | None = None) -> torch.device:
    """`name` if given ("cpu", "cuda", "cuda:1"...), else CUDA when available, else CPU."""
    if name is not None:
        return torch.device(name)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")
