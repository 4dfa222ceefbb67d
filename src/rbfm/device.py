"""Device selection: CUDA when present, overridable everywhere with a `device` argument."""

from __future__ import annotations

import torch


def pick_device(name: str | None = None) -> torch.device:
    """`name` if given ("cpu", "cuda", "cuda:1"...), else CUDA when available, else CPU."""
    if name is not None:
        return torch.device(name)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def slow_bf16(device: torch.device) -> bool:
    """Whether bfloat16 matmuls run in torch's generic kernel here: a CPU without bfloat16
    units (no avx512_bf16 or AMX), where they are many times slower than float32."""
    return device.type == "cpu" and not torch.ops.mkldnn._is_mkldnn_bf16_supported()
