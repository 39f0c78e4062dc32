"""A Polars kernel for the retrieval measures, for runs too large for the SQL kernel's speed.

``per_query_fast`` returns what ``retrieval_metrics.per_query`` returns (``query_id, measure,
k, value``, same rows, same order, values equal to within floating-point summation order) and
follows the same conventions, stated in full in ``retrieval_metrics`` and
``sql/retrieval_per_query.sql``: trec_eval ranks (score descending, ties by doc id descending),
relevance = grade >= ``rel_level`` (an unjudged passage has grade 0), nDCG gain = the grade with
negative grades counting 0 and the ideal ranking every positively graded judgement by grade,
P@k over k, R@k and AP over every relevant judgement, queries without a relevant judgement not
scored, and ``complete`` scoring judged queries that retrieved nothing as 0.

Why it is faster: the SQL kernel ranks every retrieved row and computes every measure for every
row (including the whole-run AP and RR when they are not asked for); here each run row is only
ranked within its query (one parallel ``rank().over()``) and everything after that works on the
rows that can still matter, the top ``max(k)`` of each query plus its relevant rows, which on a
run of depth 100 is about a seventh of the input. Measured in ``bench/bench_retrieval_metrics.py``.
"""

from collections.abc import Iterable

import polars as pl

from rag_eval_pipeline.lib.retrieval_metrics import (
    DEFAULT_MEASURES,
    QRELS_SCHEMA,
    RUN_SCHEMA,
    parse_measure,
)

CUT_MEASURES = ("Success", "R", "P", "RR", "nDCG", "nDCG_exp")
VALUE_SCHEMA = {"query_id": pl.String, "measure": pl.String, "k": pl.Int32, "value": pl.Float64}


def _discounted(gain: pl.Expr) -> pl.Expr:
    return gain / (pl.col("rank") + 1).cast(pl.Float64).log(2)


def _cut_values(
    ranked: pl.DataFrame, ideal: pl.DataFrame, scored: pl.DataFrame, ks: list[int]
) -> pl.DataFrame:
    """Success, R, P, RR, nDCG and nDCG_exp at every cut-off, for every scored query."""
    cutoffs = pl.DataFrame({"k": ks}, schema={"k": pl.Int32})
    exponential = pl.lit(2.0).pow(pl.col("gain")) - 1
    at_k = (
        ranked.join(cutoffs, how="cross")
        .filter(pl.col("rank") <= pl.col("k"))
        .group_by("query_id", "k")
        .agg(
            pl.col("relevant").sum().alias("rel_ret"),
            pl.col("rank").filter(pl.col("relevant")).min().alias("first_rel"),
            _discounted(pl.col("gain")).sum().alias("dcg"),
            _discounted(exponential).sum().alias("dcg_exp"),
        )
    )
    ideal_at_k = (
        ideal.join(cutoffs, how="cross")
        .filter(pl.col("rank") <= pl.col("k"))
        .group_by("query_id", "k")
        .agg(
            _discounted(pl.col("gain")).sum().alias("idcg"),
            _discounted(exponential).sum().alias("idcg_exp"),
        )
    )
    k = pl.col("k").cast(pl.Float64)
    return (
        scored.join(cutoffs, how="cross")
        .join(at_k, on=["query_id", "k"], how="left")
        .join(ideal_at_k, on=["query_id", "k"], how="left")
        .with_columns(pl.col("rel_ret", "dcg", "dcg_exp", "idcg", "idcg_exp").fill_null(0))
        .select(
            "query_id",
            "k",
            (pl.col("rel_ret") > 0).cast(pl.Float64).alias("Success"),
            (pl.col("rel_ret") / pl.col("n_rel")).alias("R"),
            (pl.col("rel_ret") / k).alias("P"),
            (1.0 / pl.col("first_rel")).fill_null(0.0).alias("RR"),
            pl.when(pl.col("idcg") > 0)
            .then(pl.col("dcg") / pl.col("idcg"))
            .otherwise(0.0)
            .alias("nDCG"),
            pl.when(pl.col("idcg_exp") > 0)
            .then(pl.col("dcg_exp") / pl.col("idcg_exp"))
            .otherwise(0.0)
            .alias("nDCG_exp"),
        )
        .unpivot(index=["query_id", "k"], on=list(CUT_MEASURES), variable_name="measure")
    )


def _whole_run_values(ranked: pl.DataFrame, scored: pl.DataFrame) -> pl.DataFrame:
    """AP and RR without a cut-off, for every scored query."""
    hits = (
        ranked.filter(pl.col("relevant"))
        .with_columns(pl.col("rank").rank("ordinal").over("query_id").alias("rel_so_far"))
        .group_by("query_id")
        .agg(
            (pl.col("rel_so_far") / pl.col("rank")).sum().alias("ap_sum"),
            pl.col("rank").min().alias("first_rel"),
        )
    )
    return (
        scored.join(hits, on="query_id", how="left")
        .select(
            "query_id",
            pl.lit(None, dtype=pl.Int32).alias("k"),
            (pl.col("ap_sum").fill_null(0.0) / pl.col("n_rel")).alias("AP"),
            (1.0 / pl.col("first_rel")).fill_null(0.0).alias("RR"),
        )
        .unpivot(index=["query_id", "k"], on=["AP", "RR"], variable_name="measure")
    )


def per_query_fast(
    run: pl.DataFrame,
    qrels: pl.DataFrame,
    measures: Iterable[str] = DEFAULT_MEASURES,
    *,
    rel_level: int = 2,
    complete: bool = True,
) -> pl.DataFrame:
    """Per-query values ``query_id, measure, k, value``, as ``retrieval_metrics.per_query``.

    ``run`` has ``query_id, doc_id, score`` (scores not null, each pair once); ``qrels`` has
    ``query_id, doc_id, grade``.
    """
    wanted = {parse_measure(m) for m in measures}
    ks = sorted({k for _, k in wanted if k is not None})
    uncut = any(k is None for _, k in wanted)
    run = run.select(list(RUN_SCHEMA)).cast(RUN_SCHEMA)
    qrels = qrels.select(list(QRELS_SCHEMA)).cast(QRELS_SCHEMA)

    scored = (
        qrels.group_by("query_id")
        .agg((pl.col("grade") >= rel_level).sum().alias("n_rel"))
        .filter(pl.col("n_rel") > 0)
    )
    if not complete:
        scored = scored.filter(pl.col("query_id").is_in(run["query_id"].unique().implode()))
    scored_ids = scored["query_id"].implode()

    graded = pl.col("grade").fill_null(0)
    keep = pl.col("rank") <= (max(ks) if ks else 0)
    if uncut:
        keep = keep | pl.col("relevant")
    ranked = (
        run.lazy()
        .filter(pl.col("query_id").is_in(scored_ids))
        .join(qrels.lazy(), on=["query_id", "doc_id"], how="left")
        .select(
            "query_id",
            pl.struct("score", "doc_id")
            .rank("ordinal", descending=True)
            .over("query_id")
            .cast(pl.Int64)
            .alias("rank"),
            graded.clip(lower_bound=0).alias("gain"),
            (graded >= rel_level).alias("relevant"),
        )
        .filter(keep)
        .collect()
    )

    parts = []
    if ks:
        ideal = (
            qrels.filter((pl.col("grade") > 0) & pl.col("query_id").is_in(scored_ids))
            .select(
                "query_id",
                pl.col("grade").alias("gain"),
                pl.col("grade")
                .rank("ordinal", descending=True)
                .over("query_id")
                .cast(pl.Int64)
                .alias("rank"),
            )
            .filter(pl.col("rank") <= max(ks))
        )
        parts.append(_cut_values(ranked, ideal, scored, ks))
    if uncut:
        parts.append(_whole_run_values(ranked, scored))

    keys = pl.DataFrame(
        [{"measure": name, "k": k} for name, k in sorted(wanted, key=lambda p: (p[0], p[1] or 0))],
        schema={"measure": pl.String, "k": pl.Int32},
    )
    values = pl.concat([part.select(list(VALUE_SCHEMA)).cast(VALUE_SCHEMA) for part in parts])
    return values.join(keys, on=["measure", "k"], how="semi", nulls_equal=True).sort(
        "query_id", "measure", "k"
    )
