"""The retrieval run asset: the run's record is written, then the system retrieves for every item."""

import dagster as dg
import polars as pl

from rag_eval_pipeline.defs.metadata import evaluation_asset, run_link, table_metadata
from rag_eval_pipeline.defs.partitions import night_and_suite
from rag_eval_pipeline.defs.resources import (
    EvalSettings,
    JudgeResource,
    SuiteRegistryResource,
    SystemResource,
    WarehouseResource,
)
from rag_eval_pipeline.lib.runs.lifecycle import begin_run
from rag_eval_pipeline.lib.runs.record import EVAL_RUN_TAG, EvalRunRecord, RunRequest
from rag_eval_pipeline.lib.systems.run import retrieval_results


def run_handle(record: EvalRunRecord, dagster_run_id: str) -> dict:
    """What the run's assets hand each other: the record (the data is in the run store)."""
    return {
        "eval_run_id": record.eval_run_id,
        "record": record.as_json(),
        "dagster_run_id": dagster_run_id,
    }


def record_of(handle: dict) -> EvalRunRecord:
    return EvalRunRecord.from_json(handle["record"])


def build_retrieval_run(partitions: dg.PartitionsDefinition) -> dg.AssetsDefinition:
    @evaluation_asset(
        "retrieval_run",
        partitions=partitions,
        group="system_runs",
        kinds={"parquet", "bm25"},
        code_version="retrieval-v2",
    )
    def retrieval_run(
        context: dg.AssetExecutionContext,
        corpus_snapshot: dict,
        golden_set: dict,
        settings: EvalSettings,
        suites: SuiteRegistryResource,
        system: SystemResource,
        judge: JudgeResource,
        warehouse_db: WarehouseResource,
    ):
        """Top-k passages for every golden question from the system under test.

        Starts the evaluation run: its record (suite, night, both digests, system and judge
        configurations, every run setting that can change a figure; ``lib.runs.record``) gives the
        ``eval_run_id`` and is written to the warehouse with status ``started`` before the system
        is asked anything. Results go to ``retrieval_results`` with each passage's version status.
        """
        night, suite_name = night_and_suite(context)
        record = EvalRunRecord(
            suite=suite_name,
            night=night,
            snapshot_id=corpus_snapshot["snapshot_id"],
            corpus_digest=corpus_snapshot["corpus_digest"],
            golden_set=golden_set["golden_set"],
            golden_digest=golden_set["golden_digest"],
            system_config=system.config(),
            judge_config=judge.config(),
            settings=settings.run_settings(suites.suite(suite_name)),
            request=RunRequest.from_tags(context.run.tags),
        )
        context.instance.add_run_tags(context.run_id, {EVAL_RUN_TAG: record.eval_run_id})
        store = warehouse_db.run_store()
        begin_run(warehouse_db.warehouse(), store, record, context.run_id)
        passages = store.read_table(store.corpus_dir(record.corpus_digest), "corpus_passages")
        items = store.read_table(store.golden_dir(record.golden_digest), "golden_items")
        results = retrieval_results(
            system.build(passages), items.sort("line"), passages, record.settings.retrieval_depth
        ).with_columns(eval_run_id=pl.lit(record.eval_run_id))
        store.write_table(store.run_dir(record.eval_run_id), "retrieval_results", results)
        return dg.Output(
            run_handle(record, context.run_id),
            metadata={
                **table_metadata(results, "retrieval_results"),
                "eval_run_id": record.eval_run_id,
                "dagster_run": run_link(context.run_id),
                "suite": suite_name,
                "corpus_digest": record.corpus_digest,
                "golden_digest": record.golden_digest,
                "system_id": record.system_id,
                "system_config": dg.MetadataValue.json(dict(record.system_config)),
                "system_config_digest": record.system_config_digest,
                "settings": dg.MetadataValue.json(record.settings.as_dict()),
                "settings_digest": record.settings.digest,
                "items_without_results": items.height - results["item_id"].n_unique(),
            },
        )

    return retrieval_run
