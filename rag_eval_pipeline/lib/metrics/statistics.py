"""Intervals and paired tests, computed from counts and per-item values.

- Wilson score interval for a proportion (z = 1.96 for 95%): the seed figure 38/200 gives
  0.1417 to 0.2500.
- Percentile bootstrap for a mean, seeded, resampling items with replacement.
"""

import math

import numpy as np

Z95 = 1.959963984540054


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
    return max(0.0, centre - half), min(1.0, centre + half)


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


def bootstrap_mean_interval(
    values: np.ndarray, *, seed: int = 20261001, resamples: int = 1000, level: float = 0.95
) -> tuple[float | None, float | None]:
    """Percentile bootstrap interval of the mean (items resampled with replacement).

    ``(None, None)`` when there are no values; a single value gives a zero-width interval.
    """
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        return None, None
    means = resampled_means(values, seed=seed, resamples=resamples)
    alpha = (1 - level) / 2
    low, high = np.quantile(means, [alpha, 1 - alpha])
    return float(low), float(high)
