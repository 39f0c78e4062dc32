"""The corpus snapshot asset: the library as it stood, pinned by its content digest."""

import datetime as dt

import dagster as dg
import polars as pl

from rag_eval_pipeline.defs.metadata import TEAM, table_metadata
from rag_eval_pipeline.defs.partitions import nightly_partitions
from rag_eval_pipeline.defs.resources import EvalSettings, WarehouseResource, project_path
from rag_eval_pipeline.lib import warehouse
from rag_eval_pipeline.lib.corpus import choose_snapshot, load_snapshot


def snapshot_tables(snapshot) -> dict[str, pl.DataFrame]:
    """The rows the warehouse keeps for one snapshot, keyed by table."""
    digest = snapshot.corpus_digest
    passages = snapshot.passages.with_columns(pl.lit(digest).alias("corpus_digest"))
    documents = pl.DataFrame(
        [
            {
                "corpus_digest": digest,
                "doc_version_id": d.version_id,
                "doc_id": d.doc_id,
                "version": d.version,
                "title": d.title,
                "status": d.status,
                "superseded_by": d.superseded_by,
                "effective_date": d.effective_date,
                "language": d.language,
                "owner": d.owner,
                "document_digest": snapshot.document_digests[d.version_id],
            }
            for d in snapshot.documents
        ]
    )
    summary = pl.DataFrame(
        [
            {
                "corpus_digest": digest,
                "snapshot_id": snapshot.snapshot_id,
                "document_count": snapshot.document_count,
                "passage_count": passages.height,
                "current_passage_count": passages.filter(pl.col("status") == "current").height,
                "frozen_at": snapshot.frozen_at,
                "loaded_at": dt.datetime.now(dt.UTC).replace(tzinfo=None),
            }
        ]
    )
    return {"corpus_snapshots": summary, "corpus_documents": documents, "corpus_passages": passages}


@dg.asset(
    partitions_def=nightly_partitions,
    group_name="inputs",
    owners=[TEAM],
    kinds={"duckdb", "polars"},
    code_version="corpus-v1",
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
    context: dg.AssetExecutionContext, settings: EvalSettings, warehouse_db: WarehouseResource
):
    """The procedure library snapshot in force on the partition's night.

    Loads the newest snapshot folder dated on or before the partition (or the configured one),
    verifies it against its manifest digest (a mismatch fails before anything is written),
    splits documents into passages with stable versioned ids, and stores them in
    ``corpus_snapshots``, ``corpus_documents`` and ``corpus_passages``. The content digest is
    the asset's data version, so downstream assets go stale when the corpus changes.
    """
    night = dt.date.fromisoformat(context.partition_key) if context.has_partition_key else None
    folder = choose_snapshot(project_path(settings.corpus_root), night, settings.snapshot)
    snapshot = load_snapshot(folder)
    tables = snapshot_tables(snapshot)
    with warehouse_db.connect() as connection:
        for table, frame in tables.items():
            warehouse.replace_rows(
                connection, table, frame, {"corpus_digest": snapshot.corpus_digest}
            )
    passages = tables["corpus_passages"]
    current = tables["corpus_snapshots"]["current_passage_count"][0]
    status_counts = {
        row["status"]: row["len"]
        for row in tables["corpus_documents"].group_by("status").len().iter_rows(named=True)
    }
    yield dg.Output(
        {
            "snapshot_id": snapshot.snapshot_id,
            "corpus_digest": snapshot.corpus_digest,
            "snapshot_dir": str(folder),
        },
        data_version=dg.DataVersion(snapshot.corpus_digest),
        metadata={
            **table_metadata(passages, "corpus_passages"),
            "corpus_digest": snapshot.corpus_digest,
            "snapshot_id": snapshot.snapshot_id,
            "frozen_at": snapshot.frozen_at or "",
            "documents": snapshot.document_count,
            "documents_by_status": dg.MetadataValue.json(status_counts),
            "current_passages": int(current),
        },
    )
    yield dg.AssetCheckResult(
        check_name="has_current_passages",
        passed=bool(current > 0),
        severity=dg.AssetCheckSeverity.ERROR,
        metadata={"current_passages": int(current)},
    )
