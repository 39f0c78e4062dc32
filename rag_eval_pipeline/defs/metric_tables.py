"""Metric table assets: retrieval and generation measures and judge calibration.

Per-item values come from DuckDB SQL in ``sql/`` and Polars; aggregation with intervals is a
separate step in ``lib``. Every row carries its ``eval_run_id``.
"""

import dagster as dg
import polars as pl

from rag_eval_pipeline.defs.metadata import TEAM, markdown_table, table_metadata
from rag_eval_pipeline.defs.partitions import nightly_partitions
from rag_eval_pipeline.defs.resources import EvalSettings, WarehouseResource, project_path
from rag_eval_pipeline.lib import calibration, charts, report, warehouse
from rag_eval_pipeline.lib import generation_metrics as gm
from rag_eval_pipeline.lib import retrieval_metrics as rm
from rag_eval_pipeline.lib.sql import load_sql

RETRIEVAL_MEASURES = ("Success", "R", "P", "RR", "nDCG", "nDCG_exp")


def _scoped(per_item: pl.DataFrame, items: pl.DataFrame, resamples: int, seed: int) -> pl.DataFrame:
    """Aggregate per-item values overall, per stratum and per language."""
    labelled = per_item.join(
        items.select(pl.col("item_id").alias("query_id"), "stratum", "language"), on="query_id"
    )
    frames = [
        rm.aggregate(labelled, seed=seed, resamples=resamples).with_columns(
            scope=pl.lit("overall"), scope_value=pl.lit("answerable")
        )
    ]
    for column in ("stratum", "language"):
        frames.append(
            rm.aggregate(labelled, by=[column], seed=seed, resamples=resamples)
            .rename({column: "scope_value"})
            .with_columns(scope=pl.lit(column))
        )
    return pl.concat(frames, how="diagonal")


@dg.asset(
    partitions_def=nightly_partitions,
    group_name="metrics",
    owners=[TEAM],
    kinds={"duckdb", "sql", "polars"},
    code_version="retrieval-metrics-v2",
)
def retrieval_metrics(
    context: dg.AssetExecutionContext,
    retrieval_run: dict,
    settings: EvalSettings,
    warehouse_db: WarehouseResource,
):
    """Success@k, R@k, P@k, RR@k, AP, nDCG@k (grade gain, and 2^grade - 1 labelled nDCG_exp) and
    Stale@k over answerable items with a relevant gold passage, with Wilson intervals for
    proportions and bootstrap intervals for means; overall, per stratum and per language.
    Per-item values go to ``retrieval_item_metrics`` for paired comparisons."""
    run_id = retrieval_run["eval_run_id"]
    golden_digest = retrieval_run["golden_digest"]
    cutoffs = sorted(set(settings.cutoffs))
    measures = [f"{m}@{k}" for m in RETRIEVAL_MEASURES for k in cutoffs] + ["AP", "RR"]
    with warehouse_db.connect() as connection:
        items = warehouse.read_frame(
            connection,
            "SELECT item_id, stratum, language FROM golden_items "
            "WHERE golden_digest = $golden AND answerable",
            {"golden": golden_digest},
        )
        run = warehouse.read_frame(
            connection,
            "SELECT item_id AS query_id, passage_id AS doc_id, score FROM retrieval_results "
            "WHERE eval_run_id = $run",
            {"run": run_id},
        )
        qrels = warehouse.read_frame(
            connection,
            "SELECT item_id AS query_id, passage_id AS doc_id, grade FROM golden_gold "
            "WHERE golden_digest = $golden AND item_id IN (SELECT item_id FROM golden_items "
            "WHERE golden_digest = $golden AND answerable)",
            {"golden": golden_digest},
        )
        per_item = rm.per_query(
            run, qrels, measures, rel_level=settings.rel_level, complete=True, connection=connection
        )
        stale = warehouse.read_frame(
            connection,
            load_sql("retrieval_stale"),
            {
                "eval_run_id": run_id,
                "golden_digest": golden_digest,
                "rel_level": settings.rel_level,
                "ks": cutoffs,
            },
        ).with_columns(pl.col("k").cast(pl.Int32))
        per_item = pl.concat([per_item, stale.select(per_item.columns)])
        excluded = rm.excluded_queries(qrels, rel_level=settings.rel_level)
        table = _scoped(per_item, items, settings.bootstrap_resamples, settings.seed).with_columns(
            eval_run_id=pl.lit(run_id),
            metric=pl.col("measure"),
            measure=pl.when(pl.col("k").is_null())
            .then(pl.col("measure"))
            .otherwise(pl.format("{}@{}", "measure", "k")),
            interval_method=pl.when(pl.col("measure").is_in(["Success", "Stale"]))
            .then(pl.lit("wilson95"))
            .otherwise(pl.lit("bootstrap95")),
        )
        warehouse.replace_rows(
            connection,
            "retrieval_item_metrics",
            per_item.rename({"query_id": "item_id"}).with_columns(eval_run_id=pl.lit(run_id)),
            {"eval_run_id": run_id},
        )
        warehouse.replace_rows(connection, "retrieval_metrics", table, {"eval_run_id": run_id})
        history = report.load_history(connection, run_id)
    headline = table.filter(
        (pl.col("scope") == "overall")
        & pl.col("measure").is_in(["Success@5", "R@5", "RR@5", "nDCG@10"])
    ).select("measure", "value", "ci_low", "ci_high", "n")
    return dg.Output(
        retrieval_run,
        metadata={
            **table_metadata(table, "retrieval_metrics"),
            "eval_run_id": run_id,
            "corpus_digest": retrieval_run["corpus_digest"],
            "golden_digest": golden_digest,
            "rel_level": settings.rel_level,
            "excluded_items_without_relevant_gold": len(excluded),
            "headline": dg.MetadataValue.md(markdown_table(headline)),
            "success_at_5_trend_chart": dg.MetadataValue.md(
                charts.markdown_image(
                    "Success@5 night by night", charts.metric_trend_png(history, "Success@5")
                )
            ),
            "sql": dg.MetadataValue.md(
                "```sql\n"
                + load_sql("retrieval_per_query")
                + "\n"
                + load_sql("retrieval_stale")
                + "\n```"
            ),
        },
    )


@dg.asset(
    partitions_def=nightly_partitions,
    group_name="metrics",
    owners=[TEAM],
    kinds={"duckdb", "polars"},
    code_version="generation-metrics-v1",
)
def generation_metrics(
    context: dg.AssetExecutionContext,
    generation_run: dict,
    judge_sample: dict,
    settings: EvalSettings,
    warehouse_db: WarehouseResource,
):
    """Claim-level faithfulness with the CONTRADICTED and UNSUPPORTED rates apart, citation
    validity and support, correctness (must_mention, SQuAD EM and F1), confident-wrong rate,
    refusal rates with each no-answer stratum apart, the sufficiency x correctness 2x2 and the
    abstention sweep with its recommended threshold."""
    run_id = generation_run["eval_run_id"]
    golden_digest = generation_run["golden_digest"]
    with warehouse_db.connect() as connection:
        items = warehouse.read_frame(
            connection,
            "SELECT * FROM golden_items WHERE golden_digest = $golden",
            {"golden": golden_digest},
        )
        responses = warehouse.read_frame(
            connection, "SELECT * FROM generation_results WHERE eval_run_id = $run", {"run": run_id}
        )
        gold = warehouse.read_frame(
            connection,
            "SELECT item_id, passage_id, grade FROM golden_gold WHERE golden_digest = $golden",
            {"golden": golden_digest},
        )
        verdicts = warehouse.read_frame(
            connection,
            "SELECT * FROM judge_verdicts WHERE eval_run_id = $run AND source = 'golden'",
            {"run": run_id},
        )
        outcomes = gm.item_outcomes(items, responses, gold, rel_level=settings.rel_level)
        table = gm.scoped_summary(outcomes, gm.judged_items(verdicts), seed=settings.seed)
        guarded = outcomes.join(responses.select("item_id", "refusal_reason"), on="item_id")
        guardrail_rows = [
            {"scope": "guardrail", "scope_value": "all_items", **row}
            for row in gm.guardrail_metrics(guarded)
        ]
        table = pl.concat([table, pl.DataFrame(guardrail_rows, schema=table.schema)])
        table = table.with_columns(eval_run_id=pl.lit(run_id))
        two_by_two = gm.sufficiency_table(outcomes).with_columns(eval_run_id=pl.lit(run_id))
        refused_otherwise = responses.select(
            "item_id",
            refused_otherwise=pl.col("refused")
            & ~pl.col("refusal_reason").fill_null("").str.starts_with("evidence_check"),
        )
        sweep, recommended = gm.abstention_sweep(
            outcomes.join(refused_otherwise, on="item_id").select(
                "answerable", "best_score", "refused_otherwise"
            ),
            gm.sweep_thresholds(outcomes["best_score"].to_list()),
        )
        sweep = sweep.with_columns(eval_run_id=pl.lit(run_id))
        scope = {"eval_run_id": run_id}
        warehouse.replace_rows(
            connection,
            "generation_item_metrics",
            outcomes.with_columns(eval_run_id=pl.lit(run_id)),
            scope,
        )
        warehouse.replace_rows(connection, "generation_metrics", table, scope)
        warehouse.replace_rows(connection, "sufficiency_correctness", two_by_two, scope)
        warehouse.replace_rows(connection, "abstention_sweep", sweep, scope)
    return dg.Output(
        generation_run,
        metadata={
            **table_metadata(table, "generation_metrics"),
            "eval_run_id": run_id,
            "corpus_digest": generation_run["corpus_digest"],
            "golden_digest": golden_digest,
            "recommended_evidence_threshold": recommended,
            "abstention_sweep_chart": dg.MetadataValue.md(
                charts.markdown_image(
                    "Abstention sweep", charts.abstention_sweep_png(sweep, recommended)
                )
            ),
            "no_answer_strata_chart": dg.MetadataValue.md(
                charts.markdown_image(
                    "No-answer strata",
                    charts.stratum_bars_png(
                        table.filter(
                            (
                                (pl.col("scope") == "stratum")
                                & (pl.col("scope_value") != "answerable")
                            )
                            | (
                                (pl.col("scope") == "overall")
                                & (pl.col("scope_value") == "no_answer")
                            )
                        )
                    ),
                )
            ),
            "sufficiency_x_correctness": dg.MetadataValue.md(
                markdown_table(two_by_two.drop("eval_run_id"))
            ),
        },
    )


@dg.asset(
    partitions_def=nightly_partitions,
    group_name="judging",
    owners=[TEAM],
    kinds={"duckdb"},
    code_version="judge-calibration-v1",
)
def judge_calibration(
    context: dg.AssetExecutionContext,
    judge_sample: dict,
    settings: EvalSettings,
    warehouse_db: WarehouseResource,
):
    """Agreement of tonight's judge with human labels on sampled claims: agreement with its
    Wilson interval and Cohen's kappa. Without labels, or with kappa below the bar, the judge
    is recorded as not calibrated, and gates that rest on it say so instead of passing."""
    run_id = judge_sample["eval_run_id"]
    labels_path = project_path(settings.human_labels) if settings.human_labels else None
    labels = (
        calibration.load_human_labels(labels_path)
        if labels_path and labels_path.is_file()
        else None
    )
    with warehouse_db.connect() as connection:
        verdicts = warehouse.read_frame(
            connection, "SELECT * FROM judge_verdicts WHERE eval_run_id = $run", {"run": run_id}
        )
        row = calibration.calibrate(
            verdicts, labels, judge_id=judge_sample["judge_config"]["judge_id"]
        )
        table = pl.DataFrame([{**row, "eval_run_id": run_id}])
        warehouse.replace_rows(connection, "judge_calibration", table, {"eval_run_id": run_id})
    return dg.Output(
        judge_sample,
        metadata={
            **table_metadata(table, "judge_calibration"),
            "eval_run_id": run_id,
            "calibrated": row["calibrated"],
            "kappa": row["kappa"],
            "reason": row["reason"],
        },
    )
