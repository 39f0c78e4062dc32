"""The corpus snapshot asset: the library as it stood, pinned by its content digest."""

import datetime as dt

import dagster as dg

from rag_eval_pipeline.defs.metadata import counts, evaluation_asset, table_metadata
from rag_eval_pipeline.defs.partitions import night_and_suite
from rag_eval_pipeline.defs.resources import SuiteRegistryResource, WarehouseResource
from rag_eval_pipeline.lib.inputs.corpus import choose_snapshot, load_snapshot, snapshot_tables
from rag_eval_pipeline.lib.runs.registry import utc_now
from rag_eval_pipeline.lib.store.staging import stage_tables


def build_corpus_snapshot(partitions: dg.PartitionsDefinition) -> dg.AssetsDefinition:
    @evaluation_asset(
        "corpus_snapshot",
        partitions=partitions,
        group="inputs",
        kinds={"parquet", "polars"},
        code_version="corpus-v2",
        check_specs=[
            dg.AssetCheckSpec(
                "has_current_passages",
                asset="corpus_snapshot",
                blocking=True,
                description="At least one passage of a current document can be retrieved.",
            )
        ],
    )
    def corpus_snapshot(
        context: dg.AssetExecutionContext,
        suites: SuiteRegistryResource,
        warehouse_db: WarehouseResource,
    ):
        """The suite's library snapshot in force on the partition's night.

        Loads the newest snapshot folder of the suite dated on or before the night (or the one the
        suite names), verifies it against its manifest digest (a mismatch fails before anything is
        written), splits documents into passages with stable versioned ids, and stages them in the
        run store once per digest (``corpus_snapshots``, ``corpus_documents``,
        ``corpus_passages``). The content digest is the asset's data version, so downstream assets
        go stale when the corpus changes.
        """
        night, suite_name = night_and_suite(context)
        suite = suites.suite(suite_name)
        folder = choose_snapshot(suite.corpus_root, dt.date.fromisoformat(night), suite.snapshot)
        snapshot = load_snapshot(folder)
        tables = snapshot_tables(snapshot, loaded_at=utc_now())
        store = warehouse_db.run_store()
        stage_tables(store, store.corpus_dir(snapshot.corpus_digest), tables)
        summary = tables["corpus_snapshots"].row(0, named=True)
        yield dg.Output(
            {
                "suite": suite_name,
                "snapshot_id": snapshot.snapshot_id,
                "corpus_digest": snapshot.corpus_digest,
                "snapshot_dir": str(folder),
            },
            data_version=dg.DataVersion(snapshot.corpus_digest),
            metadata={
                **table_metadata(tables["corpus_passages"], "corpus_passages"),
                "suite": suite_name,
                "corpus_digest": snapshot.corpus_digest,
                "snapshot_id": snapshot.snapshot_id,
                "snapshot_dir": str(folder),
                "frozen_at": snapshot.frozen_at or "",
                "documents": snapshot.document_count,
                "documents_by_status": dg.MetadataValue.json(
                    counts(tables["corpus_documents"], "status")
                ),
                "current_passages": summary["current_passage_count"],
            },
        )
        yield dg.AssetCheckResult(
            check_name="has_current_passages",
            passed=summary["current_passage_count"] > 0,
            severity=dg.AssetCheckSeverity.ERROR,
            metadata={"current_passages": summary["current_passage_count"]},
        )

    return corpus_snapshot
