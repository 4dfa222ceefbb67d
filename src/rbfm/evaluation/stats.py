"""Aggregate statistics: interquartile mean and confidence intervals."""

from __future__ import annotations

import numpy as np
from scipy import stats


def iqm(values: np.ndarray) -> float:
    """Interquartile mean: the mean of the middle 50% (scipy's 25% two-sided trim)."""
    return float(stats.trim_mean(np.asarray(values, dtype=np.float64), 0.25))


def mean_ci(values: np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    """Mean and the half-width of its Student-t confidence interval (0 for one value)."""
    x = np.asarray(values, dtype=np.float64)
    if len(x) < 2:
        return float(x.mean()), 0.0
    half = stats.t.ppf((1 + confidence) / 2, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x))
    return float(x.mean()), float(half)
