"""Loading a finished evaluation run from the run store into the warehouse.

The summary step is the only writer of a run's tables in the warehouse: it loads the snapshot and
the golden set the first time their digests appear, the golden set's drift against the snapshot,
and every table of the run, each table's rows of its scope replaced in one transaction, all in
the warehouse's private copy that is then published at once (``store.warehouse``). A table the run
store lacks means a step of the run never finished, and nothing is loaded.

The snapshot's tables are loaded under a DuckDB memory limit, and from a local store DuckDB reads
their Parquet itself, so the passages' text is never held whole in memory (a 96,000-passage
corpus: about 255 MB above the process instead of about 680 MB with a frame of it).
"""

import duckdb

from rag_eval_pipeline.lib.errors import RagEvalError
from rag_eval_pipeline.lib.runs.record import EvalRunRecord
from rag_eval_pipeline.lib.store.run_store import RunStore
from rag_eval_pipeline.lib.store.sql import sql_query
from rag_eval_pipeline.lib.store.staging import read_drift
from rag_eval_pipeline.lib.store.tables import CORPUS_TABLES, DRIFT_TABLE, GOLDEN_TABLES, RUN_TABLES
from rag_eval_pipeline.lib.store.warehouse import (
    memory_limit,
    replace_rows,
    replace_rows_from_parquet,
)

# The corpus tables are the large ones (the passages' text): loaded under this DuckDB memory
# limit, their rows go to the database file as row groups fill rather than all into memory.
# On 96,000 passages (157 MB of text) the insert takes 0.56 s and peaks 399 MB above the
# process at 768MB, about what it takes with no limit (404 MB); at 256MB it took 1.02 s for
# 255 MB. A larger library is held to the limit.
CORPUS_LOAD_MEMORY = "768MB"


class IncompleteRunError(RagEvalError):
    """A run whose steps did not all write their tables."""


def _loaded(connection: duckdb.DuckDBPyConnection, query: str, parameters: dict) -> bool:
    return bool(connection.execute(sql_query("load", query), parameters).fetchone()[0])


def load_run(
    connection: duckdb.DuckDBPyConnection, store: RunStore, record: EvalRunRecord
) -> dict[str, int]:
    """Load the run's inputs and tables (module docstring); returns rows loaded per table."""
    run_dir = store.run_dir(record.eval_run_id)
    missing = [table for table in RUN_TABLES if not store.has_table(run_dir, table)]
    if missing:
        raise IncompleteRunError(
            f"{run_dir}: evaluation run {record.eval_run_id} lacks {', '.join(missing)}: "
            "its steps did not all finish; nothing was loaded"
        )
    counts: dict[str, int] = {}
    corpus_scope = {"corpus_digest": record.corpus_digest}
    if not _loaded(connection, "corpus_loaded", corpus_scope):
        corpus_dir = store.corpus_dir(record.corpus_digest)
        with memory_limit(connection, CORPUS_LOAD_MEMORY):
            for table in CORPUS_TABLES:
                files = store.local_files(corpus_dir, table)
                counts[table] = (
                    replace_rows_from_parquet(connection, table, files, corpus_scope)
                    if files
                    else replace_rows(
                        connection, table, store.read_table(corpus_dir, table), corpus_scope
                    )
                )
    golden_scope = {"golden_digest": record.golden_digest}
    if not _loaded(connection, "golden_loaded", golden_scope):
        golden_dir = store.golden_dir(record.golden_digest)
        for table in GOLDEN_TABLES:
            counts[table] = replace_rows(
                connection, table, store.read_table(golden_dir, table), golden_scope
            )
    counts[DRIFT_TABLE] = replace_rows(
        connection,
        DRIFT_TABLE,
        read_drift(store, record.golden_digest, record.corpus_digest),
        {**golden_scope, **corpus_scope},
    )
    for table in RUN_TABLES:
        counts[table] = replace_rows(
            connection,
            table,
            store.read_table(run_dir, table),
            {"eval_run_id": record.eval_run_id},
        )
    return counts
