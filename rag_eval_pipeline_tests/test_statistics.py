"""Intervals (``lib.statistics``) and how ``retrieval_metrics.aggregate`` attaches them.

Needs no public data: the seed figures of DESIGN.md (Wilson 38/200 -> 0.1417 to 0.2500) and a
cross-check against statsmodels; the seeded bootstrap is reproducible, changes with the seed and
contains the mean; ``aggregate`` gives proportions the Wilson interval and means the bootstrap.
"""

import numpy as np
import polars as pl
import pytest
from statsmodels.stats.proportion import proportion_confint

from rag_eval_pipeline.lib.metrics.retrieval import aggregate, per_query
from rag_eval_pipeline.lib.metrics.statistics import (
    bootstrap_mean_interval,
    mean_interval_method,
    wilson_interval,
)


def seed_run() -> tuple[pl.DataFrame, pl.DataFrame]:
    """200 queries, one gold passage each, found at rank 1 for 110, rank 2 for 20, rank 3 for
    12, rank 4 for 6, rank 5 for 4, and outside the top 5 (rank 6) for 48."""
    gold_ranks = [1] * 110 + [2] * 20 + [3] * 12 + [4] * 6 + [5] * 4 + [6] * 48
    run_rows, qrels_rows = [], []
    for number, gold_rank in enumerate(gold_ranks):
        query = f"q{number:03d}"
        for rank in range(1, 7):
            run_rows.append((query, f"{query}-p{rank}", 10.0 - rank))
        qrels_rows.append((query, f"{query}-p{gold_rank}", 3))
    run = pl.DataFrame(run_rows, schema=["query_id", "doc_id", "score"], orient="row")
    qrels = pl.DataFrame(qrels_rows, schema=["query_id", "doc_id", "grade"], orient="row")
    return run, qrels


def test_seed_wilson_interval_and_statsmodels():
    low, high = wilson_interval(38, 200)
    assert (round(low, 4), round(high, 4)) == (0.1417, 0.2500)
    for successes, n in [(38, 200), (0, 10), (10, 10), (1, 3), (152, 200)]:
        reference = proportion_confint(successes, n, alpha=0.05, method="wilson")
        assert wilson_interval(successes, n) == pytest.approx(reference, abs=1e-9)
    assert wilson_interval(0, 0) == (None, None)


def test_bootstrap_interval_contains_the_mean_and_is_reproducible():
    run, qrels = seed_run()
    reciprocal_ranks = per_query(run, qrels, ["RR@5"])["value"].to_numpy()
    mean = reciprocal_ranks.mean()
    low, high = bootstrap_mean_interval(reciprocal_ranks, seed=7)
    assert low < mean < high
    assert 0.05 < high - low < 0.2  # n = 200: a real spread, not a degenerate interval
    assert bootstrap_mean_interval(reciprocal_ranks, seed=7) == (low, high)
    assert bootstrap_mean_interval(reciprocal_ranks, seed=8) != (low, high)
    assert bootstrap_mean_interval(np.array([]), seed=7) == (None, None)
    assert bootstrap_mean_interval(np.array([0.25]), seed=7) == wilson_interval(0.25, 1)


def test_aggregate_gives_wilson_to_proportions_and_bootstrap_to_means():
    run, qrels = seed_run()
    values = per_query(run, qrels, ["Success@5", "RR@5"])
    rows = {row["measure"]: row for row in aggregate(values, seed=7).iter_rows(named=True)}
    # 152 of 200 queries find their gold passage in the top 5.
    success = rows["Success"]
    assert (success["value"], success["n"]) == (pytest.approx(0.76, abs=1e-12), 200)
    assert (success["ci_low"], success["ci_high"]) == wilson_interval(152, 200)
    reciprocal_rank = rows["RR"]
    assert reciprocal_rank["value"] == pytest.approx(0.6315, abs=1e-12)
    rr_values = values.filter(pl.col("measure") == "RR")["value"].to_numpy()
    assert (reciprocal_rank["ci_low"], reciprocal_rank["ci_high"]) == bootstrap_mean_interval(
        rr_values, seed=7
    )
    no_intervals = aggregate(values, intervals=False)
    assert no_intervals["ci_low"].is_null().all() and no_intervals["ci_high"].is_null().all()


def test_a_mean_of_items_all_at_one_bound_gets_the_wilson_interval_of_its_items():
    # 184 perfect items: a bootstrap of them can only give 1.0, which would read as a rate
    # known exactly; the Wilson interval of 184 successes in 184 is what they show.
    for n in (1, 3, 184):
        for bound in (0.0, 1.0):
            values = np.full(n, bound)
            reference = proportion_confint(round(bound * n), n, alpha=0.05, method="wilson")
            low, high = bootstrap_mean_interval(values, seed=7)
            assert (low, high) == pytest.approx(reference, abs=1e-12)
            assert low <= bound <= high and high - low > 0.01
            assert mean_interval_method(values) == "wilson95"
    # By hand: with p = 1 the Wilson lower bound is n / (n + z^2) = 184 / 187.8415 = 0.97955.
    assert bootstrap_mean_interval(np.ones(184))[0] == pytest.approx(184 / (184 + 1.959964**2))
    assert round(bootstrap_mean_interval(np.ones(184))[0], 5) == 0.97955
    low, high = bootstrap_mean_interval(np.ones(40), level=0.9)
    assert (low, high) == pytest.approx(
        proportion_confint(40, 40, alpha=0.1, method="wilson"), abs=1e-12
    )
    # Anything else is bootstrapped as before: a mix with one item off the bound.
    for values in ([1.0] * 99 + [0.5], [0.5, 1.0], [1 / 3] * 5 + [0.0]):
        assert mean_interval_method(np.array(values)) == "bootstrap95"
    assert bootstrap_mean_interval(np.array([1.0] * 99 + [0.5]), seed=7)[1] == 1.0
    assert mean_interval_method(np.ones(3), "judge_only_bootstrap95", "judge_only_wilson95") == (
        "judge_only_wilson95"
    )


def test_a_mean_of_items_all_at_one_inner_value_gets_the_wilson_interval_of_that_rate():
    """Six questions, each with one relevant passage found in the top three: P@3 is 1/3 for
    every one, and a bootstrap of them would be [1/3, 1/3]. The interval is Wilson's for rate
    1/3 over six items; by hand, z^2 = 3.8415: centre (1/3 + 3.8415/12) / (1 + 3.8415/6) =
    0.65345 / 1.64025 = 0.39839, half-width 1.96 sqrt(0.037037 + 0.026677) / 1.64025 = 0.30163,
    so [0.0968, 0.7000]."""
    values = np.full(6, 1 / 3)
    low, high = bootstrap_mean_interval(values, seed=7)
    assert (round(low, 4), round(high, 4)) == (0.0968, 0.7000)
    assert (low, high) == pytest.approx(
        proportion_confint(2, 6, alpha=0.05, method="wilson"), abs=1e-12
    )
    assert mean_interval_method(values) == "wilson95"
    # One item alone, at any value: the Wilson interval of that rate over one item.
    for value in (0.25, 0.5, 0.6309297535714575):
        low, high = bootstrap_mean_interval(np.array([value]), seed=7)
        assert (low, high) == pytest.approx(
            proportion_confint(value, 1, alpha=0.05, method="wilson"), abs=1e-12
        )
        assert low < value < high
    # Through the retrieval aggregate, as the warehouse's rows carry it.
    run = pl.DataFrame(
        {
            "query_id": [f"q{i}" for i in range(6) for _ in range(3)],
            "doc_id": [f"q{i}-d{r}" for i in range(6) for r in range(3)],
            "score": [3.0, 2.0, 1.0] * 6,
        }
    )
    qrels = pl.DataFrame(
        {"query_id": [f"q{i}" for i in range(6)], "doc_id": [f"q{i}-d1" for i in range(6)]}
    ).with_columns(pl.lit(3).alias("grade"))
    rows = {
        r["measure"]: r
        for r in aggregate(per_query(run, qrels, ["P@3", "RR@3"]), seed=7).iter_rows(named=True)
    }
    assert rows["P"]["value"] == pytest.approx(1 / 3) and rows["RR"]["value"] == 0.5
    for measure, rate in (("P", 1 / 3), ("RR", 0.5)):
        assert rows[measure]["interval_method"] == "wilson95"
        assert (rows[measure]["ci_low"], rows[measure]["ci_high"]) == pytest.approx(
            proportion_confint(rate * 6, 6, alpha=0.05, method="wilson"), abs=1e-12
        )


def test_a_mean_of_zeros_and_ones_is_a_proportion_with_its_wilson_interval():
    """R@5 of questions with one relevant passage each is, item by item, their Success@5: the
    same 0/1 values carry the same Wilson interval (statsmodels), not a bootstrap whose upper
    bound reaches 1.0 when a resample holds none of the three misses."""
    values = np.array([1.0] * 77 + [0.0] * 3)
    reference = proportion_confint(77, 80, alpha=0.05, method="wilson")
    assert bootstrap_mean_interval(values, seed=7) == pytest.approx(reference, abs=1e-12)
    assert mean_interval_method(values) == "wilson95"
    # By hand: z^2 = 3.8415; centre (77 + 1.9207) / 83.8415 = 0.94131, half-width
    # 1.96 * sqrt(77 * 3 / 80 + 0.9604) / 83.8415 = 1.96 * 1.96161 / 83.8415 = 0.04586.
    low, high = bootstrap_mean_interval(values, seed=7)
    assert (round(low, 4), round(high, 4)) == (0.8955, 0.9872)
    run = pl.DataFrame(
        {"query_id": [f"q{i}" for i in range(80)], "doc_id": ["d"] * 80, "score": [1.0] * 80}
    )
    qrels = pl.DataFrame(
        {
            "query_id": [f"q{i}" for i in range(80)],
            "doc_id": ["d"] * 77 + ["x"] * 3,
            "grade": [3] * 80,
        }
    )
    rows = {
        r["measure"]: r
        for r in aggregate(per_query(run, qrels, ["Success@5", "R@5"]), seed=7).iter_rows(
            named=True
        )
    }
    assert (rows["R"]["ci_low"], rows["R"]["ci_high"]) == pytest.approx(
        (rows["Success"]["ci_low"], rows["Success"]["ci_high"]), abs=1e-12
    )
    assert rows["R"]["interval_method"] == rows["Success"]["interval_method"] == "wilson95"


def test_aggregate_names_the_interval_each_row_carries():
    run = pl.DataFrame(
        {"query_id": [f"q{i}" for i in range(20)], "doc_id": ["d"] * 20, "score": [1.0] * 20}
    )
    # Half the queries find their one gold passage at rank 1, half find nothing relevant.
    qrels = run.select("query_id", "doc_id", pl.Series("grade", [3] * 10 + [0] * 10)).vstack(
        pl.DataFrame(
            {"query_id": [f"q{i}" for i in range(10, 20)], "doc_id": ["x"] * 10, "grade": [3] * 10}
        )
    )
    values = per_query(run, qrels, ["Success@5", "RR", "nDCG@5"])
    perfect = values.filter(pl.col("query_id").is_in([f"q{i}" for i in range(10)]))
    rows = {r["measure"]: r for r in aggregate(perfect).iter_rows(named=True)}
    assert {m: r["interval_method"] for m, r in rows.items()} == {
        "Success": "wilson95",
        "RR": "wilson95",
        "nDCG": "wilson95",
    }
    assert (rows["RR"]["ci_low"], rows["RR"]["ci_high"]) == wilson_interval(10, 10)
    rows = {r["measure"]: r for r in aggregate(values).iter_rows(named=True)}
    # Reciprocal ranks of 1 and 0 only: a proportion, as Success is.
    assert rows["RR"]["interval_method"] == "wilson95" and rows["RR"]["value"] == 0.5
    assert (rows["RR"]["ci_low"], rows["RR"]["ci_high"]) == wilson_interval(10, 20)
    assert aggregate(values, intervals=False)["interval_method"].is_null().all()
