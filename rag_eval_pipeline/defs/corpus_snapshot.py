"""The corpus snapshot asset: the library as it stood, pinned by its content digest."""

import datetime as dt

import dagster as dg
import polars as pl

from rag_eval_pipeline.defs.metadata import evaluation_asset, table_metadata
from rag_eval_pipeline.defs.partitions import night_and_suite, nightly_check
from rag_eval_pipeline.defs.resources import SuiteRegistryResource, WarehouseResource
from rag_eval_pipeline.lib.inputs.corpus import choose_snapshot
from rag_eval_pipeline.lib.runs.registry import utc_now
from rag_eval_pipeline.lib.store.staging import stage_snapshot


def build_corpus_snapshot(partitions: dg.PartitionsDefinition) -> dg.AssetsDefinition:
    @evaluation_asset(
        "corpus_snapshot",
        partitions=partitions,
        group="inputs",
        kinds={"parquet", "polars"},
        code_version="corpus-v2",
        check_specs=[
            nightly_check(
                "has_current_passages",
                asset="corpus_snapshot",
                partitions=partitions,
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
        ``corpus_passages``). Every file is read and hashed once: a night whose files hash to the
        ones the staged snapshot was verified from parses nothing, and documents in the snapshot
        store's parse cache are not parsed again (``lib.store.staging``). The content digest is
        the asset's data version, so downstream assets go stale when the corpus changes.
        """
        night, suite_name = night_and_suite(context)
        suite = suites.suite(suite_name)
        folder = choose_snapshot(suite.corpus_root, dt.date.fromisoformat(night), suite.snapshot)
        staged = stage_snapshot(warehouse_db.run_store(), folder, loaded_at=utc_now())
        summary = staged.summary
        yield dg.Output(
            {
                "suite": suite_name,
                "snapshot_id": staged.snapshot_id,
                "corpus_digest": staged.corpus_digest,
                "snapshot_dir": str(folder),
            },
            data_version=dg.DataVersion(staged.corpus_digest),
            metadata={
                **table_metadata(pl.DataFrame(schema=staged.passage_schema), "corpus_passages"),
                "dagster/row_count": dg.MetadataValue.int(summary["passage_count"]),
                "suite": suite_name,
                "corpus_digest": staged.corpus_digest,
                "snapshot_id": staged.snapshot_id,
                "snapshot_dir": str(folder),
                "frozen_at": staged.frozen_at or "",
                "documents": summary["document_count"],
                "documents_by_status": dg.MetadataValue.json(staged.documents_by_status),
                "current_passages": summary["current_passage_count"],
                "verified_by": staged.verified_by,
                "documents_parsed": staged.parsed,
                "documents_from_parse_cache": staged.cached,
            },
        )
        yield dg.AssetCheckResult(
            check_name="has_current_passages",
            passed=summary["current_passage_count"] > 0,
            severity=dg.AssetCheckSeverity.ERROR,
            metadata={"current_passages": summary["current_passage_count"]},
        )

    return corpus_snapshot
