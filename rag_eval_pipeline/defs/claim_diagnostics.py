"""The claim diagnostics asset: judged answers checked claim by claim against reference answers."""

import dagster as dg
import polars as pl

from rag_eval_pipeline.defs.metadata import (
    evaluation_asset,
    markdown_table,
    provenance,
    table_metadata,
)
from rag_eval_pipeline.defs.resources import JudgeResource, SuiteRegistryResource, WarehouseResource
from rag_eval_pipeline.defs.retrieval_run import record_of
from rag_eval_pipeline.lib.inputs.traces import load_traces
from rag_eval_pipeline.lib.judges.budget import earlier_tokens, usage_row
from rag_eval_pipeline.lib.judges.diagnostics import diagnose, diagnostic_items, judged_traces
from rag_eval_pipeline.lib.judges.protocol import PaidJudge
from rag_eval_pipeline.lib.judges.run import passage_texts
from rag_eval_pipeline.lib.store.staging import staged_passages

STEP = "claim_diagnostics"
HEADLINE = ("claim_recall", "context_claim_recall", "context_precision", "hallucination")


def build_claim_diagnostics(partitions: dg.PartitionsDefinition) -> dg.AssetsDefinition:
    @evaluation_asset(
        STEP,
        partitions=partitions,
        group="judging",
        kinds={"parquet", "polars"},
        code_version="claim-diagnostics-v1",
    )
    def claim_diagnostics(
        context: dg.AssetExecutionContext,
        judge_sample: dict,
        suites: SuiteRegistryResource,
        judge: JudgeResource,
        warehouse_db: WarehouseResource,
    ):
        """RAGChecker-style diagnostics of the judged answers to answerable golden items (and of
        production traces that name one): claim recall, context claim recall, context precision,
        context utilisation, noise sensitivity, hallucination, self-knowledge and faithfulness,
        CONTRADICTED and UNSUPPORTED kept apart (``lib.judges.diagnostics``). Every question put
        to the judge goes to ``diagnostic_verdicts``, the per-item metrics to
        ``diagnostic_item_metrics``, their means per source to ``diagnostic_metrics``; the judge
        shares the run's budget with ``judge_sample``."""
        record = record_of(judge_sample)
        store = warehouse_db.run_store()
        run_dir = store.run_dir(record.eval_run_id)
        verdicts, chosen, gold = diagnosis_inputs(store, record, suites.suite(record.suite))
        the_judge = judge.build()
        usage = store.read_table(run_dir, "judge_usage").filter(pl.col("step") != STEP)
        # Its own spending is a part of its own: the judging shards' parts stay as they are.
        if isinstance(the_judge, PaidJudge):
            the_judge.charge_earlier(earlier_tokens(usage, STEP))
        settings = record.settings
        tables = diagnose(
            the_judge, chosen, verdicts, gold, rel_level=settings.rel_level, seed=settings.seed
        )
        run_id = pl.lit(record.eval_run_id).alias("eval_run_id")
        for table, frame in (
            ("diagnostic_verdicts", tables.verdicts),
            ("diagnostic_item_metrics", tables.item_metrics),
            ("diagnostic_metrics", tables.metrics),
        ):
            store.write_table(run_dir, table, frame.with_columns(run_id))
        own = pl.DataFrame([usage_row(the_judge, STEP)]).with_columns(run_id)
        store.write_table(run_dir, "judge_usage", own, part=STEP)
        headline = tables.metrics.filter(pl.col("metric").is_in(list(HEADLINE))).select(
            "scope_value", "metric", "value", "ci_low", "ci_high", "n_items"
        )
        return dg.Output(
            judge_sample,
            metadata={
                **table_metadata(tables.metrics, "diagnostic_metrics"),
                **provenance(record),
                "diagnosed_items": len(chosen),
                "judge_questions": tables.verdicts.height,
                "headline": dg.MetadataValue.md(markdown_table(headline)),
            },
        )

    return claim_diagnostics


def diagnosis_inputs(store, record, suite) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """The run's verdicts, the judged answers chosen for diagnosis (golden answers and the
    production traces naming a golden item, with their passages' texts), and the gold."""
    run_dir = store.run_dir(record.eval_run_id)
    golden_dir = store.golden_dir(record.golden_digest)
    verdicts = store.read_table(run_dir, "judge_verdicts")
    production = load_traces(suite.trace_store) if suite.trace_store else None
    traces = judged_traces(
        verdicts, store.read_table(run_dir, "generation_results"), production, record.corpus_digest
    )
    texts = passage_texts(
        staged_passages(store, set(traces["corpus_digest"]) | {record.corpus_digest})
    )
    chosen = diagnostic_items(traces, store.read_table(golden_dir, "golden_items"), texts)
    return verdicts, chosen, store.read_table(golden_dir, "golden_gold")
