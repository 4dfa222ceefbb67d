"""Range checks for hyperparameters: a value the code cannot use is rejected when a config
is built, before any compute, with the field and its valid range in the message."""

from __future__ import annotations

import math

from rbfm.errors import ConfigError


def in_range(
    owner: str,
    name: str,
    value: object,
    low: float | None = None,
    high: float | None = None,
    *,
    open_low: bool = False,
    open_high: bool = False,
    integer: bool = False,
) -> None:
    """Raises ConfigError unless `value` is a finite number (an integer if asked) in range."""
    kind = int if integer else (int, float)
    ok = isinstance(value, kind) and not isinstance(value, bool)
    x = float(value) if ok else math.nan  # type: ignore[arg-type]
    if ok and math.isfinite(x):
        ok = (low is None or (x > low if open_low else x >= low)) and (
            high is None or (x < high if open_high else x <= high)
        )
    else:
        ok = False
    if not ok:
        lo = "-inf" if low is None else f"{low:g}"
        hi = "inf" if high is None else f"{high:g}"
        left = "(" if open_low or low is None else "["
        right = ")" if open_high or high is None else "]"
        bounds = f"{left}{lo}, {hi}{right}"
        what = "an integer" if integer else "a number"
        raise ConfigError(f"{owner}.{name}: {value!r} is out of range (valid: {what} in {bounds})")


def positive_ints(owner: str, name: str, values: tuple[int, ...]) -> None:
    if not values:
        raise ConfigError(f"{owner}.{name}: needs at least one layer width")
    for v in values:
        in_range(owner, name, v, 1, integer=True)
