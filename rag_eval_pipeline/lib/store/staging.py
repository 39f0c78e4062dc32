"""Staging inputs in the run store: snapshots and golden sets, once per digest.

A snapshot's and a golden set's rows are content-addressed: the same digest is the same content,
so they are written the first time and read back every night after.
"""

from pathlib import Path

import polars as pl

from rag_eval_pipeline.lib.inputs.corpus import find_snapshot, load_snapshot, snapshot_tables
from rag_eval_pipeline.lib.store.run_store import RunStore
from rag_eval_pipeline.lib.store.tables import DRIFT_TABLE


def stage_tables(store: RunStore, folder, tables: dict[str, pl.DataFrame]) -> list[str]:
    """Write each table not yet staged under ``folder``; returns the tables written."""
    written = []
    for table, frame in tables.items():
        if not store.has_table(folder, table):
            store.write_table(folder, table, frame)
            written.append(table)
    return written


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
    if store.has_table(store.corpus_dir(corpus_digest), "corpus_passages"):
        return True
    folder = find_snapshot(corpus_root, corpus_digest)
    if folder is None:
        return False
    snapshot = load_snapshot(folder)
    stage_tables(
        store, store.corpus_dir(corpus_digest), snapshot_tables(snapshot, loaded_at=loaded_at)
    )
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
