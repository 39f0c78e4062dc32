"""Our retrieval kernel against trec_eval, pytrec_eval and ir_measures on public data.

Needs ``RAG_EVAL_DATASETS`` pointing at the shared datasets folder (``trec_eval-test/``,
``cranfield/``); the whole module is skipped without it.

- trec_eval's own expected outputs (``out.test.aq``: binary qrels; ``out.test.aql``: graded
  qrels with ``-l2``) reproduced to their 4 printed decimals, per query and for ``all``.
  trec_eval averages over the queries in the run (``complete=False`` here).
- trec_eval's treatment of graded qrels, pinned by the data: nDCG takes every positive grade
  as gain whatever ``-l`` says (``-l`` only decides what P, recall, RR and AP count), and a
  negative grade is "in the pool but unjudged" (no gain, not in the ideal ranking, never
  relevant).
- BM25 (bm25s) over Cranfield: per-query nDCG@10, P@5, R@10, RR and AP equal pytrec_eval and
  ir_measures (pytrec_eval backend) to 1e-6, ties broken by doc id descending in all three.

The seed figures of DESIGN.md and the intervals need no data: ``test_statistics.py`` and the
kernel's own tests (``test_retrieval_metrics.py``) check them on every run.
"""

import json
import os
from pathlib import Path

import numpy as np
import polars as pl
import pytest

DATASETS = os.environ.get("RAG_EVAL_DATASETS")
if not DATASETS:
    pytest.skip(
        "RAG_EVAL_DATASETS is not set: point it at the shared datasets folder "
        "(e.g. RAG_EVAL_DATASETS=../shared/datasets) to run the trec_eval parity tests",
        allow_module_level=True,
    )

import bm25s  # noqa: E402
import ir_measures  # noqa: E402
import pytrec_eval  # noqa: E402
import Stemmer  # noqa: E402

from rag_eval_pipeline.lib.inputs.formats import read_trec_qrels, read_trec_run  # noqa: E402
from rag_eval_pipeline.lib.metrics.retrieval import per_query  # noqa: E402

pytestmark = pytest.mark.datasets

TREC_EVAL_TEST = Path(DATASETS) / "trec_eval-test"
CRANFIELD = Path(DATASETS) / "cranfield"
# trec_eval measure -> (our measure, cut-off)
TREC_MEASURES = {
    "ndcg_cut_5": ("nDCG", 5),
    "ndcg_cut_10": ("nDCG", 10),
    "P_5": ("P", 5),
    "recall_5": ("R", 5),
    "recip_rank": ("RR", None),
    "map": ("AP", None),
}
OUR_MEASURES = ["nDCG@5", "nDCG@10", "P@5", "R@5", "RR", "AP"]


def trec_eval_expected(name: str) -> dict[tuple[str, str], float]:
    """``(trec_eval measure, query or 'all') -> value`` from a ``trec_eval -q`` output file."""
    expected = {}
    for line in (TREC_EVAL_TEST / name).read_text().splitlines():
        measure, query, value = line.split()
        if measure in TREC_MEASURES or measure == "num_q":
            expected[measure, query] = float(value)
    return expected


def lookup(values: pl.DataFrame, measure: str, k: int | None) -> dict[str, float]:
    chosen = values.filter(pl.col("measure") == measure, pl.col("k").eq_missing(k))
    return dict(chosen.select("query_id", "value").iter_rows())


@pytest.fixture(scope="module")
def trec_eval_run() -> pl.DataFrame:
    return read_trec_run(TREC_EVAL_TEST / "results.test")


@pytest.mark.parametrize(
    ("qrels_file", "expected_file", "rel_level"),
    [("qrels.test", "out.test.aq", 1), ("qrels.rel_level", "out.test.aql", 2)],
)
def test_trec_eval_expected_outputs(trec_eval_run, qrels_file, expected_file, rel_level):
    qrels = read_trec_qrels(TREC_EVAL_TEST / qrels_file)
    values = per_query(trec_eval_run, qrels, OUR_MEASURES, rel_level=rel_level, complete=False)
    expected = trec_eval_expected(expected_file)
    assert values["query_id"].n_unique() == expected["num_q", "all"] == 3
    compared = 0
    for (trec_measure, query), value in expected.items():
        if trec_measure == "num_q":
            continue
        ours = lookup(values, *TREC_MEASURES[trec_measure])
        figure = float(np.mean(list(ours.values()))) if query == "all" else ours[query]
        assert abs(figure - value) <= 0.5e-4 + 1e-12, (trec_measure, query, figure, value)
        compared += 1
    assert compared == 6 * 4  # six measures, three queries and 'all'


def test_trec_eval_ndcg_gives_gain_below_rel_level(trec_eval_run):
    """With -l2, query 301's nDCG@10 is 0.0439 in out.test.aql: its only gains in the top 10
    are two grade-1 documents (ranks 6 and 7, relstring '0000011000'), which -l2 calls not
    relevant. So trec_eval's nDCG ignores -l and our kernel does the same."""
    qrels = read_trec_qrels(TREC_EVAL_TEST / "qrels.rel_level")
    expected = trec_eval_expected("out.test.aql")[("ndcg_cut_10", "301")]
    ours = lookup(per_query(trec_eval_run, qrels, ["nDCG@10"], rel_level=2), "nDCG", 10)
    assert expected == 0.0439
    assert round(ours["301"], 4) == expected
    without_grade_1 = qrels.filter(pl.col("grade") != 1)
    dropped = lookup(
        per_query(trec_eval_run, without_grade_1, ["nDCG@10"], rel_level=2), "nDCG", 10
    )
    assert dropped["301"] == 0.0


def test_negative_grades_count_as_unjudged(trec_eval_run):
    """qrels.rel_level judges 304 documents of query 303 at -1. trec_eval reads them as in the
    pool but unjudged: no gain, outside the ideal ranking, never relevant, so removing them
    changes nothing, and setting them to 0 changes nothing either."""
    qrels = read_trec_qrels(TREC_EVAL_TEST / "qrels.rel_level")
    assert qrels.filter(pl.col("grade") < 0)["query_id"].unique().to_list() == ["303"]
    assert qrels.filter(pl.col("grade") < 0).height == 304
    measures = [*OUR_MEASURES, "nDCG_exp@10"]
    as_read = per_query(trec_eval_run, qrels, measures, rel_level=2)
    dropped = per_query(trec_eval_run, qrels.filter(pl.col("grade") >= 0), measures, rel_level=2)
    zeroed = per_query(
        trec_eval_run,
        qrels.with_columns(pl.col("grade").clip(lower_bound=0)),
        measures,
        rel_level=2,
    )
    for other in (dropped, zeroed):
        assert other.select("query_id", "measure", "k").equals(
            as_read.select("query_id", "measure", "k")
        )
        assert (other["value"] - as_read["value"]).abs().max() <= 1e-12
    # And they agree with trec_eval's own figure for query 303 (0.0823 AP; nDCG@10 0).
    expected = trec_eval_expected("out.test.aql")
    assert round(lookup(as_read, "AP", None)["303"], 4) == expected["map", "303"]


# --- BM25 on Cranfield ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cranfield_run() -> pl.DataFrame:
    """BM25 (bm25s defaults, Snowball English stemmer, English stop words) over title + text,
    top 100 per query."""
    docs = [json.loads(line) for line in (CRANFIELD / "docs.jsonl").read_text().splitlines()]
    queries = [json.loads(line) for line in (CRANFIELD / "queries.jsonl").read_text().splitlines()]
    stemmer = Stemmer.Stemmer("english")
    corpus = [f"{doc['title']} {doc['text']}" for doc in docs]
    index = bm25s.BM25()
    index.index(
        bm25s.tokenize(corpus, stopwords="en", stemmer=stemmer, show_progress=False),
        show_progress=False,
    )
    query_tokens = bm25s.tokenize(
        [query["text"] for query in queries], stopwords="en", stemmer=stemmer, show_progress=False
    )
    positions, scores = index.retrieve(query_tokens, k=100, show_progress=False)
    doc_ids = np.array([doc["id"] for doc in docs])
    return pl.DataFrame(
        {
            "query_id": np.repeat([query["id"] for query in queries], positions.shape[1]),
            "doc_id": doc_ids[positions].ravel(),
            "score": scores.ravel().astype(np.float64),
        }
    )


@pytest.fixture(scope="module")
def cranfield_qrels() -> pl.DataFrame:
    return read_trec_qrels(CRANFIELD / "qrels.trec")


def nested(frame: pl.DataFrame, value: str) -> dict[str, dict[str, float]]:
    grouped = frame.group_by("query_id").agg("doc_id", value)
    return {q: dict(zip(docs, vals, strict=True)) for q, docs, vals in grouped.iter_rows()}


CRANFIELD_MEASURES = {
    # ours: (pytrec_eval measure, ir_measures measure)
    "nDCG@10": ("ndcg_cut_10", ir_measures.nDCG @ 10),
    "P@5": ("P_5", ir_measures.P @ 5),
    "R@10": ("recall_10", ir_measures.R @ 10),
    "RR": ("recip_rank", ir_measures.RR),
    "AP": ("map", ir_measures.AP),
}


@pytest.fixture(scope="module")
def cranfield_values(cranfield_run, cranfield_qrels) -> pl.DataFrame:
    # Cranfield grades 1-4 are all relevant: rel_level 1, as trec_eval's default.
    return per_query(
        cranfield_run, cranfield_qrels, list(CRANFIELD_MEASURES), rel_level=1, complete=False
    ).with_columns(
        pl.when(pl.col("k").is_null())
        .then(pl.col("measure"))
        .otherwise(pl.format("{}@{}", "measure", "k"))
        .alias("label")
    )


def ours_by_label(values: pl.DataFrame, label: str) -> dict[str, float]:
    return dict(values.filter(pl.col("label") == label).select("query_id", "value").iter_rows())


def test_cranfield_run_has_ties_to_break(cranfield_run):
    tied = cranfield_run.group_by("query_id", "score").len().filter(pl.col("len") > 1)
    assert tied.height > 0


def test_cranfield_bm25_matches_pytrec_eval_per_query(
    cranfield_run, cranfield_qrels, cranfield_values
):
    evaluator = pytrec_eval.RelevanceEvaluator(
        nested(cranfield_qrels, "grade"), {"ndcg_cut.10", "P.5", "recall.10", "recip_rank", "map"}
    )
    reference = evaluator.evaluate(nested(cranfield_run, "score"))
    assert len(reference) == 225
    for label, (trec_name, _) in CRANFIELD_MEASURES.items():
        ours = ours_by_label(cranfield_values, label)
        assert ours.keys() == reference.keys(), label
        worst = max(abs(ours[q] - reference[q][trec_name]) for q in ours)
        assert worst <= 1e-6, (label, worst)


def test_cranfield_bm25_matches_ir_measures_per_query(
    cranfield_run, cranfield_qrels, cranfield_values
):
    measures = [measure for _, measure in CRANFIELD_MEASURES.values()]
    labels = {str(measure): label for label, (_, measure) in CRANFIELD_MEASURES.items()}
    reference = ir_measures.pytrec_eval.iter_calc(
        measures, nested(cranfield_qrels, "grade"), nested(cranfield_run, "score")
    )
    by_label: dict[str, dict[str, float]] = {}
    for metric in reference:
        by_label.setdefault(labels[str(metric.measure)], {})[metric.query_id] = metric.value
    assert by_label.keys() == CRANFIELD_MEASURES.keys()
    for label, values in by_label.items():
        ours = ours_by_label(cranfield_values, label)
        assert ours.keys() == values.keys(), label
        assert max(abs(ours[q] - values[q]) for q in ours) <= 1e-6, label


def test_cranfield_bm25_means_are_the_known_figures(cranfield_values):
    means = dict(cranfield_values.group_by("label").agg(pl.col("value").mean()).iter_rows())
    print(
        "Cranfield BM25 means:", {label: round(value, 4) for label, value in sorted(means.items())}
    )
    assert means["nDCG@10"] == pytest.approx(0.373, abs=0.001)
    assert means["RR"] == pytest.approx(0.537, abs=0.001)
    assert means["R@10"] == pytest.approx(0.400, abs=0.001)
