"""The Polars kernel (``lib.fast_retrieval``) gives what the SQL kernel (``per_query``) gives.

Cross-checked on seeded random runs built to hit the awkward cases (score ties, negative and
zero grades, unjudged documents, queries judged but not retrieved, retrieved but not judged,
judged without a relevant document), for every measure, several cut-offs and relevance levels;
plus hand-computed cases of its own.
"""

import numpy as np
import polars as pl
import pytest

from rag_eval_pipeline.lib.fast_retrieval import per_query_fast
from rag_eval_pipeline.lib.retrieval_metrics import REGISTRY, per_query

EVERY_MEASURE = [
    *(
        f"{name}@{k}"
        for name, spec in REGISTRY.items()
        if spec.needs_cutoff
        for k in (1, 3, 10, 40)
    ),
    "RR@3",
    "RR",
    "AP",
]


def random_collection(seed: int, queries: int = 300) -> tuple[pl.DataFrame, pl.DataFrame]:
    """A run of 0-30 results per query (scores on a coarse grid, so ties are common) and qrels
    with grades -1 to 3 on a mix of retrieved and unretrieved documents."""
    rng = np.random.default_rng(seed)
    run_rows, qrels_rows = [], []
    for query in range(queries):
        query_id = f"q{query:04d}"
        depth = int(rng.integers(0, 31))
        docs = rng.choice(60, size=depth, replace=False)
        scores = rng.integers(0, 12, size=depth) / 4
        run_rows += [
            (query_id, f"d{doc:03d}", float(s)) for doc, s in zip(docs, scores, strict=True)
        ]
        judged = rng.choice(60, size=int(rng.integers(0, 12)), replace=False)
        grades = rng.choice([-1, 0, 0, 1, 2, 3], size=judged.size)
        qrels_rows += [
            (query_id, f"d{doc:03d}", int(g)) for doc, g in zip(judged, grades, strict=True)
        ]
    qrels_rows += [("judged-only", "d001", 3), ("judged-only", "d002", 1)]
    run_rows += [("run-only", "d001", 1.0)]
    run = pl.DataFrame(run_rows, schema=["query_id", "doc_id", "score"], orient="row")
    qrels = pl.DataFrame(qrels_rows, schema=["query_id", "doc_id", "grade"], orient="row")
    return run, qrels


def assert_same(expected: pl.DataFrame, got: pl.DataFrame) -> None:
    assert got.schema == expected.schema
    assert got.select("query_id", "measure", "k").equals(
        expected.select("query_id", "measure", "k")
    )
    assert got.height > 0
    difference = (got["value"] - expected["value"]).abs().max()
    assert difference <= 1e-12


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("rel_level", [0, 1, 2, 3])
@pytest.mark.parametrize("complete", [True, False])
def test_equals_the_sql_kernel_on_random_runs(seed, rel_level, complete):
    run, qrels = random_collection(seed)
    expected = per_query(run, qrels, EVERY_MEASURE, rel_level=rel_level, complete=complete)
    got = per_query_fast(run, qrels, EVERY_MEASURE, rel_level=rel_level, complete=complete)
    assert_same(expected, got)
    scored = set(got["query_id"])
    assert ("judged-only" in scored) == complete
    assert "run-only" not in scored


@pytest.mark.parametrize("measures", [["AP"], ["RR"], ["nDCG@5"], ["P@2", "RR"], ["Success@100"]])
def test_equals_the_sql_kernel_for_subsets_of_measures(measures):
    run, qrels = random_collection(4)
    for complete in (True, False):
        assert_same(
            per_query(run, qrels, measures, complete=complete),
            per_query_fast(run, qrels, measures, complete=complete),
        )


def test_ties_are_broken_by_doc_id_descending():
    run = pl.DataFrame({"query_id": ["q"] * 3, "doc_id": ["a", "c", "b"], "score": [1.0, 1.0, 1.0]})
    qrels = pl.DataFrame({"query_id": ["q"], "doc_id": ["a"], "grade": [3]})
    values = per_query_fast(run, qrels, ["RR", "P@2", "AP"])
    assert dict(values.select("measure", "value").iter_rows()) == {
        "AP": pytest.approx(1 / 3),
        "P": 0.0,
        "RR": pytest.approx(1 / 3),
    }


def test_seed_figures():
    gold_ranks = [1] * 110 + [2] * 20 + [3] * 12 + [4] * 6 + [5] * 4 + [6] * 48
    run = pl.DataFrame(
        [(f"q{n:03d}", f"p{rank}", 10.0 - rank) for n in range(200) for rank in range(1, 7)],
        schema=["query_id", "doc_id", "score"],
        orient="row",
    )
    qrels = pl.DataFrame(
        [(f"q{n:03d}", f"p{rank}", 3) for n, rank in enumerate(gold_ranks)],
        schema=["query_id", "doc_id", "grade"],
        orient="row",
    )
    values = per_query_fast(run, qrels, ["R@5", "RR@5"])
    means = dict(values.group_by("measure").agg(pl.col("value").mean()).iter_rows())
    assert means["R"] == pytest.approx(0.76, abs=1e-12)
    assert round(means["RR"], 4) == 0.6315

    graded_run = pl.DataFrame(
        {"query_id": ["q"] * 5, "doc_id": list("abcde"), "score": [5.0, 4.0, 3.0, 2.0, 1.0]}
    )
    graded = pl.DataFrame(
        {"query_id": ["q"] * 5, "doc_id": list("abcde"), "grade": [1, 0, 3, 0, 2]}
    )
    assert round(per_query_fast(graded_run, graded, ["nDCG_exp@5"])["value"].item(), 4) == 0.6026


def test_empty_run_scores_judged_queries_zero_only_when_complete():
    run = pl.DataFrame(schema={"query_id": pl.String, "doc_id": pl.String, "score": pl.Float64})
    qrels = pl.DataFrame({"query_id": ["q1", "q2"], "doc_id": ["a", "b"], "grade": [3, 2]})
    complete = per_query_fast(run, qrels, ["nDCG@5", "AP"])
    assert complete.height == 4
    assert complete["value"].to_list() == [0.0] * 4
    assert per_query_fast(run, qrels, ["nDCG@5", "AP"], complete=False).height == 0
