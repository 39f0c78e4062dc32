"""Intervals and paired tests, computed from counts and per-item values.

- Wilson score interval for a proportion (z = 1.96 for 95%): the seed figure 38/200 gives
  0.1417 to 0.2500.
- Percentile bootstrap for a mean, seeded, resampling items with replacement; a mean whose
  items all sit on a bound of [0, 1] (every value 1.0, or every value 0.0) instead gets the
  Wilson interval of its n items (``mean_interval_method``).

Every interval contains its point estimate: floating point can put a bound a hair on the wrong
side of it (a proportion of 1.0 has a Wilson upper bound of 0.9999999999999999), so bounds are
clamped to the value, and a perfect, a zero or a single-item score gives a proper interval.
"""

import math
from collections.abc import Sequence
from statistics import NormalDist

import numpy as np

Z95 = 1.959963984540054
# Resampled indices kept for the next group of the same size (at most 64 MB of them).
MAX_SHARED_DRAWS = 8_000_000


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float | None, float | None]:
    """Wilson score interval; ``(None, None)`` when n is 0.

    centre = (p + z^2/2n) / (1 + z^2/n), half-width = z sqrt(p(1-p)/n + z^2/4n^2) / (1 + z^2/n).
    """
    if n == 0:
        return None, None
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return clamp_interval(p, max(0.0, centre - half), min(1.0, centre + half))


def clamp_interval(
    value: float | None, low: float | None, high: float | None
) -> tuple[float | None, float | None]:
    """``(low, high)`` widened, if needed, to contain ``value`` (unchanged when any is None)."""
    if value is None or low is None or high is None or math.isnan(value):
        return low, high
    return min(low, value), max(high, value)


def resampled_means(values: np.ndarray, *, seed: int, resamples: int) -> np.ndarray:
    """Means of ``resamples`` bootstrap samples of ``values`` (items drawn with replacement),
    seeded; drawn in blocks so memory stays bounded for large n."""
    n = values.size
    rng = np.random.default_rng(seed)
    means = np.empty(resamples)
    block = max(1, min(resamples, 2_000_000 // n))
    for start in range(0, resamples, block):
        stop = min(resamples, start + block)
        means[start:stop] = values[rng.integers(0, n, size=(stop - start, n))].mean(axis=1)
    return means


def boundary_value(values: np.ndarray) -> float | None:
    """1.0 or 0.0 when every one of ``values`` (at least one) is exactly that bound, else None.

    Resampling such items can only give that value again, so a percentile bootstrap of them is
    the zero-width interval [1, 1] (or [0, 0]) however few they are: 184 perfect items would
    read as a rate known exactly. Their Wilson interval (all n items successes, or none) is the
    honest one, and a valid one for a mean of values in [0, 1]: the mean is at least the share
    of items at 1.0 (at most one minus the share at 0.0), which the Wilson bound covers."""
    if values.size == 0:
        return None
    first = float(values[0])
    if first not in (0.0, 1.0) or not bool(np.all(values == first)):
        return None
    return first


def mean_interval_method(
    values: np.ndarray, bootstrap: str = "bootstrap95", wilson: str = "wilson95"
) -> str:
    """The ``interval_method`` of ``bootstrap_mean_interval(values)``: ``wilson`` for items all
    at 1.0 or all at 0.0 (``boundary_value``), else ``bootstrap`` (the caller's names)."""
    return wilson if boundary_value(np.asarray(values, dtype=np.float64)) is not None else bootstrap


def bootstrap_mean_interval(
    values: np.ndarray, *, seed: int = 20261001, resamples: int = 1000, level: float = 0.95
) -> tuple[float | None, float | None]:
    """Percentile bootstrap interval of the mean (items resampled with replacement).

    ``(None, None)`` when there are no values. Items all at 1.0 or all at 0.0 get the Wilson
    interval of n successes (or none) in n (``boundary_value``: a bootstrap of them has zero
    width); any other single value, or values all equal to one inside (0, 1), still give a
    zero-width interval, as nothing bounds their spread.
    """
    return bootstrap_mean_intervals([values], seed=seed, resamples=resamples, level=level)[0]


def bootstrap_mean_intervals(
    groups: Sequence[np.ndarray],
    *,
    seed: int = 20261001,
    resamples: int = 1000,
    level: float = 0.95,
) -> list[tuple[float | None, float | None]]:
    """``bootstrap_mean_interval`` of each group, drawing the resampled item indices once per
    group size: the draws depend only on the seed and the size, so every interval is exactly the
    one computed alone, and many measures over the same items cost one set of draws."""
    alpha = (1 - level) / 2
    z = Z95 if level == 0.95 else NormalDist().inv_cdf(1 - alpha)
    draws: dict[int, list[np.ndarray]] = {}
    intervals: list[tuple[float | None, float | None]] = []
    for group in groups:
        values = np.asarray(group, dtype=np.float64)
        n = values.size
        if n == 0:
            intervals.append((None, None))
            continue
        bound = boundary_value(values)
        if bound is not None:
            intervals.append(wilson_interval(round(bound * n), n, z))
            continue
        blocks = draws.get(n) or _draws(n, seed=seed, resamples=resamples)
        if n * resamples <= MAX_SHARED_DRAWS:
            draws = {n: blocks}
        means = np.concatenate([values[block].mean(axis=1) for block in blocks])
        low, high = np.quantile(means, [alpha, 1 - alpha])
        intervals.append(clamp_interval(float(values.mean()), float(low), float(high)))
    return intervals


def _draws(n: int, *, seed: int, resamples: int) -> list[np.ndarray]:
    """The item indices ``resampled_means`` draws, block by block."""
    rng = np.random.default_rng(seed)
    block = max(1, min(resamples, 2_000_000 // n))
    return [
        rng.integers(0, n, size=(min(resamples, start + block) - start, n))
        for start in range(0, resamples, block)
    ]
