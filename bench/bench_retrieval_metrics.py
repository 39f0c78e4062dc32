"""Time the retrieval-metric kernel against ranx and pytrec_eval on a large synthetic run.

Run: ``.venv/bin/python bench/bench_retrieval_metrics.py [--queries N] [--depth D] [--seed S]``
(default 100,000 queries x 100 results).

Synthetic data, seeded: every query retrieves ``depth`` distinct documents with scores rounded to
5 decimals (so a few queries hold tied scores); each retrieved document is judged relevant with a
probability that grows with its score (grades 1-3), a few are judged 0, and every query has one
more relevant document that was not retrieved: about 5 relevant documents per query. Relevance
threshold 1 (trec_eval's and ranx's default), so every definition below can match exactly.

What is timed (building the reference libraries' input objects is excluded, as are imports and
numba compilation, which a tiny warm-up run absorbs):

- ours: one ``retrieval_metrics.per_query`` call for nDCG@10, RR@10, R@10 and Success@10 (the
  DuckDB SQL kernel ``sql/retrieval_per_query.sql``, Polars frames in and out);
- ranx ``evaluate`` for ndcg@10, mrr@10, recall@10, hit_rate@10 (numba, both cores);
- pytrec_eval ``RelevanceEvaluator.evaluate`` for ndcg_cut.10, recip_rank, recall.10,
  success.10 (the evaluator's construction, which parses the qrels, is timed apart).

Comparability: trec_eval's ``recip_rank`` has no cut-off; RR@10 equals it when it is at least
1/10 and is 0 otherwise, so the pytrec_eval figure is truncated that way before comparing.
ranx does not break score ties by doc id (trec_eval does), so on the queries with ties its means
can differ in the last digits; the script also scores ranx on a copy of the run whose scores
encode trec_eval's order (a strictly decreasing score per rank), where every mean must agree.
"""

import argparse
import gc
import time
import warnings
from collections.abc import Callable

import numpy as np
import polars as pl

from rag_eval_pipeline.lib.inputs.formats import trec_ranks
from rag_eval_pipeline.lib.metrics.retrieval import per_query

MEASURES = ("nDCG@10", "RR@10", "R@10", "Success@10")
RANX_NAMES = {
    "nDCG@10": "ndcg@10",
    "RR@10": "mrr@10",
    "R@10": "recall@10",
    "Success@10": "hit_rate@10",
}
TREC_NAMES = {
    "nDCG@10": "ndcg_cut_10",
    "RR@10": "recip_rank",
    "R@10": "recall_10",
    "Success@10": "success_10",
}
REL_LEVEL = 1
TOLERANCE = 1e-6


def synthetic(queries: int, depth: int, seed: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """A seeded run (``query_id, doc_id, score``) and graded qrels (``query_id, doc_id, grade``)."""
    rng = np.random.default_rng(seed)
    query = np.repeat(np.arange(queries), depth)
    position = np.tile(np.arange(depth), queries)
    # Distinct documents within a query: a per-query offset plus a prime stride.
    document = (rng.integers(0, 1_000_000, queries)[query] + position * 7919) % 1_000_000
    score = np.round(rng.random(queries * depth) * 30, 5)
    run = pl.DataFrame(
        {
            "query_id": pl.Series(query).cast(pl.String).str.zfill(6).str.pad_start(7, "q"),
            "doc_id": pl.Series(document).cast(pl.String).str.zfill(7).str.pad_start(8, "d"),
            "score": score,
        }
    )
    draw = rng.random(queries * depth)
    relevant = draw < 0.16 * (score / 30) ** 3
    judged_irrelevant = (draw > 0.95) & ~relevant
    grade = np.where(relevant, rng.integers(1, 4, queries * depth), 0)
    judged = run.with_columns(grade=grade).filter(pl.Series(relevant | judged_irrelevant))
    unretrieved = pl.DataFrame(
        {
            "query_id": run["query_id"].gather(np.arange(queries) * depth),
            "doc_id": pl.Series(np.arange(queries))
            .cast(pl.String)
            .str.zfill(7)
            .str.pad_start(8, "u"),
            "grade": rng.integers(1, 4, queries),
        }
    )
    qrels = pl.concat([judged.select("query_id", "doc_id", "grade"), unretrieved])
    return run, qrels


def timed(action: Callable[[], object], repeat: int) -> tuple[object, float]:
    """The action's result and its best wall time over ``repeat`` runs (the machine is shared,
    so the minimum is the figure least disturbed by other work)."""
    best = float("inf")
    result = None
    for _ in range(repeat):
        result = None
        gc.collect()
        start = time.perf_counter()
        result = action()
        best = min(best, time.perf_counter() - start)
    return result, best


def means_of(values: pl.DataFrame) -> dict[str, float]:
    labelled = values.with_columns(
        pl.when(pl.col("k").is_null())
        .then(pl.col("measure"))
        .otherwise(pl.concat_str("measure", pl.lit("@"), pl.col("k").cast(pl.String)))
        .alias("label")
    )
    return dict(labelled.group_by("label").agg(pl.col("value").mean()).iter_rows())


def nested(frame: pl.DataFrame, value: str) -> dict[str, dict[str, float]]:
    """``{query: {doc: value}}``, the input pytrec_eval and ranx take."""
    grouped = frame.group_by("query_id").agg("doc_id", value)
    return {
        query: dict(zip(docs, values, strict=True)) for query, docs, values in grouped.iter_rows()
    }


def ranx_objects(qrels: dict, run: dict):
    from ranx import Qrels, Run

    return Qrels(qrels), Run(run)


def ranx_timed(qrels: dict, run: dict, repeat: int) -> tuple[dict[str, float], float]:
    """ranx means for the four measures and the best time of ``evaluate`` alone."""
    import ranx

    ranx_qrels, ranx_run = ranx_objects(qrels, run)
    metrics = list(RANX_NAMES.values())
    return timed(
        lambda: ranx.evaluate(ranx_qrels, ranx_run, metrics, save_results_in_run=False), repeat
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=100_000)
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--seed", type=int, default=20261001)
    parser.add_argument("--repeat", type=int, default=3, help="timed runs each; best is shown")
    args = parser.parse_args()

    warnings.filterwarnings("ignore")
    import pytrec_eval

    run, qrels = synthetic(args.queries, args.depth, args.seed)
    tied = run.group_by("query_id", "score").len().filter(pl.col("len") > 1)["query_id"].n_unique()
    print(
        f"{args.queries:,} queries x {args.depth} results = {run.height:,} run rows; "
        f"{qrels.height:,} qrels rows, "
        f"{qrels.filter(pl.col('grade') >= REL_LEVEL).height / args.queries:.2f} relevant per query; "
        f"{tied:,} queries with tied scores"
    )

    small_run, small_qrels = synthetic(50, 20, 1)
    per_query(small_run, small_qrels, MEASURES, rel_level=REL_LEVEL, complete=False)
    ranx_timed(nested(small_qrels, "grade"), nested(small_run, "score"), 1)

    ours, ours_seconds = timed(
        lambda: per_query(run, qrels, MEASURES, rel_level=REL_LEVEL, complete=False), args.repeat
    )
    rr_uncut = means_of(per_query(run, qrels, ["RR"], rel_level=REL_LEVEL, complete=False))

    qrels_dict = nested(qrels, "grade")
    run_dict = nested(run, "score")
    ordered = trec_ranks(run).with_columns((-pl.col("rank")).cast(pl.Float64).alias("score"))
    ordered_dict = nested(ordered, "score")

    ranx_means, ranx_seconds = ranx_timed(qrels_dict, run_dict, args.repeat)
    ranx_ordered_means, _ = ranx_timed(qrels_dict, ordered_dict, 1)

    trec_measures = {"ndcg_cut.10", "recip_rank", "recall.10", "success.10"}
    evaluator, build_seconds = timed(
        lambda: pytrec_eval.RelevanceEvaluator(
            qrels_dict, trec_measures, relevance_level=REL_LEVEL
        ),
        1,
    )
    trec_values, trec_seconds = timed(lambda: evaluator.evaluate(run_dict), args.repeat)
    trec_means = {
        name: float(np.mean([values[trec] for values in trec_values.values()]))
        for name, trec in TREC_NAMES.items()
    }
    trec_means["RR@10"] = float(
        np.mean([v["recip_rank"] if v["recip_rank"] >= 0.1 else 0.0 for v in trec_values.values()])
    )
    trec_rr_uncut = float(np.mean([v["recip_rank"] for v in trec_values.values()]))

    ours_means = means_of(ours)
    print()
    print(
        f"{'measure':<11} {'ours':>10} {'ranx':>10} {'ranx*':>10} {'pytrec':>10} {'ranx-ours':>10}"
    )
    failures = []
    for name in MEASURES:
        ours_mean = ours_means[name]
        row = [ours_mean, ranx_means[RANX_NAMES[name]]]
        row += [ranx_ordered_means[RANX_NAMES[name]], trec_means[name]]
        print(
            f"{name:<11} "
            + " ".join(f"{value:10.6f}" for value in row)
            + f" {row[1] - ours_mean:10.1e}"
        )
        for label, value in (("ranx*", row[2]), ("pytrec_eval", row[3])):
            if abs(value - ours_mean) > TOLERANCE:
                failures.append(f"{name}: ours {ours_mean:.8f} vs {label} {value:.8f}")
        if abs(row[1] - ours_mean) > TOLERANCE:
            print(
                f"  ranx differs by {row[1] - ours_mean:+.2e}: it does not break score ties by doc id"
            )
    print(f"{'RR':<11} {rr_uncut['RR']:10.6f} {'':>21} {trec_rr_uncut:10.6f}")
    if abs(rr_uncut["RR"] - trec_rr_uncut) > TOLERANCE:
        failures.append(f"RR: ours {rr_uncut['RR']:.8f} vs pytrec_eval {trec_rr_uncut:.8f}")
    print(
        "ranx* = ranx on the run re-scored in trec_eval's order; pytrec RR@10 = recip_rank "
        "truncated below 1/10"
    )
    print()
    print(f"best of {args.repeat} timed runs each")
    print(f"ours (per_query, DuckDB SQL)    {ours_seconds:8.2f} s")
    print(f"ranx evaluate                   {ranx_seconds:8.2f} s")
    print(
        f"pytrec_eval evaluate            {trec_seconds:8.2f} s (+ {build_seconds:.2f} s to build)"
    )
    print()
    print(f"ranx / ours        {ranx_seconds / ours_seconds:6.2f}x")
    print(f"pytrec_eval / ours {trec_seconds / ours_seconds:6.2f}x")
    if failures:
        raise SystemExit("means disagree:\n" + "\n".join(failures))
    print("means agree to 1e-6 where the definitions match")


if __name__ == "__main__":
    main()
