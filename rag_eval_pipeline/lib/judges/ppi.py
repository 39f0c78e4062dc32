"""Prediction-powered inference (PPI, PPI++) for judge-based claim rates.

The judge gives a verdict on all ``N`` judged claims; people labelled a subset of ``n`` of them.
For a rate such as faithfulness (share of claims ENTAILED), the contradicted-claim rate, the
unsupported-claim rate or citation support (share of citations supported), each claim becomes a
0/1 outcome: ``f`` is the judge's value (1 when the judge gives the verdict of interest) and ``y``
the human value on the same claim. This module estimates the *human* rate ``θ = E[y]`` with a
confidence interval, using the judge on every claim and the human labels to correct its bias.

Estimators (``z`` is the standard normal quantile ``Φ⁻¹(1 − (1 − level)/2)``, 1.96 at 95%)
---------------------------------------------------------------------------------------------
``judge_only``: the judge's mean ``f̄`` over all ``N`` judged claims with a Wilson score interval,
``(f̄ + z²/2N ± z·sqrt(f̄(1 − f̄)/N + z²/4N²)) / (1 + z²/N)``. It is an interval for the *judge's*
rate, not the human one: every disagreement between the judge and people shifts it, and no
amount of judged claims shrinks that bias.

``ppi_mean`` (Angelopoulos, Bates, Fannjiang, Jordan, Zrnic, "Prediction-powered inference",
Science 2023; PPI++ power tuning: Angelopoulos, Duchi, Zrnic, "PPI++: Efficient
prediction-powered inference", arXiv:2311.01453, 2023). With ``L`` the ``n`` labelled claims and
``U`` the ``N_u = N − n`` judged claims *without* a human label::

    θ̂     = λ·mean_U(f) − (λ·mean_L(f) − mean_L(y))           # imputed mean + rectifier
    Var̂(θ̂) = λ²·s²_U(f) / N_u + s²_L(y − λ·f) / n
    CI     = [θ̂ − z·sqrt(Var̂), θ̂ + z·sqrt(Var̂)] ∩ [0, 1]     # normal approximation

``s²`` is the sample variance with the ``n − 1`` (``N_u − 1``) divisor. Classic PPI takes
``λ = 1``. PPI++ (``power_tuning=True``) takes the ``λ`` that minimises ``Var̂(θ̂)``::

    λ̂ = clip( ĉov_L(y, f) / ((1 + n/N_u) · s²_{L∪U}(f)),  0, 1 )

(setting the derivative of ``λ²σ²_f/N_u + (σ²_y − 2λ·cov + λ²σ²_f)/n`` to zero; the judge's
variance is estimated on all ``N`` judged claims, the covariance on the labelled ones). ``λ = 0``
is the classical estimate from the human labels alone, so PPI++ is never much worse than
ignoring the judge, and ``λ = 1`` is classic PPI. The point estimate is clipped to ``[0, 1]``
like the interval (a rate cannot leave it; clipping only moves the estimate towards the truth).

Which claims are "unlabelled": the ``N − n`` judged claims without a human label
---------------------------------------------------------------------------------
The papers assume a labelled sample of ``(f, y)`` pairs and a *separate*, independent unlabelled
sample of ``f``. Here both come from one set of ``N`` judged claims, so the labelled claims are
removed from ``judge_all`` (as a multiset of values: ``judge_labelled`` must be the judge's values
on exactly the labelled claims, which are among the ``N``) and the imputed mean is over the
remaining ``N_u = N − n``. Why this is valid: if the judged claims are i.i.d. draws from the
system's claim distribution and the labelled subset is a uniform random sample of them, drawn
independently of the verdicts, then given the two sizes the labelled pairs are an i.i.d. sample
and the unlabelled claims are an independent i.i.d. sample of the same distribution -- exactly the
setting of the PPI theorem, so the variance formula above holds as stated, with no covariance term
between the two means. (Using all ``N`` claims for the imputed mean is the survey-sampling
difference estimator; it is also unbiased for the rate over the ``N`` judged claims, but the
labelled claims then enter both means and the formula above is only approximately its variance.)
The target is the human rate of the claim population the ``N`` judged claims were drawn from.

Assumptions -- the interval means nothing without them
------------------------------------------------------
* The labelled claims are a uniform random sample of the judged claims, drawn independently of the
  labels and of the verdicts (e.g. a seeded uniform draw by claim id). A subset chosen
  non-randomly -- the claims the judge was unsure of, the first claims of each item, the claims a
  reviewer found interesting, a stratified sample used without its weights -- is NOT corrected
  for: the rectifier is then biased and the interval can miss at any rate. Neither is a human
  label set that is itself wrong.
* The judge is fixed: the same model, prompt and configuration on labelled and unlabelled claims,
  and it was not trained, tuned, prompted with or calibrated on these labelled claims (if it was,
  the rectifier on them is optimistic). Labels for one run of the judge do not carry over to
  another judge configuration.
* Outcomes are 0/1 or bounded in ``[0, 1]``; the interval is a normal (CLT) approximation. It needs
  enough labels -- say ``n ≥ 30`` (:data:`MIN_LABELS_FOR_NORMAL_CI`) and not all of the few
  events in one group. Below 30 labels the function still returns the normal interval (it
  neither refuses nor switches method) and :attr:`Estimate.small_sample` is ``True``: treat the
  interval as indicative only. Near a rate of 0 or 1 with few events the normal interval is too
  narrow whatever ``n`` is.

Edge cases (``reason`` says why something is missing; ``value`` may still be present)
--------------------------------------------------------------------------------------
* ``n == 0``: no PPI estimate -- ``value``, ``ci_low``, ``ci_high``, ``lambda_`` are ``None``.
* ``n == 1``: the rectifier's variance cannot be estimated and PPI++ cannot tune ``λ``; the point
  estimate with ``λ = 1`` is returned, the interval is ``None``.
* ``N == n`` (every judged claim labelled): no unlabelled claims. PPI++ takes ``λ = 0`` (the limit
  of ``λ̂`` as ``N_u → 0``) and returns the classical interval from the human labels; classic PPI
  (``λ = 1``) has no imputed mean and returns ``None`` values with a reason.
* ``N_u == 1`` with ``λ > 0``: the judge's variance on the unlabelled claim cannot be estimated; the
  interval is ``None``.
* The judge gives one value on all ``N`` claims (``s²(f) = 0``): ``λ`` cannot be tuned and any
  ``λ`` gives the same estimate, the human mean; PPI++ reports ``λ = 0``.
* Estimated variance 0 (e.g. every label and every verdict the same): the point estimate is
  returned, the interval is ``None`` -- a zero-width normal interval would claim certainty that
  ``n`` labels cannot give.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

ENTAILED = "ENTAILED"
CONTRADICTED = "CONTRADICTED"
UNSUPPORTED = "UNSUPPORTED"
VERDICTS = frozenset({ENTAILED, CONTRADICTED, UNSUPPORTED})

MIN_LABELS_FOR_NORMAL_CI = 30
"""Below this many human labels the normal-approximation interval is indicative only."""


@dataclass(frozen=True)
class Estimate:
    """A rate with its interval and how it was obtained.

    ``value``/``ci_low``/``ci_high`` are in ``[0, 1]`` or ``None``; ``reason`` is ``None`` unless
    something could not be computed (then it says what and why). ``method`` is
    ``"judge_only_wilson95"``, ``"ppi95"`` or ``"ppi++95"`` (the number follows ``level``).
    ``lambda_`` is the PPI weight on the judge (1 for classic PPI, tuned for PPI++, ``None`` for
    judge-only or when nothing was estimated).
    """

    value: float | None
    ci_low: float | None
    ci_high: float | None
    n_labelled: int
    n_judged: int
    method: str
    lambda_: float | None
    reason: str | None = None

    @property
    def small_sample(self) -> bool:
        """True for a PPI estimate from fewer than :data:`MIN_LABELS_FOR_NORMAL_CI` labels."""
        is_ppi = not self.method.startswith("judge_only")
        return is_ppi and self.n_labelled < MIN_LABELS_FOR_NORMAL_CI


def verdict_indicator(verdicts: Iterable[str], positive: str | Collection[str]) -> np.ndarray:
    """0/1 values for a rate: 1 where the verdict is ``positive`` (one verdict or several).

    ``verdict_indicator(v, "ENTAILED")`` gives faithfulness, ``"CONTRADICTED"`` the
    contradicted-claim rate, ``"UNSUPPORTED"`` the unsupported-claim rate. Verdicts outside
    ENTAILED / CONTRADICTED / UNSUPPORTED raise ``ValueError``. (Citation support is already 0/1:
    pass it to :func:`ppi_mean` directly.)
    """
    wanted = {positive} if isinstance(positive, str) else set(positive)
    values = list(verdicts)
    unknown = (wanted | set(values)) - VERDICTS
    if unknown:
        raise ValueError(f"unknown verdicts {sorted(unknown)}; expected {sorted(VERDICTS)}")
    return np.fromiter((v in wanted for v in values), dtype=float, count=len(values))


def judge_only(judge_values: Sequence[float] | np.ndarray, *, level: float = 0.95) -> Estimate:
    """The judge's own rate over all judged claims, with a Wilson score interval.

    ``judge_values`` are 0/1 (or booleans), one per judged claim. Returns the mean ``f̄`` and
    ``(f̄ + z²/2N ± z·sqrt(f̄(1 − f̄)/N + z²/4N²)) / (1 + z²/N)``. This is an interval for the rate
    *the judge* assigns; it is biased for the human rate by the judge's errors (use
    :func:`ppi_mean` with human labels for that). No judged claims: ``None`` values, with reason.
    """
    _check_level(level)
    method = _method_name("judge_only_wilson", level)
    f = _as_unit_array(judge_values, "judge_values")
    if not np.isin(f, (0.0, 1.0)).all():
        raise ValueError("judge_only needs 0/1 values (the Wilson interval is for proportions)")
    big_n = int(f.size)
    if big_n == 0:
        return Estimate(None, None, None, 0, 0, method, None, "no judged claims")
    z = _z(level)
    p = float(f.mean())
    denom = 1.0 + z * z / big_n
    centre = (p + z * z / (2 * big_n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / big_n + z * z / (4 * big_n * big_n))
    return Estimate(p, max(0.0, centre - half), min(1.0, centre + half), 0, big_n, method, None)


def ppi_mean(
    judge_all: Sequence[float] | np.ndarray,
    judge_labelled: Sequence[float] | np.ndarray,
    human_labelled: Sequence[float] | np.ndarray,
    *,
    level: float = 0.95,
    power_tuning: bool = True,
) -> Estimate:
    """Prediction-powered estimate and interval for the human rate of a 0/1 (or [0, 1]) outcome.

    ``judge_all``: the judge's value on every one of the ``N`` judged claims, the labelled ones
    included. ``judge_labelled`` / ``human_labelled``: the judge's and the person's value on each
    of the ``n`` labelled claims, aligned. The labelled claims are taken out of ``judge_all`` (as
    a multiset; ``ValueError`` if ``judge_labelled`` is not part of it) and the imputed mean runs
    over the other ``N − n`` claims -- see the module docstring for why.

    ``θ̂ = λ·mean_U(f) − (λ·mean_L(f) − mean_L(y))``,
    ``Var̂ = λ²·s²_U(f)/(N − n) + s²_L(y − λf)/n``, interval ``θ̂ ± z·sqrt(Var̂)`` clipped to
    ``[0, 1]``; ``λ = 1`` (classic PPI, method ``"ppi95"``) or, with ``power_tuning``,
    ``λ̂ = clip(ĉov_L(y, f) / ((1 + n/(N − n))·s²_all(f)), 0, 1)`` (PPI++, method ``"ppi++95"``).

    Valid only if the labelled claims are a uniform random sample of the judged ones, drawn
    independently of the labels, and the judge is fixed (not trained or tuned on those labels);
    a non-random labelled subset is not corrected for. Normal approximation: with fewer than 30
    labels the interval is still returned but ``small_sample`` is ``True``. ``n == 0``, ``n == 1``,
    ``N == n``, zero variance: see the module docstring; ``reason`` says what is missing.
    """
    _check_level(level)
    method = _method_name("ppi++" if power_tuning else "ppi", level)
    f_all = _as_unit_array(judge_all, "judge_all")
    f_lab = _as_unit_array(judge_labelled, "judge_labelled")
    y_lab = _as_unit_array(human_labelled, "human_labelled")
    if f_lab.size != y_lab.size:
        raise ValueError(
            f"judge_labelled has {f_lab.size} values but human_labelled has {y_lab.size}"
        )
    n, big_n = int(y_lab.size), int(f_all.size)
    if n > big_n:
        raise ValueError(f"{n} labelled claims but only {big_n} judged claims")
    f_unl = _remove_labelled(f_all, f_lab)
    n_unl = big_n - n

    def result(value: float | None, lam: float | None, reason: str | None = None) -> Estimate:
        shown = None if value is None else _clip01(value)
        return Estimate(shown, None, None, n, big_n, method, lam, reason)

    if n == 0:
        return result(None, None, "no human labels: a PPI estimate needs at least one")

    if not power_tuning:
        lam = 1.0
    elif n_unl == 0:
        lam = 0.0  # lim λ̂ as N_u → 0: the imputed mean has no claims to average
    elif n < 2:
        lam = 1.0  # one label: no covariance to tune λ with
    elif float(np.var(f_all, ddof=1)) == 0.0:
        lam = 0.0  # the judge says the same on every claim: it carries no information
    else:
        cov = float(np.cov(y_lab, f_lab, ddof=1)[0, 1])
        var_f = float(np.var(f_all, ddof=1))
        lam = min(1.0, max(0.0, cov / ((1.0 + n / n_unl) * var_f)))

    if n_unl == 0 and lam != 0.0:
        return result(
            None,
            lam,
            "every judged claim is labelled (N == n): no unlabelled claims for the imputed mean; "
            "use power_tuning=True (λ = 0, the human mean) instead",
        )

    rectified = y_lab - lam * f_lab
    imputed_mean = lam * float(f_unl.mean()) if n_unl else 0.0
    value = imputed_mean + float(rectified.mean())

    if n < 2:
        return result(value, lam, "one human label: the rectifier's variance cannot be estimated")
    var_imputed = 0.0
    if lam != 0.0:
        if n_unl < 2:
            return result(
                value, lam, "one unlabelled claim: the judge's variance cannot be estimated"
            )
        var_imputed = lam * lam * float(np.var(f_unl, ddof=1)) / n_unl
    variance = var_imputed + float(np.var(rectified, ddof=1)) / n
    if variance <= 0.0:
        return result(
            value,
            lam,
            "estimated variance is 0 (labels and verdicts leave no spread): a zero-width normal "
            "interval would overstate certainty",
        )
    half = _z(level) * math.sqrt(variance)
    return Estimate(
        _clip01(value),
        _clip01(value - half),
        _clip01(value + half),
        n,
        big_n,
        method,
        lam,
    )


def _remove_labelled(f_all: np.ndarray, f_lab: np.ndarray) -> np.ndarray:
    """``f_all`` minus the multiset ``f_lab``: the judge's values on the unlabelled claims."""
    values_all, counts_all = np.unique(f_all, return_counts=True)
    values_lab, counts_lab = np.unique(f_lab, return_counts=True)
    where = np.searchsorted(values_all, values_lab)
    found = where < values_all.size
    found[found] = values_all[where[found]] == values_lab[found]
    if not found.all() or (counts_lab > counts_all[where]).any():
        raise ValueError(
            "judge_labelled is not part of judge_all: judge_all must hold the judge's value on "
            "every judged claim, the labelled claims included"
        )
    remaining = counts_all.copy()
    remaining[where] -= counts_lab
    return np.repeat(values_all, remaining)


def _as_unit_array(values: Sequence[float] | np.ndarray, name: str) -> np.ndarray:
    """A 1-D float array of finite values in [0, 1] (booleans become 0/1)."""
    array = np.asarray(values, dtype=float)
    if array.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {array.shape}")
    if array.size and (not np.isfinite(array).all() or array.min() < 0 or array.max() > 1):
        raise ValueError(f"{name} must hold finite values in [0, 1]")
    return array


def _check_level(level: float) -> None:
    """``level`` must be a confidence level strictly between 0 and 1."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")


def _z(level: float) -> float:
    """Two-sided standard normal quantile for ``level``."""
    return NormalDist().inv_cdf(1.0 - (1.0 - level) / 2.0)


def _method_name(stem: str, level: float) -> str:
    """``stem`` and the level in percent: ``ppi95``, ``ppi++95``, ``judge_only_wilson95``."""
    return f"{stem}{level * 100:g}"


def _clip01(x: float) -> float:
    """``x`` clipped to [0, 1]."""
    return min(1.0, max(0.0, x))
