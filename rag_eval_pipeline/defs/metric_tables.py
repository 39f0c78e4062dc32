"""Metric table assets: retrieval and generation measures and judge calibration.

Per-item values come from DuckDB SQL in ``sql/`` and Polars; aggregation with intervals is a
separate step (``lib.metrics``). The tables go to the run store; the summary step loads them.
"""

import dagster as dg
import polars as pl

from rag_eval_pipeline.defs.metadata import (
    evaluation_asset,
    markdown_headline,
    markdown_table,
    provenance,
    sweep_metadata,
    table_metadata,
)
from rag_eval_pipeline.defs.resources import SuiteRegistryResource, WarehouseResource
from rag_eval_pipeline.defs.retrieval_run import record_of
from rag_eval_pipeline.lib.judges.calibration import calibrate, load_human_labels
from rag_eval_pipeline.lib.judges.estimates import judge_trust_estimates
from rag_eval_pipeline.lib.metrics.generation import generation_tables
from rag_eval_pipeline.lib.metrics.retrieval import retrieval_tables
from rag_eval_pipeline.lib.reporting.summary import HEADLINE_GENERATION, HEADLINE_RETRIEVAL
from rag_eval_pipeline.lib.store.sql import load_sql
from rag_eval_pipeline.lib.systems.calls import SYSTEM_ERROR


def build_retrieval_metrics(partitions: dg.PartitionsDefinition) -> dg.AssetsDefinition:
    @evaluation_asset(
        "retrieval_metrics",
        partitions=partitions,
        group="metrics",
        kinds={"duckdb", "sql", "polars"},
        code_version="retrieval-metrics-v4",
    )
    def retrieval_metrics(
        context: dg.AssetExecutionContext, retrieval_run: dict, warehouse_db: WarehouseResource
    ):
        """Success@k, R@k, P@k, RR@k, AP, nDCG@k (grade gain, and 2^grade - 1 labelled nDCG_exp)
        and Stale@k over answerable items with a relevant gold passage, with Wilson intervals
        for proportions and bootstrap intervals for means; overall, per stratum and per
        language. Per-item values go to ``retrieval_item_metrics`` for paired comparisons. Items
        whose call ended in a system error (``system_calls``) are in no measure."""
        record = record_of(retrieval_run)
        settings = record.settings
        store = warehouse_db.run_store()
        run_dir, golden_dir = (
            store.run_dir(record.eval_run_id),
            store.golden_dir(record.golden_digest),
        )
        failed = (
            store.read_table(run_dir, "system_calls")
            .filter(pl.col("outcome") == SYSTEM_ERROR)
            .select("item_id")
        )
        per_item, table, excluded = retrieval_tables(
            store.read_table(run_dir, "retrieval_results").join(failed, on="item_id", how="anti"),
            store.read_table(golden_dir, "golden_items").join(failed, on="item_id", how="anti"),
            store.read_table(golden_dir, "golden_gold").join(failed, on="item_id", how="anti"),
            cutoffs=settings.cutoffs,
            rel_level=settings.rel_level,
            seed=settings.seed,
            resamples=settings.bootstrap_resamples,
        )
        scope = pl.lit(record.eval_run_id).alias("eval_run_id")
        table = table.with_columns(scope)
        store.write_table(run_dir, "retrieval_item_metrics", per_item.with_columns(scope))
        store.write_table(run_dir, "retrieval_metrics", table)
        headline = table.filter(
            (pl.col("scope") == "overall") & pl.col("measure").is_in(list(HEADLINE_RETRIEVAL))
        )
        return dg.Output(
            retrieval_run,
            metadata={
                **table_metadata(table, "retrieval_metrics"),
                **provenance(record),
                "rel_level": settings.rel_level,
                "excluded_items_without_relevant_gold": len(excluded),
                "excluded_items_with_system_errors": failed.height,
                "headline": dg.MetadataValue.md(
                    markdown_headline(headline, "measure", HEADLINE_RETRIEVAL)
                ),
                "sql": dg.MetadataValue.md(
                    f"```sql\n{load_sql('retrieval_per_query')}\n{load_sql('retrieval_stale')}\n```"
                ),
            },
        )

    return retrieval_metrics


def build_generation_metrics(partitions: dg.PartitionsDefinition) -> dg.AssetsDefinition:
    @evaluation_asset(
        "generation_metrics",
        partitions=partitions,
        group="metrics",
        kinds={"duckdb", "polars"},
        code_version="generation-metrics-v2",
    )
    def generation_metrics(
        context: dg.AssetExecutionContext,
        generation_run: dict,
        judge_sample: dict,
        warehouse_db: WarehouseResource,
    ):
        """Claim-level faithfulness with the CONTRADICTED and UNSUPPORTED rates apart, citation
        validity and support, correctness (must_mention, SQuAD EM and F1), confident-wrong rate,
        refusal rates with each no-answer stratum apart, the guardrails one by one, the
        sufficiency x correctness 2x2 and the abstention sweep with its recommended threshold;
        items that ended in a system error are in no rate, counted with the latency, tokens and
        cost in the ``operations`` scope."""
        record = record_of(generation_run)
        store = warehouse_db.run_store()
        run_dir, golden_dir = (
            store.run_dir(record.eval_run_id),
            store.golden_dir(record.golden_digest),
        )
        verdicts = store.read_table(run_dir, "judge_verdicts")
        tables = generation_tables(
            store.read_table(golden_dir, "golden_items"),
            store.read_table(run_dir, "generation_results"),
            store.read_table(golden_dir, "golden_gold"),
            verdicts.filter(pl.col("source") == "golden"),
            rel_level=record.settings.rel_level,
            seed=record.settings.seed,
            calls=store.read_table(run_dir, "system_calls"),
        )
        scope = pl.lit(record.eval_run_id).alias("eval_run_id")
        for table, frame in (
            ("generation_item_metrics", tables.item_metrics),
            ("generation_metrics", tables.metrics),
            ("sufficiency_correctness", tables.sufficiency),
            ("abstention_sweep", tables.sweep),
        ):
            store.write_table(run_dir, table, frame.with_columns(scope))
        return dg.Output(
            generation_run,
            metadata={
                **table_metadata(tables.metrics.with_columns(scope), "generation_metrics"),
                **provenance(record),
                **sweep_metadata(tables.recommendation()),
                # The printed summary's generation figures (answerable items), with intervals.
                "headline": dg.MetadataValue.md(
                    markdown_headline(
                        tables.metrics.filter(
                            (pl.col("scope") == "overall") & (pl.col("scope_value") == "answerable")
                        ),
                        "metric",
                        HEADLINE_GENERATION,
                    )
                ),
                "sufficiency_x_correctness": dg.MetadataValue.md(
                    markdown_table(tables.sufficiency)
                ),
            },
        )

    return generation_metrics


def build_judge_calibration(partitions: dg.PartitionsDefinition) -> dg.AssetsDefinition:
    @evaluation_asset(
        "judge_calibration",
        partitions=partitions,
        group="judging",
        kinds={"parquet"},
        code_version="judge-calibration-v3",
    )
    def judge_calibration(
        context: dg.AssetExecutionContext,
        judge_sample: dict,
        suites: SuiteRegistryResource,
        warehouse_db: WarehouseResource,
    ):
        """Agreement of tonight's judge with the suite's human labels on sampled claims:
        agreement with its Wilson interval and Cohen's kappa. Without labels, or with kappa below
        the bar, the judge is recorded as not calibrated. Every judge-based rate (faithfulness,
        contradicted and unsupported claim rates, citation support) is estimated twice in
        ``judge_rate_estimates``: by the judge alone, and prediction-powered (PPI++) from the
        judge's verdicts and the human labels (``lib.judges.estimates``); with the judge's
        stability over repeats. Judge gates rest on the PPI bound once enough labels matched."""
        record = record_of(judge_sample)
        suite = suites.suite(record.suite)
        labels = load_human_labels(suite.human_labels) if suite.human_labels else None
        store = warehouse_db.run_store()
        run_dir = store.run_dir(record.eval_run_id)
        verdicts = store.read_table(run_dir, "judge_verdicts")
        row = calibrate(verdicts, labels, judge_id=record.judge_id)
        table = pl.DataFrame([{**row, "eval_run_id": record.eval_run_id}])
        store.write_table(run_dir, "judge_calibration", table)
        estimates = judge_trust_estimates(
            verdicts,
            store.read_table(run_dir, "judge_repeat_verdicts"),
            labels,
            store.read_table(store.golden_dir(record.golden_digest), "golden_items"),
            judge_repeats=record.settings.judge_repeats,
            seed=record.settings.seed,
            resamples=record.settings.bootstrap_resamples,
        ).with_columns(eval_run_id=pl.lit(record.eval_run_id))
        store.write_table(run_dir, "judge_rate_estimates", estimates)
        return dg.Output(
            judge_sample,
            metadata={
                **table_metadata(table, "judge_calibration"),
                **provenance(record),
                "calibrated": row["calibrated"],
                # Kappa and agreement with what they were measured on, as the summary prints
                # them ("agreement … 95% CI …, Cohen's kappa … (n=… labelled claims)").
                "kappa": row["kappa"],
                "agreement": row["agreement"],
                "agreement_ci": dg.MetadataValue.text(
                    f"{row['ci_low']:.4f} to {row['ci_high']:.4f} (wilson95)"
                    if row["ci_low"] is not None
                    else "not measured"
                ),
                "labelled_claims": row["n"],
                "reason": row["reason"],
                # Every column AUDITORS.md names, every scope the summary prints (the production
                # traces too), and each n's unit; an estimate without a value says so and why.
                "judge_rate_estimates": dg.MetadataValue.md(
                    markdown_table(
                        estimates.select(
                            "scope",
                            "scope_value",
                            "metric",
                            "method",
                            "value",
                            "ci_low",
                            "ci_high",
                            "n_judged",
                            "n_labelled",
                            "unit",
                            "ppi_lambda",
                            "reason",
                        ),
                        measured="value",
                    )
                ),
            },
        )

    return judge_calibration
