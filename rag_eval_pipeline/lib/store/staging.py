"""Staging inputs in the run store: snapshots and golden sets, once per digest.

A snapshot's and a golden set's rows are content-addressed: the same digest is the same content,
so they are written the first time and read back every night after.

A staged snapshot also keeps the file digest (SHA-256 of the bytes) of every document file it was
verified from (``corpus/<corpus_digest>/snapshot_files.json``). A night whose snapshot files hash
to exactly those digests holds exactly the bytes that were parsed and checked against the corpus
digest before, so it is verified without parsing anything; any other night loads the snapshot
(documents already in the snapshot store's parse cache are not parsed again) and checks the
corpus digest in full.
"""

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from rag_eval_pipeline.lib.inputs.corpus import (
    VerifiedSnapshot,
    find_snapshot,
    read_snapshot,
    snapshot_summary,
    verify_snapshot,
)
from rag_eval_pipeline.lib.store.run_store import RunStore
from rag_eval_pipeline.lib.store.tables import CORPUS_TABLES, DRIFT_TABLE

FILE_DIGESTS = "snapshot_files.json"


def stage_tables(store: RunStore, folder, tables: dict[str, pl.DataFrame]) -> list[str]:
    """Write each table not yet staged under ``folder``; returns the tables written."""
    written = []
    for table, frame in tables.items():
        if not store.has_table(folder, table):
            store.write_table(folder, table, frame)
            written.append(table)
    return written


def is_staged(store: RunStore, corpus_digest: str) -> bool:
    """Whether the corpus state ``corpus_digest`` has all its tables staged (a staging cut
    short lacks its summary row, written last)."""
    corpus_dir = store.corpus_dir(corpus_digest)
    return all(store.has_table(corpus_dir, table) for table in CORPUS_TABLES)


@dataclass(frozen=True)
class StagedSnapshot:
    """A snapshot verified and staged: its identity, the staged summary row, its documents by
    status, and how it was verified (``parsed`` documents parsed from their bytes, ``cached``
    from the parse cache; both 0 when the file digests matched the staged ones)."""

    snapshot_id: str
    corpus_digest: str
    frozen_at: str | None
    summary: dict
    documents_by_status: dict[str, int]
    passage_schema: dict[str, pl.DataType]
    parsed: int
    cached: int

    @property
    def verified_by(self) -> str:
        if self.parsed or self.cached:
            return "corpus digest recomputed"
        return "file digests of the staged snapshot"


def _staged(store: RunStore, corpus_dir, manifest: dict, parsed: int, cached: int):
    summary = store.read_table(corpus_dir, "corpus_snapshots").row(0, named=True)
    documents = store.read_table(corpus_dir, "corpus_documents")
    by_status = dict(documents.group_by("status").len().sort("status").rows())
    with store.parts(corpus_dir, "corpus_passages")[0].open("rb") as handle:
        schema = dict(pl.read_parquet_schema(handle))
    return StagedSnapshot(
        snapshot_id=manifest["snapshot_id"],
        corpus_digest=manifest["corpus_digest"],
        frozen_at=manifest.get("frozen_at"),
        summary=summary,
        documents_by_status=by_status,
        passage_schema=schema,
        parsed=parsed,
        cached=cached,
    )


def stage_snapshot(store: RunStore, snapshot_dir: Path, loaded_at: dt.datetime) -> StagedSnapshot:
    """Verify the snapshot folder and stage its tables under its corpus digest (once).

    Every file is read and hashed once. When the file digests are the ones the staged snapshot
    was verified from, nothing is parsed; otherwise the snapshot is loaded and its corpus digest
    checked against the manifest (``CorpusError`` naming the changed documents, before anything
    is written)."""
    # A snapshot not staged yet is verified in full: the parse cache is read beside its files.
    read = read_snapshot(
        snapshot_dir,
        parse_cache=lambda manifest: not is_staged(store, manifest["corpus_digest"]),
    )
    corpus_dir = store.corpus_dir(read.manifest["corpus_digest"])
    known = store.read_json(corpus_dir / FILE_DIGESTS) or {}
    staged = is_staged(store, read.manifest["corpus_digest"])
    if staged and known.get("files") == read.file_digests:
        return _staged(store, corpus_dir, read.manifest, 0, 0)
    snapshot = verify_snapshot(snapshot_dir, read=read)
    _stage_verified(store, corpus_dir, snapshot, loaded_at)
    store.write_json(
        corpus_dir / FILE_DIGESTS,
        {"snapshot_id": snapshot.snapshot_id, "files": snapshot.file_digests},
    )
    parsed = snapshot.parsed
    return _staged(
        store, corpus_dir, read.manifest, parsed, len(snapshot.document_digests) - parsed
    )


def _stage_verified(
    store: RunStore, corpus_dir, snapshot: VerifiedSnapshot, loaded_at: dt.datetime
) -> None:
    """The tables of ``snapshot`` not yet staged under ``corpus_dir`` (``snapshot_tables``'
    rows). The passages are decoded and written a slice at a time (``write_table_slices``), so
    the whole passages table is never held (a 20,000-document night: the step peaked at 762 MB
    instead of 997 MB). A snapshot counts as staged only with all three tables, and the
    summary row is written last, so one whose staging was cut short is staged again."""
    digest = pl.lit(snapshot.corpus_digest).alias("corpus_digest")
    documents = snapshot.documents()
    if not store.has_table(corpus_dir, "corpus_passages"):
        store.write_table_slices(
            corpus_dir,
            "corpus_passages",
            (rows.with_columns(digest) for rows in snapshot.passage_slices()),
        )
    passage_count, current_count = snapshot.passage_counts(documents)
    summary = snapshot_summary(
        snapshot,
        passage_count=passage_count,
        current_passage_count=current_count,
        loaded_at=loaded_at,
    )
    stage_tables(
        store,
        corpus_dir,
        {"corpus_documents": documents.with_columns(digest), "corpus_snapshots": summary},
    )


def stage_drift(
    store: RunStore, golden_digest: str, corpus_digest: str, drift: pl.DataFrame
) -> None:
    """The golden set's drift against one snapshot (one part per corpus digest)."""
    rows = drift.with_columns(
        pl.lit(golden_digest).alias("golden_digest"), pl.lit(corpus_digest).alias("corpus_digest")
    )
    store.write_table(store.golden_dir(golden_digest), DRIFT_TABLE, rows, part=corpus_digest)


def read_drift(store: RunStore, golden_digest: str, corpus_digest: str) -> pl.DataFrame:
    return store.read_table(store.golden_dir(golden_digest), DRIFT_TABLE).filter(
        pl.col("corpus_digest") == corpus_digest
    )


def ensure_corpus(store: RunStore, corpus_root: Path, corpus_digest: str, loaded_at) -> bool:
    """Whether the corpus state ``corpus_digest`` is staged, staging it from the snapshot folder
    under ``corpus_root`` frozen with that digest when there is one."""
    if is_staged(store, corpus_digest):
        return True
    folder = find_snapshot(corpus_root, corpus_digest)
    if folder is None:
        return False
    stage_snapshot(store, folder, loaded_at)
    return True


def staged_passages(store: RunStore, corpus_digests) -> pl.DataFrame:
    """The staged passages of several corpus states together."""
    return pl.concat(
        [
            store.read_table(store.corpus_dir(digest), "corpus_passages")
            for digest in sorted(set(corpus_digests))
        ],
        how="vertical_relaxed",
    )
