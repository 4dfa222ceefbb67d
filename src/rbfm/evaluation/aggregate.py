"""Aggregate statistics: interquartile mean and confidence intervals."""

from __future__ import annotations

from typing import Any

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


def trimmed_mean(x: np.ndarray) -> float:
    """`iqm` of all values (scipy.stats.trim_mean(x, 0.25, axis=None), rliable's IQM) without
    scipy's per-call overhead, which dominates thousands of bootstrap resamples."""
    flat = np.sort(np.asarray(x, dtype=np.float64), axis=None)
    cut = int(0.25 * flat.size)
    return float(flat[cut : flat.size - cut].mean())


def _rliable() -> Any:
    """rliable's library module, imported on first use (it is slow to import)."""
    try:
        from rliable import library
    except (ImportError, TypeError) as e:  # TypeError: arch 7.x under pandas 3
        raise ImportError(
            f"rliable cannot be imported ({type(e).__name__}: {e}); it needs arch 7.x with "
            "pandas < 3 (arch 8 drops the random_state argument rliable 1.2.0 passes)"
        ) from e
    return library


def stratified_iqm(
    scores: dict[str, np.ndarray], reps: int = 2000, seed: int = 0
) -> dict[str, tuple[float, float, float]]:
    """Per label, the IQM of a (runs x tasks) score matrix and rliable's stratified-bootstrap
    95% percentile CI (runs resampled within each task) over `reps` resamples: (iqm, low,
    high). Seeded: the same scores give the same interval."""
    rly = _rliable()

    def func(x: np.ndarray) -> np.ndarray:
        return np.array([trimmed_mean(x)])

    # rliable draws its resamples from numpy's global RNG (its random_state argument only
    # reaches arch, which then warns that it is deprecated): seed it, then restore it.
    state = np.random.get_state()
    try:
        np.random.seed(seed)
        points, intervals = rly.get_interval_estimates(scores, func, reps=reps)
    finally:
        np.random.set_state(state)
    return {
        k: (float(points[k][0]), float(intervals[k][0, 0]), float(intervals[k][1, 0]))
        for k in scores
    }
