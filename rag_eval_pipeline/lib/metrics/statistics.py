"""Intervals and paired tests, computed from counts and per-item values.

- Wilson score interval for a proportion (z = 1.96 for 95%): the seed figure 38/200 gives
  0.1417 to 0.2500.
- Percentile bootstrap for a mean, seeded, resampling items with replacement; a mean that is a
  proportion (every item 0 or 1: R@5 of questions with one relevant passage each, as Success@5
  of them) or whose items all have the same value (every one 1/3) instead gets the Wilson
  interval of that rate over its n items (``proportion_successes``, ``mean_interval_method``).

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


def wilson_interval(successes: float, n: int, z: float = Z95) -> tuple[float | None, float | None]:
    """Wilson score interval; ``(None, None)`` when n is 0. ``successes`` may be fractional
    (``proportion_successes``: n items all at one rate p count as p * n successes).

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


def proportion_successes(values: np.ndarray) -> float | None:
    """The successes over the ``values.size`` items (at least one) of which their mean is a
    proportion, else None: when every value is 0 or 1, the count of ones (exactly, not the mean
    times n); when every value is the same p in [0, 1], p * n.

    A mean of 0/1 outcomes is a proportion, and gets the interval proportions get: R@5 of
    questions with one relevant passage each is, item by item, their Success@5, and carries the
    same interval (a percentile bootstrap of a few misses among many items reaches 1.0 whenever
    a resample holds none of them). Resampling items that all have one value can only give that
    value again, so a percentile bootstrap of them is a zero-width interval however few they
    are: 184 perfect items would read as a rate known exactly, and so would six questions that
    each have one relevant passage, found in the top three (P@3 = 1/3 for every one). Nothing in
    the items bounds their spread but [0, 1] itself, and of the values in [0, 1] with mean p, a
    0/1 outcome varies most (variance p(1 - p)): the Wilson interval of rate p over the n items
    is the honest interval for them, wide for few items and narrowing as they grow."""
    if values.size == 0:
        return None
    if bool(np.all((values == 0.0) | (values == 1.0))):
        return float(np.count_nonzero(values))
    first = float(values[0])
    if not 0.0 <= first <= 1.0 or not bool(np.all(values == first)):
        return None
    return first * values.size


def mean_interval_method(
    values: np.ndarray, bootstrap: str = "bootstrap95", wilson: str = "wilson95"
) -> str:
    """The ``interval_method`` of ``bootstrap_mean_interval(values)``: ``wilson`` for items that
    are a proportion (``proportion_successes``), else ``bootstrap`` (the caller's names)."""
    values = np.asarray(values, dtype=np.float64)
    return wilson if proportion_successes(values) is not None else bootstrap


def bootstrap_mean_interval(
    values: np.ndarray, *, seed: int = 20261001, resamples: int = 1000, level: float = 0.95
) -> tuple[float | None, float | None]:
    """Percentile bootstrap interval of the mean (items resampled with replacement).

    ``(None, None)`` when there are no values. Items all of one value p in [0, 1] (all 1.0, all
    0.0, all 1/3; one item alone) get the Wilson interval of rate p over their n items
    (``proportion_successes``: a bootstrap of them has zero width), and so do items all 0 or 1, a
    proportion (its Wilson interval).
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
        successes = proportion_successes(values)
        if successes is not None:
            intervals.append(wilson_interval(successes, n, z))
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
