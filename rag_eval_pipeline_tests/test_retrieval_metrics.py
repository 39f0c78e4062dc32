"""The retrieval kernel: ``retrieval_metrics.per_query`` (``sql/retrieval_per_query.sql``).

Needs no public data. Checked against pytrec_eval (trec_eval's own code) per query on seeded
random runs built to hit the awkward cases (score ties, ties across a cut-off, negative and zero
grades, unjudged documents, queries judged but not retrieved, retrieved but not judged, judged
without a relevant document), for several cut-offs and relevance levels; nDCG_exp, which
trec_eval lacks, against its definition written out below; plus hand-computed cases, the seed
figures of DESIGN.md among them.
"""

import math

import numpy as np
import polars as pl
import pytest
import pytrec_eval

from rag_eval_pipeline.lib.metrics import retrieval
from rag_eval_pipeline.lib.metrics.retrieval import per_query

CUTOFFS = (1, 3, 10, 40)
EVERY_MEASURE = [
    *(f"{name}@{k}" for name in ("Success", "R", "P", "RR", "nDCG", "nDCG_exp") for k in CUTOFFS),
    "RR",
    "AP",
]
# (our measure, cut-off) -> pytrec_eval's name; RR@k is derived from recip_rank below.
TREC_NAMES = {
    **{("Success", k): f"success_{k}" for k in CUTOFFS},
    **{("R", k): f"recall_{k}" for k in CUTOFFS},
    **{("P", k): f"P_{k}" for k in CUTOFFS},
    **{("nDCG", k): f"ndcg_cut_{k}" for k in CUTOFFS},
    ("RR", None): "recip_rank",
    ("AP", None): "map",
}
TREC_MEASURES = {
    f"{family}.{','.join(map(str, CUTOFFS))}" for family in ("success", "recall", "P", "ndcg_cut")
} | {"recip_rank", "map"}


def random_collection(seed: int, queries: int = 300) -> tuple[pl.DataFrame, pl.DataFrame]:
    """A run of 0-30 results per query (scores on a coarse grid, so ties are common, across
    cut-offs too) and qrels with grades -1 to 3 on a mix of retrieved and unretrieved
    documents; plus one query judged but not retrieved and one retrieved but not judged."""
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


def nested(frame: pl.DataFrame, value: str) -> dict[str, dict[str, float]]:
    """``{query: {doc: value}}``, the input pytrec_eval takes."""
    grouped = frame.group_by("query_id").agg("doc_id", value)
    return {q: dict(zip(docs, vals, strict=True)) for q, docs, vals in grouped.iter_rows()}


def pytrec_values(
    run: pl.DataFrame, qrels: pl.DataFrame, rel_level: int
) -> dict[str, dict[str, float]]:
    evaluator = pytrec_eval.RelevanceEvaluator(
        nested(qrels, "grade"), TREC_MEASURES, relevance_level=rel_level
    )
    return evaluator.evaluate(nested(run, "score"))


def relevant_counts(qrels: pl.DataFrame, rel_level: int) -> dict[str, int]:
    return dict(qrels.group_by("query_id").agg((pl.col("grade") >= rel_level).sum()).iter_rows())


def exponential_ndcg(run: pl.DataFrame, qrels: pl.DataFrame, query: str, k: int) -> float:
    """nDCG_exp@k by its definition: gain 2^grade - 1 (negative grades 0) over trec_eval's order
    (score descending, doc id descending), divided by the same sum over the judged grades
    sorted descending."""
    grade_of = {doc: grade for q, doc, grade in qrels.iter_rows() if q == query}
    retrieved = sorted(
        ((score, doc) for q, doc, score in run.iter_rows() if q == query), reverse=True
    )
    gains = [2 ** max(grade_of.get(doc, 0), 0) - 1 for _, doc in retrieved[:k]]
    ideal = sorted((2 ** max(g, 0) - 1 for g in grade_of.values()), reverse=True)[:k]

    def dcg(values: list[int]) -> float:
        return sum(gain / math.log2(rank + 1) for rank, gain in enumerate(values, 1))

    return dcg(gains) / dcg(ideal) if dcg(ideal) > 0 else 0.0


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("rel_level", [1, 2, 3])
def test_equals_pytrec_eval_per_query_on_random_runs(seed, rel_level):
    run, qrels = random_collection(seed)
    values = per_query(run, qrels, EVERY_MEASURE, rel_level=rel_level, complete=False)
    reference = pytrec_values(run, qrels, rel_level)
    n_rel = relevant_counts(qrels, rel_level)
    ours = {(q, m, k): v for q, m, k, v in values.iter_rows()}
    scored = {q for q, _, _ in ours}
    # pytrec_eval also lists queries judged without a relevant document (all 0); we exclude them.
    assert scored == {q for q in reference if n_rel[q] > 0}
    assert "judged-only" not in scored and "run-only" not in scored
    compared = 0
    for query in scored:
        trec = reference[query]
        for (measure, k), trec_name in TREC_NAMES.items():
            assert ours[query, measure, k] == pytest.approx(trec[trec_name], abs=1e-12), (
                query,
                measure,
                k,
            )
            compared += 1
        for k in CUTOFFS:
            truncated = trec["recip_rank"] if trec["recip_rank"] >= 1 / k else 0.0
            assert ours[query, "RR", k] == pytest.approx(truncated, abs=1e-12)
    assert len(scored) > 150
    assert compared == len(scored) * len(TREC_NAMES)


def laid_out(run: pl.DataFrame, layout: str, monkeypatch, *, block: int, seed: int):
    """``run`` as the layout asks: as built (query by query), shuffled (the SQL top-n), as
    built with NumPy blocks of ``block`` scores, listed by rank as a run file is (every query's
    scores never increase: NumPy takes its first rows), or half of the queries so; checks which
    path the kernel will take."""
    if layout == "shuffled":
        run = run.sample(fraction=1.0, shuffle=True, seed=seed)
    if layout in ("by rank", "half by rank"):
        every = layout == "by rank"
        by_rank = run.with_row_index("row").with_columns(
            order=pl.when(pl.lit(every) | (pl.col("query_id").rank("dense") % 2 == 0))
            .then(-pl.col("score"))
            .otherwise(pl.col("row").cast(pl.Float64))
        )
        run = by_rank.sort("query_id", "order").drop("row", "order")
    if layout == "small blocks":
        monkeypatch.setattr(retrieval, "BLOCK_SCORES", block)
    assert (retrieval._stretches(run["query_id"]) is None) == (layout == "shuffled")
    return run


@pytest.mark.parametrize(
    "layout", ["query by query", "shuffled", "small blocks", "by rank", "half by rank"]
)
def test_both_top_n_paths_equal_pytrec_eval(layout, monkeypatch):
    """A run listed query by query is ranked by NumPy (``_listed_in_stretches``), a shuffled one
    by SQL (``top_rows``); small blocks make NumPy gather stretches that are not adjacent (its
    stretches of one length are interleaved with others) and split a length over blocks. Cut-offs
    up to 10 make the top-n depth 11, so queries have fewer rows than that (taken whole) and
    more (partitioned)."""
    measures = [m for m in EVERY_MEASURE if "@" not in m or int(m.split("@")[1]) <= 10]
    run, qrels = random_collection(4, queries=400)
    run = laid_out(run, layout, monkeypatch, block=64, seed=5)
    values = per_query(run, qrels, measures, rel_level=1, complete=False)
    reference = pytrec_values(run, qrels, 1)
    for query, measure, k, value in values.iter_rows():
        if (measure, k) in TREC_NAMES:
            assert value == pytest.approx(reference[query][TREC_NAMES[measure, k]], abs=1e-12)
    assert values["query_id"].n_unique() > 200


def deep_collection(seed: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """A run of 0-60 rows per query on a grid of 6 scores (-0.0 and 0.0 among them, so long
    ties, with relevant rows inside them far below the cut-off) and many relevant rows."""
    rng = np.random.default_rng(seed)
    grid = np.array([-0.0, 0.0, 0.5, 1.0, 1.5, 2.0])
    run_rows, qrels_rows = [], []
    for query in range(150):
        docs = rng.choice(80, size=int(rng.integers(0, 61)), replace=False)
        run_rows += [(f"q{query:03d}", f"d{doc:02d}", float(rng.choice(grid))) for doc in docs]
        judged = rng.choice(80, size=int(rng.integers(0, 30)), replace=False)
        qrels_rows += [(f"q{query:03d}", f"d{doc:02d}", int(rng.integers(0, 4))) for doc in judged]
    run = pl.DataFrame(run_rows, schema=["query_id", "doc_id", "score"], orient="row")
    qrels = pl.DataFrame(qrels_rows, schema=["query_id", "doc_id", "grade"], orient="row")
    return run, qrels


@pytest.mark.parametrize("layout", ["query by query", "shuffled", "small blocks", "by rank"])
@pytest.mark.parametrize("measures", [["RR", "AP", "P@3"], ["AP", "nDCG@40"]])
def test_ranks_below_the_cut_off_equal_pytrec_eval(layout, measures, monkeypatch):
    """AP and RR without a cut-off rank every relevant row (``_ranked_below``): by stretches of
    the run when it lists queries together, else over the rows ordered by query id; small blocks
    split the sorted stretches over many blocks. Queries have fewer rows than the top-n depth and
    many more; long ties (-0.0 with 0.0 too) hold relevant rows ranked by doc id."""
    run, qrels = deep_collection(7)
    run = laid_out(run, layout, monkeypatch, block=50, seed=8)
    values = per_query(run, qrels, measures, rel_level=2, complete=False)
    reference = pytrec_values(run, qrels, 2)
    compared = 0
    for query, measure, k, value in values.iter_rows():
        if (measure, k) in TREC_NAMES:
            assert value == pytest.approx(reference[query][TREC_NAMES[measure, k]], abs=1e-12)
            compared += 1
    assert compared > 2 * 100


def test_rows_above_in_stretches_count_every_higher_score_and_each_tie():
    """``_above_in_stretches`` against counting by hand, for stretches of several lengths in
    blocks of a few scores, some stretches holding no position."""
    rng = np.random.default_rng(3)
    lengths = rng.integers(1, 12, size=40)
    scores = rng.integers(0, 4, size=int(lengths.sum())).astype(np.float64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    positions = np.sort(rng.choice(scores.size, size=60, replace=False))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(retrieval, "BLOCK_SCORES", 16)
        above, members, member_tie = retrieval._above_in_stretches(scores, lengths, positions)
    for i, position in enumerate(positions):
        stretch = int(np.searchsorted(starts, position, side="right") - 1)
        rows = np.arange(starts[stretch], starts[stretch] + lengths[stretch])
        assert above[i] == (scores[rows] > scores[position]).sum()
        same = set(rows[scores[rows] == scores[position]].tolist())
        if len(same) == 1:
            assert position not in members
        else:
            (tie,) = member_tie[members == position]
            assert set(members[member_tie == tie].tolist()) == same
    assert sorted(members.tolist()) == sorted(set(members.tolist()))


@pytest.mark.parametrize("seed", [1, 2])
def test_exponential_ndcg_follows_its_definition(seed):
    run, qrels = random_collection(seed, queries=60)
    values = per_query(run, qrels, [f"nDCG_exp@{k}" for k in CUTOFFS], rel_level=1)
    assert values.height > 100
    for query, _, k, value in values.iter_rows():
        assert value == pytest.approx(exponential_ndcg(run, qrels, query, k), abs=1e-12)


def test_complete_scores_judged_but_unretrieved_queries_zero():
    run, qrels = random_collection(1)
    partial = per_query(run, qrels, EVERY_MEASURE, rel_level=1, complete=False)
    complete = per_query(run, qrels, EVERY_MEASURE, rel_level=1, complete=True)
    added = complete.join(partial, on=["query_id", "measure", "k"], how="anti", nulls_equal=True)
    unretrieved = {q for q, n in relevant_counts(qrels, 1).items() if n} - set(run["query_id"])
    assert "judged-only" in unretrieved
    assert set(added["query_id"]) == unretrieved
    assert added.height == len(unretrieved) * len(EVERY_MEASURE)
    assert set(added["value"]) == {0.0}
    kept = complete.join(partial, on=["query_id", "measure", "k"], how="semi", nulls_equal=True)
    assert kept.equals(partial)


@pytest.mark.parametrize("rel_level", [0, 1, 2])
@pytest.mark.parametrize(
    "measures",
    [
        ["AP"],
        ["RR"],
        ["nDCG@5"],
        ["nDCG_exp@3"],
        ["nDCG@10", "nDCG_exp@1"],
        ["P@2", "RR"],
        ["Success@100"],
        ["R@1", "AP"],
    ],
)
def test_a_subset_of_measures_gives_the_values_of_the_full_request(measures, rel_level):
    """Cut-off measures alone take the short path (only rows that can reach max(k) are ranked);
    with AP or RR the whole run is ranked. Both must give the same numbers, with nDCG and
    nDCG_exp asked for alone or together."""
    run, qrels = random_collection(4)
    every = [*EVERY_MEASURE, "P@2", "nDCG@5", "Success@100", "R@1"]
    for complete in (True, False):
        full = per_query(run, qrels, every, rel_level=rel_level, complete=complete)
        subset = per_query(run, qrels, measures, rel_level=rel_level, complete=complete)
        asked = subset.select("measure", "k").unique()
        assert asked.height == len(measures)
        assert subset.equals(full.join(asked, on=["measure", "k"], how="semi", nulls_equal=True))


def test_ties_are_broken_by_doc_id_descending():
    run = pl.DataFrame({"query_id": ["q"] * 3, "doc_id": ["a", "c", "b"], "score": [1.0, 1.0, 1.0]})
    qrels = pl.DataFrame({"query_id": ["q"], "doc_id": ["a"], "grade": [3]})
    values = per_query(run, qrels, ["RR", "P@2", "AP"])
    assert dict(values.select("measure", "value").iter_rows()) == {
        "AP": pytest.approx(1 / 3),
        "P": 0.0,
        "RR": pytest.approx(1 / 3),
    }


@pytest.mark.parametrize(("relevant", "rank"), [("d", 2), ("c", 3), ("b", 4)])
def test_a_tie_across_the_cut_off_is_ranked_by_doc_id(relevant, rank):
    """b, c and d tie at 4.0 behind a; trec_eval's order is a, d, c, b, e. With cut-offs 2 and 3
    the boundary falls inside the tie."""
    run = pl.DataFrame(
        {"query_id": ["q"] * 5, "doc_id": list("abcde"), "score": [5.0, 4.0, 4.0, 4.0, 3.0]}
    )
    qrels = pl.DataFrame({"query_id": ["q"], "doc_id": [relevant], "grade": [2]})
    values = per_query(run, qrels, ["Success@2", "Success@3", "RR@3", "nDCG@2"])
    by_name = {(m, k): v for _, m, k, v in values.iter_rows()}
    assert by_name["Success", 2] == float(rank <= 2)
    assert by_name["Success", 3] == float(rank <= 3)
    assert by_name["RR", 3] == (pytest.approx(1 / rank) if rank <= 3 else 0.0)
    assert by_name["nDCG", 2] == (pytest.approx(1 / math.log2(3)) if rank == 2 else 0.0)


@pytest.mark.parametrize("relevant", ["e", "d", "b"])
@pytest.mark.parametrize("shuffled", [False, True])
def test_a_tie_across_the_cut_off_in_a_later_query_fetches_that_querys_rows(relevant, shuffled):
    """Query q1 (between two longer ones) has a, then b, c, d, e tied, then more: with cut-off
    2 the top-n depth 3 ends inside the tie, so every row of q1 at that score is fetched (from
    its stretch of the run, or by query id when the run is shuffled) and ranked a, e, d, c, b."""
    rows = [("q0", f"x{i:02d}", 20.0 - i) for i in range(10)]
    rows += [("q1", "a", 5.0), *(("q1", doc, 4.0) for doc in "bcde")]
    rows += [("q1", f"y{i:02d}", 3.0 - i / 10) for i in range(6)]
    rows += [("q2", f"z{i:02d}", 9.0 - i) for i in range(12)]
    run = pl.DataFrame(rows, schema=["query_id", "doc_id", "score"], orient="row")
    if shuffled:
        run = run.sample(fraction=1.0, shuffle=True, seed=3)
    qrels = pl.DataFrame(
        {"query_id": ["q0", "q1", "q2"], "doc_id": ["x03", relevant, "z00"], "grade": [2, 2, 1]}
    )
    values = per_query(run, qrels, ["Success@2", "RR@2", "nDCG@2"], rel_level=1)
    by_name = {(q, m): v for q, m, _, v in values.iter_rows()}
    rank = {"e": 2, "d": 3, "b": 5}[relevant]
    assert by_name["q1", "Success"] == float(rank <= 2)
    assert by_name["q1", "RR"] == (0.5 if rank == 2 else 0.0)
    reference = pytrec_eval.RelevanceEvaluator(
        nested(qrels, "grade"), {"ndcg_cut.2"}, relevance_level=1
    ).evaluate(nested(run, "score"))
    for query in ("q0", "q1", "q2"):
        assert by_name[query, "nDCG"] == pytest.approx(reference[query]["ndcg_cut_2"])


def test_unjudged_passages_are_never_relevant_even_at_rel_level_zero():
    """a (judged 0) and c (judged 2) are relevant at rel_level 0; b and d are unjudged and stay
    not relevant: P@2 = 1/2, R@2 = 1/2, RR = 1, AP = (1/1 + 2/3) / 2."""
    run = pl.DataFrame(
        {"query_id": ["q"] * 4, "doc_id": list("abcd"), "score": [4.0, 3.0, 2.0, 1.0]}
    )
    qrels = pl.DataFrame({"query_id": ["q", "q"], "doc_id": ["a", "c"], "grade": [0, 2]})
    values = per_query(run, qrels, ["P@2", "R@2", "Success@1", "RR", "AP"], rel_level=0)
    assert {(m, k): v for _, m, k, v in values.iter_rows()} == {
        ("AP", None): pytest.approx(5 / 6, abs=1e-12),
        ("P", 2): 0.5,
        ("R", 2): 0.5,
        ("RR", None): 1.0,
        ("Success", 1): 1.0,
    }


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_rel_level_zero_equals_pytrec_eval_on_grades_shifted_by_one(seed):
    """pytrec_eval refuses relevance_level 0. "Judged at grade >= 0" is the same question as
    "judged at grade + 1 >= 1" (an unjudged document has no grade to shift), so rel_level 0 here
    must equal pytrec_eval at level 1 on the shifted qrels, for every measure that only counts
    relevant documents."""
    run, qrels = random_collection(seed)
    measures = [f"{name}@{k}" for name in ("Success", "R", "P") for k in CUTOFFS] + ["RR", "AP"]
    values = per_query(run, qrels, measures, rel_level=0, complete=False)
    reference = pytrec_values(run, qrels.with_columns(pl.col("grade") + 1), 1)
    assert values["query_id"].n_unique() > 200
    for query, measure, k, value in values.iter_rows():
        assert value == pytest.approx(reference[query][TREC_NAMES[measure, k]], abs=1e-12)


def test_seed_recall_and_reciprocal_rank():
    """200 queries, one gold passage each, at rank 1 for 110, 2 for 20, 3 for 12, 4 for 6, 5 for
    4 and rank 6 for 48: R@5 = 152/200 = 0.76, MRR@5 = 0.6315."""
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
    values = per_query(run, qrels, ["R@5", "RR@5"])
    means = dict(values.group_by("measure").agg(pl.col("value").mean()).iter_rows())
    assert means["R"] == pytest.approx(0.76, abs=1e-12)
    assert round(means["RR"], 4) == 0.6315
    assert means["RR"] == pytest.approx((110 + 20 / 2 + 12 / 3 + 6 / 4 + 4 / 5) / 200, abs=1e-12)


def test_seed_exponential_ndcg():
    """Grades [1, 0, 3, 0, 2] in rank order against the ideal [3, 2, 1]: nDCG_exp@5 0.6026."""
    run = pl.DataFrame(
        {"query_id": ["q"] * 5, "doc_id": list("abcde"), "score": [5.0, 4.0, 3.0, 2.0, 1.0]}
    )
    qrels = pl.DataFrame({"query_id": ["q"] * 5, "doc_id": list("abcde"), "grade": [1, 0, 3, 0, 2]})
    value = per_query(run, qrels, ["nDCG_exp@5"])["value"].item()
    assert round(value, 4) == 0.6026
    dcg = 1 / math.log2(2) + 7 / math.log2(4) + 3 / math.log2(6)
    ideal = 7 / math.log2(2) + 3 / math.log2(3) + 1 / math.log2(4)
    assert value == pytest.approx(dcg / ideal, abs=1e-12)


def test_empty_run_scores_judged_queries_zero_only_when_complete():
    run = pl.DataFrame(schema={"query_id": pl.String, "doc_id": pl.String, "score": pl.Float64})
    qrels = pl.DataFrame({"query_id": ["q1", "q2"], "doc_id": ["a", "b"], "grade": [3, 2]})
    complete = per_query(run, qrels, ["nDCG@5", "AP"])
    assert complete.height == 4
    assert complete["value"].to_list() == [0.0] * 4
    assert per_query(run, qrels, ["nDCG@5", "AP"], complete=False).height == 0


@pytest.mark.parametrize("bad_score", [None, float("nan")])
def test_a_missing_score_is_refused(bad_score):
    run = pl.DataFrame(
        {"query_id": ["q", "q"], "doc_id": ["a", "b"], "score": [1.0, bad_score]},
        schema={"query_id": pl.String, "doc_id": pl.String, "score": pl.Float64},
    )
    qrels = pl.DataFrame({"query_id": ["q"], "doc_id": ["a"], "grade": [3]})
    with pytest.raises(ValueError, match="null or NaN score"):
        per_query(run, qrels, ["P@1"])


def test_a_perfect_ranking_scores_exactly_one_and_nothing_scores_above_one():
    """A run's DCG and the ideal DCG are summed alike: the same terms (gain / log2(rank + 1)),
    added in rank order (not in whatever order DuckDB's threads combine partial sums, which made
    a perfect ranking 1.0000000000000004 now and then). So a run listing every judged passage in
    grade order has nDCG exactly 1.0 at every cut-off, whatever the grades, every time."""
    rng = np.random.default_rng(11)
    run_rows, qrels_rows = [], []
    for query in range(4000):
        grades = np.sort(rng.integers(1, 8, int(rng.integers(1, 26))))[::-1]
        for position, grade in enumerate(grades.tolist()):
            doc = f"d{position:03d}"
            qrels_rows.append((f"q{query:04d}", doc, grade))
            run_rows.append((f"q{query:04d}", doc, float(100 - position)))
    run = pl.DataFrame(run_rows, schema=["query_id", "doc_id", "score"], orient="row")
    qrels = pl.DataFrame(qrels_rows, schema=["query_id", "doc_id", "grade"], orient="row")
    values = per_query(
        run, qrels, ["nDCG@5", "nDCG@7", "nDCG@20", "nDCG_exp@20", "AP", "RR"], rel_level=1
    )
    assert values["value"].max() <= 1.0
    ndcg = values.filter(pl.col("measure").str.starts_with("nDCG"))
    assert ndcg.height == 4000 * 4
    assert (ndcg["value"] == 1.0).all()


def test_a_systems_lists_are_ranked_by_its_ranks_not_reordered_by_score():
    """A system's ``retrieval_results`` are measured in the order of the ranks it gave (a
    reranker may send its first stage's scores): here every score runs against the ranks, and
    item b's ranks have gaps (1, 4, 9: positions 1, 2, 3). Hand-computed, by position:
    a: gold g1 (grade 3) at 2, the superseded s1 at 1 -> RR 1/2, Success@1 0, Stale@2 1;
    b: gold g2 (grade 2) at 3 -> RR 1/3, R@2 0, Success@3 1, nDCG@3 = (2 / log2 4) / 2 = 1/2."""
    results = pl.DataFrame(
        {
            "item_id": ["a", "a", "a", "b", "b", "b"],
            "passage_id": ["s1", "g1", "x1", "y1", "y2", "g2"],
            "rank": [1, 2, 3, 1, 4, 9],
            "score": [0.1, 0.5, 0.9, 1.0, 2.0, 3.0],
            "status": ["superseded", "current", "current", "current", "current", "current"],
            "eval_run_id": ["run"] * 6,
        }
    )
    items = pl.DataFrame(
        {
            "item_id": ["a", "b"],
            "stratum": ["lookup", "lookup"],
            "language": ["en", "en"],
            "answerable": [True, True],
            "golden_digest": ["golden"] * 2,
        }
    )
    gold = pl.DataFrame(
        {
            "item_id": ["a", "a", "b"],
            "passage_id": ["g1", "s1", "g2"],
            "grade": [3, 1, 2],
            "golden_digest": ["golden"] * 3,
        }
    )
    per_item, _, excluded = retrieval.retrieval_tables(
        results, items, gold, cutoffs=[1, 2, 3], rel_level=2, seed=1, resamples=10
    )
    values = {
        (item, measure if k is None else f"{measure}@{k}"): value
        for item, measure, k, value in per_item.select(
            "item_id", "measure", "k", "value"
        ).iter_rows()
    }
    assert excluded == []
    assert values[("a", "RR")] == pytest.approx(1 / 2)
    assert values[("a", "Success@1")] == 0.0
    assert values[("a", "Success@2")] == 1.0
    assert values[("a", "Stale@2")] == 1.0
    assert values[("b", "RR")] == pytest.approx(1 / 3)
    assert values[("b", "R@2")] == 0.0
    assert values[("b", "Success@3")] == 1.0
    assert values[("b", "nDCG@3")] == pytest.approx(0.5)
    assert values[("b", "Stale@3")] == 0.0
