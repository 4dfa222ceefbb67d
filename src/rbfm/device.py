"""Device selection: CUDA when present, overridable everywhere with a `device` argument."""

from __future__ import annotations

import torch

from rbfm.errors import ConfigError


def pick_device(name: str | None = None) -> torch.device:
    """`name` if given ("cpu", "cuda", "cuda:1"...), else CUDA when available, else CPU."""
    if name is not None:
        try:
            device = torch.device(name)
        except RuntimeError:
            raise ConfigError(f"device {name!r} (valid: cpu, cuda, cuda:N)") from None
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ConfigError(f"device {name!r}: this machine has no CUDA device (valid: cpu)")
        if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
            raise ConfigError(
                f"device {name!r}: this machine has {torch.cuda.device_count()} CUDA devices "
                f"(valid: cpu, cuda:0..cuda:{torch.cuda.device_count() - 1})"
            )
        if device.type not in ("cpu", "cuda"):
            raise ConfigError(f"device {name!r} (valid: cpu, cuda, cuda:N)")
        return device
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def slow_bf16(device: torch.device) -> bool:
    """Whether bfloat16 matmuls run in torch's generic kernel here: a CPU without bfloat16
    units (no avx512_bf16 or AMX), where they are many times slower than float32."""
    return device.type == "cpu" and not torch.ops.mkldnn._is_mkldnn_bf16_supported()
