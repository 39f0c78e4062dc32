"""Prediction-powered inference for judge-based rates (rag_eval_pipeline/lib/judges/ppi.py).

The module is loaded from its file with importlib, so the test does not depend on the package's
``__init__`` files while the package is being restructured.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

MODULE_PATH = Path(__file__).parents[1] / "rag_eval_pipeline" / "lib" / "judges" / "ppi.py"


def _load() -> ModuleType:
    """Import ppi.py from its path (registered in sys.modules so its dataclass resolves)."""
    name = "_ppi_under_test"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, MODULE_PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


ppi = _load()
Z95 = 1.959963984540054


def test_hand_computed_small_case() -> None:
    # N = 100 judged claims: the judge says 1 on 75 of them. n = 4 labelled claims with
    # judge f_L = [1, 1, 1, 0] and human y_L = [1, 0, 1, 0]; so the N_u = 96 unlabelled claims
    # hold 75 - 3 = 72 ones and 24 zeros.
    judge_all = [1.0] * 75 + [0.0] * 25
    f_lab, y_lab = [1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 1.0, 0.0]

    # Classic PPI, λ = 1:
    #   mean_U(f) = 72/96 = 0.75
    #   rectifier y - f = [0, -1, 0, 0]: mean -0.25,
    #     s² = (3·0.25² + 0.75²) / 3 = 0.75 / 3 = 0.25
    #   θ̂ = 0.75 - 0.25 = 0.5
    #   s²_U(f) = 96·0.75·0.25 / 95 = 18/95
    #   Var = (18/95)/96 + 0.25/4 = 0.0019737 + 0.0625 = 0.0644737, se = 0.2539167
    #   CI = 0.5 ± 1.959964·0.2539167 = [0.0023324, 0.9976676]
    est = ppi.ppi_mean(judge_all, f_lab, y_lab, power_tuning=False)
    var = (18 / 95) / 96 + 0.25 / 4
    assert est.method == "ppi95" and est.lambda_ == 1.0 and est.reason is None
    assert est.value == pytest.approx(0.5, abs=1e-12)
    assert est.ci_low == pytest.approx(0.5 - Z95 * math.sqrt(var), abs=1e-9)
    assert est.ci_high == pytest.approx(0.5 + Z95 * math.sqrt(var), abs=1e-9)
    assert est.ci_low == pytest.approx(0.0023324, abs=1e-6)
    assert (est.n_labelled, est.n_judged) == (4, 100)
    assert est.small_sample  # 4 < 30 labels: the interval is indicative only

    # PPI++: λ̂ = ĉov_L(y, f) / ((1 + n/N_u) · s²_all(f))
    #   ȳ = 0.5, f̄_L = 0.75; (y-ȳ)(f-f̄) = [0.125, -0.125, 0.125, 0.375], sum 0.5,
    #     ĉov = 0.5/3 = 1/6
    #   s²_all(f) = 100·0.75·0.25/99 = 18.75/99
    #   λ̂ = (1/6) / ((1 + 4/96)·18.75/99) = 0.8448
    #   θ̂ = λ·0.75 + mean(y - λf) = 0.75λ + 0.5 - 0.75λ = 0.5
    #   rectifier y - λf = [1-λ, -λ, 1-λ, 0]
    lam = (1 / 6) / ((1 + 4 / 96) * (18.75 / 99))
    assert lam == pytest.approx(0.8448, abs=1e-12)
    tuned = ppi.ppi_mean(judge_all, f_lab, y_lab)
    assert tuned.method == "ppi++95"
    assert tuned.lambda_ == pytest.approx(lam, abs=1e-12)
    assert tuned.value == pytest.approx(0.5, abs=1e-12)
    r = np.array([1 - lam, -lam, 1 - lam, 0.0])
    var_tuned = lam**2 * (18 / 95) / 96 + r.var(ddof=1) / 4
    assert tuned.ci_high == pytest.approx(0.5 + Z95 * math.sqrt(var_tuned), abs=1e-9)
    assert var_tuned < var  # tuning never widens the estimated interval here

    # Judge only: p = 0.75 over N = 100; Wilson centre (0.75 + z²/200) / (1 + z²/100) and
    # half-width z/(1 + z²/100)·sqrt(0.75·0.25/100 + z²/40000).
    wilson = ppi.judge_only(judge_all)
    denom = 1 + Z95**2 / 100
    centre = (0.75 + Z95**2 / 200) / denom
    half = Z95 / denom * math.sqrt(0.75 * 0.25 / 100 + Z95**2 / 40000)
    assert wilson.value == 0.75 and wilson.method == "judge_only_wilson95"
    assert wilson.ci_low == pytest.approx(centre - half, abs=1e-12)
    assert wilson.ci_high == pytest.approx(centre + half, abs=1e-12)
    assert wilson.lambda_ is None and not wilson.small_sample


def test_classic_interval_against_independent_numpy_computation() -> None:
    rng = np.random.default_rng(20261015)
    big_n, n = 800, 120
    truth = (rng.random(big_n) < 0.7).astype(float)
    judge = np.where(rng.random(big_n) < 0.85, truth, 1 - truth)
    labelled = np.zeros(big_n, dtype=bool)
    labelled[rng.choice(big_n, n, replace=False)] = True

    # The formula, written out with numpy on the N - n unlabelled claims:
    f_u, f_l, y_l = judge[~labelled], judge[labelled], truth[labelled]
    theta = f_u.mean() - (f_l.mean() - y_l.mean())
    se = np.sqrt(f_u.var(ddof=1) / f_u.size + (y_l - f_l).var(ddof=1) / n)
    expected = (theta - Z95 * se, theta + Z95 * se)

    # judge_all in shuffled order: only the multiset of values matters.
    est = ppi.ppi_mean(rng.permutation(judge), f_l, y_l, power_tuning=False)
    assert est.value == pytest.approx(theta, abs=1e-12)
    assert (est.ci_low, est.ci_high) == pytest.approx(expected, abs=1e-12)
    assert est.lambda_ == 1.0 and not est.small_sample


# ppi_py cross-check. Data: deterministic integer patterns (no RNG, so the numbers below do not
# depend on a numpy version). Reference values computed with ppi-python 0.2.3
# (ppi_py.ppi_mean_pointestimate / ppi_mean_ci with alpha=0.05, lam=1 and lam=None) in a scratch
# virtualenv under /tmp; ppi_py is NOT a project dependency.
def _pattern_data() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    big_n = 600
    y = np.array([1.0 if (i * 37) % 100 < 80 else 0.0 for i in range(big_n)])
    f = np.array(
        [
            (1.0 if (i * 53) % 100 >= 4 else 0.0)
            if y[i] == 1
            else (1.0 if (i * 29) % 100 < 35 else 0.0)
            for i in range(big_n)
        ]
    )
    labelled = np.array([i % 4 == 0 for i in range(big_n)])
    return y, f, labelled


PPI_PY_0_2_3 = {
    "classic_point": 0.7866666666666666,
    "classic_ci": (0.7214333326649593, 0.8519000006683739),
    "tuned_lam": 0.4669737774627927,
    "tuned_point": 0.7937736829671628,
    "tuned_ci": (0.7389096516478018, 0.8486377142865238),
}


def _compare_with_ppi_py(reference: dict, y: np.ndarray, f: np.ndarray, lab: np.ndarray) -> None:
    """Agreement with ppi_py, exact up to its variance convention.

    ppi_py uses the 1/n (ddof=0) variance and covariance in the interval and in the covariance
    of λ̂ (its judge variance in λ̂ is ddof=1); this module uses ddof=1 throughout. So: point
    estimates at equal λ agree exactly, λ̂ here = λ̂_ppi_py · n/(n-1), and the squared half-width
    ratio lies in (1, n/(n-1)].
    """
    n = int(lab.sum())
    classic = ppi.ppi_mean(f, f[lab], y[lab], power_tuning=False)
    assert classic.value == pytest.approx(reference["classic_point"], abs=1e-12)
    ref_half = (reference["classic_ci"][1] - reference["classic_ci"][0]) / 2
    ratio = ((classic.ci_high - classic.ci_low) / 2 / ref_half) ** 2
    assert 1.0 < ratio <= n / (n - 1) + 1e-12
    mid = (classic.ci_high + classic.ci_low) / 2
    assert mid == pytest.approx(sum(reference["classic_ci"]) / 2, abs=1e-12)

    tuned = ppi.ppi_mean(f, f[lab], y[lab])
    assert tuned.lambda_ == pytest.approx(reference["tuned_lam"] * n / (n - 1), rel=1e-12)
    # θ̂(λ) is linear in λ; the line through ppi_py's two estimates, read at our λ:
    slope = (reference["classic_point"] - reference["tuned_point"]) / (1 - reference["tuned_lam"])
    assert tuned.value == pytest.approx(
        reference["classic_point"] - (1 - tuned.lambda_) * slope, abs=1e-12
    )


def test_agrees_with_recorded_ppi_py_values() -> None:
    y, f, lab = _pattern_data()
    assert (y.mean(), f.mean(), int(lab.sum())) == (0.8, 0.83, 150)
    _compare_with_ppi_py(PPI_PY_0_2_3, y, f, lab)


_PPI_PY_SCRIPT = """
import json, sys
import numpy as np
from ppi_py import ppi_mean_ci, ppi_mean_pointestimate
from ppi_py.ppi import _calc_lam_glm
data = json.load(sys.stdin)
y, f, lab = (np.array(data[k]) for k in ("y", "f", "lab"))
lab = lab.astype(bool)
Y, Yh, Yu = y[lab], f[lab], f[~lab]
p = ppi_mean_pointestimate(Y, Yh, Yu, lam=1)
lam = _calc_lam_glm(*((v - p).reshape(-1, 1) for v in (Y, Yh, Yu)), np.eye(1), clip=True)
c_lo, c_hi = ppi_mean_ci(Y, Yh, Yu, alpha=0.05, lam=1)
t_lo, t_hi = ppi_mean_ci(Y, Yh, Yu, alpha=0.05)
print(json.dumps({
    "classic_point": float(np.ravel(p)[0]),
    "classic_ci": [float(c_lo[0]), float(c_hi[0])],
    "tuned_lam": float(lam),
    "tuned_point": float(np.ravel(ppi_mean_pointestimate(Y, Yh, Yu))[0]),
    "tuned_ci": [float(t_lo[0]), float(t_hi[0])],
}))
"""


@pytest.mark.skipif(
    not os.environ.get("PPI_PY_PYTHON"),
    reason="set PPI_PY_PYTHON to a python with ppi-python installed (not a project dependency)",
)
def test_agrees_with_live_ppi_py() -> None:
    rng = np.random.default_rng(7)
    cases = [_pattern_data()]
    for big_n, n in ((500, 60), (3000, 200)):
        y = (rng.random(big_n) < 0.75).astype(float)
        f = np.where(rng.random(big_n) < 0.9, y, 1 - y)
        lab = np.zeros(big_n, dtype=bool)
        lab[rng.choice(big_n, n, replace=False)] = True
        cases.append((y, f, lab))
    for y, f, lab in cases:
        payload = json.dumps({"y": y.tolist(), "f": f.tolist(), "lab": lab.astype(int).tolist()})
        done = subprocess.run(
            [os.environ["PPI_PY_PYTHON"], "-c", _PPI_PY_SCRIPT],
            input=payload,
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        )
        _compare_with_ppi_py(json.loads(done.stdout), y, f, lab)


def test_coverage_simulation_ppi_covers_and_judge_only_does_not() -> None:
    # Population: true rate 0.8. The judge agrees with the truth 90% of the time, with asymmetric
    # errors: it misses 4% of true 1s but calls 34% of true 0s a 1, so
    #   agreement = 0.8·0.96 + 0.2·0.66 = 0.90, judge rate = 0.8·0.96 + 0.2·0.34 = 0.836,
    # a +0.036 bias that a judge-only interval over N = 2,000 claims (half-width ≈ 0.016) cannot
    # absorb. n = 150 claims labelled uniformly at random in each draw.
    true_rate, big_n, n, draws = 0.8, 2000, 150, 2000
    started = time.perf_counter()
    covered = {"ppi95": 0, "ppi++95": 0, "judge_only_wilson95": 0}
    widths = {key: 0.0 for key in covered}
    for seed in range(draws):
        rng = np.random.default_rng([20261015, seed])
        truth = (rng.random(big_n) < true_rate).astype(float)
        u = rng.random(big_n)
        judge = np.where(truth == 1, u < 0.96, u < 0.34).astype(float)
        labelled = rng.choice(big_n, n, replace=False)
        estimates = (
            ppi.ppi_mean(judge, judge[labelled], truth[labelled], power_tuning=False),
            ppi.ppi_mean(judge, judge[labelled], truth[labelled]),
            ppi.judge_only(judge),
        )
        for est in estimates:
            covered[est.method] += est.ci_low <= true_rate <= est.ci_high
            widths[est.method] += (est.ci_high - est.ci_low) / draws
    elapsed = time.perf_counter() - started
    coverage = {key: count / draws for key, count in covered.items()}
    print(f"coverage {coverage}, mean widths {widths}, {elapsed:.2f} s")
    assert 0.93 <= coverage["ppi95"] <= 0.97
    assert 0.93 <= coverage["ppi++95"] <= 0.97
    assert coverage["judge_only_wilson95"] < 0.5
    assert widths["ppi++95"] <= widths["ppi95"]


def test_no_labels_gives_no_ppi_estimate() -> None:
    est = ppi.ppi_mean([1, 0, 1], [], [])
    assert (est.value, est.ci_low, est.ci_high, est.lambda_) == (None, None, None, None)
    assert est.reason and "no human labels" in est.reason
    assert (est.n_labelled, est.n_judged, est.method) == (0, 3, "ppi++95")
    assert ppi.ppi_mean([], [], []).reason is not None


def test_one_label_gives_a_point_estimate_but_no_interval() -> None:
    # θ̂ = mean_U(f) - (f_1 - y_1) = 2/3 - (1 - 0) → clipped to 0; λ = 1 (cannot tune).
    est = ppi.ppi_mean([1, 1, 0, 1], [1], [0])
    assert est.value == 0.0 and est.lambda_ == 1.0
    assert est.ci_low is None and est.ci_high is None
    assert est.reason and "one human label" in est.reason


def test_every_claim_labelled() -> None:
    # N == n: PPI++ takes λ = 0, the human mean with its classical interval:
    #   y = [1, 0, 1, 1]: mean 0.75, s² = 0.25, se = sqrt(0.25/4) = 0.25
    #   CI = 0.75 ± 1.96·0.25 = [0.26, 1.24] → clipped to [0.26, 1].
    f, y = [1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 1.0, 1.0]
    tuned = ppi.ppi_mean(f, f, y)
    assert tuned.lambda_ == 0.0 and tuned.value == 0.75 and tuned.reason is None
    assert tuned.ci_low == pytest.approx(0.75 - Z95 * 0.25, abs=1e-12)
    assert tuned.ci_high == 1.0
    classic = ppi.ppi_mean(f, f, y, power_tuning=False)
    assert classic.value is None and classic.ci_low is None
    assert classic.reason and "N == n" in classic.reason


def test_zero_variance_all_equal() -> None:
    # Every verdict and every label 1: θ̂ = 1, estimated variance 0 → no interval.
    judge = [1.0] * 50
    for tuning in (True, False):
        est = ppi.ppi_mean(judge, judge[:40], [1.0] * 40, power_tuning=tuning)
        assert est.value == 1.0 and est.ci_low is None and est.ci_high is None
        assert est.reason and "variance is 0" in est.reason
    # The judge constant but labels varying: λ̂ = 0 for PPI++, the human mean 0.5.
    est = ppi.ppi_mean(judge, judge[:40], [1.0, 0.0] * 20)
    assert est.lambda_ == 0.0 and est.value == pytest.approx(0.5)
    assert est.reason is None and est.ci_low < 0.5 < est.ci_high


def test_one_unlabelled_claim_with_positive_lambda() -> None:
    est = ppi.ppi_mean([1, 0, 1, 0], [1, 0, 1], [1, 0, 0], power_tuning=False)
    assert est.value is not None and est.ci_low is None
    assert est.reason and "one unlabelled claim" in est.reason


def test_interval_is_clipped_to_unit_range() -> None:
    # Judge 1 on everything unlabelled, labels mostly agree: the upper bound would pass 1.
    judge_all = [1.0] * 200
    y = [1.0] * 29 + [0.0]
    est = ppi.ppi_mean(judge_all, [1.0] * 30, y, power_tuning=False)
    assert est.ci_high == 1.0 and 0.0 <= est.ci_low < est.value < 1.0


def test_invalid_inputs_raise() -> None:
    with pytest.raises(ValueError, match="not part of judge_all"):
        ppi.ppi_mean([1, 1, 1], [0], [0])
    with pytest.raises(ValueError, match="not part of judge_all"):
        ppi.ppi_mean([1, 0], [0, 0], [0, 0])
    with pytest.raises(ValueError, match="human_labelled"):
        ppi.ppi_mean([1, 0], [1], [1, 0])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        ppi.ppi_mean([1, 2], [1], [1])
    with pytest.raises(ValueError, match="level"):
        ppi.ppi_mean([1, 0], [1], [1], level=95)
    with pytest.raises(ValueError, match="0/1"):
        ppi.judge_only([0.5, 1.0])


def test_judge_only_edge_cases_and_level() -> None:
    empty = ppi.judge_only([])
    assert empty.value is None and empty.reason == "no judged claims"
    all_ones = ppi.judge_only([True] * 20)
    assert all_ones.value == 1.0 and all_ones.ci_high == 1.0 and all_ones.ci_low < 1.0
    assert ppi.judge_only([1, 0], level=0.9).method == "judge_only_wilson90"
    assert ppi.ppi_mean([1, 0, 1], [1, 0], [1, 0], level=0.9).method == "ppi++90"


def test_verdict_indicator() -> None:
    verdicts = ["ENTAILED", "CONTRADICTED", "UNSUPPORTED", "ENTAILED"]
    assert ppi.verdict_indicator(verdicts, "ENTAILED").tolist() == [1, 0, 0, 1]
    assert ppi.verdict_indicator(verdicts, {"CONTRADICTED", "UNSUPPORTED"}).tolist() == [0, 1, 1, 0]
    with pytest.raises(ValueError, match="unknown verdicts"):
        ppi.verdict_indicator(["ENTAILED", "entailed"], "ENTAILED")
