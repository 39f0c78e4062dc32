"""The DuckDB warehouse: one file, stable table names (``sql/schema.sql``), scoped rows.

Writes replace the rows of one scope (an ``eval_run_id`` or a digest) in one transaction per
table, so re-running a partition replaces that run's rows and nothing else, and a failure leaves
the previous rows in place.
"""

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb
import polars as pl

from rag_eval_pipeline.lib.sql import query_frame, sql_statements

TABLES = (
    "corpus_snapshots",
    "corpus_documents",
    "corpus_passages",
    "golden_items",
    "golden_gold",
    "golden_drift",
    "eval_runs",
    "retrieval_results",
    "generation_results",
    "judge_verdicts",
    "retrieval_item_metrics",
    "retrieval_metrics",
    "generation_item_metrics",
    "generation_metrics",
    "sufficiency_correctness",
    "abstention_sweep",
    "judge_calibration",
    "run_comparisons",
    "rebaseline_offsets",
    "baseline_decisions",
)
SCOPE_COLUMNS = {
    "eval_run_id",
    "corpus_digest",
    "golden_digest",
    "candidate_run_id",
    "rebaseline_run_id",
}


@contextmanager
def connect(path: Path | str, *, read_only: bool = False, attempts: int = 40) -> Iterator:
    """Open the warehouse (creating the schema), retrying while another process holds the lock."""
    path = Path(path)
    if not read_only:
        path.parent.mkdir(parents=True, exist_ok=True)
    config = {"extension_directory": str(path.parent / ".duckdb_extensions")}
    for attempt in range(attempts):
        try:
            connection = duckdb.connect(str(path), read_only=read_only, config=config)
            break
        except duckdb.IOException:
            if attempt == attempts - 1:
                raise
            time.sleep(0.25)
    try:
        if not read_only:
            for statement in [*sql_statements("schema"), *sql_statements("migrations")]:
                connection.execute(statement)
        yield connection
    finally:
        connection.close()


def replace_rows(
    connection: duckdb.DuckDBPyConnection, table: str, frame: pl.DataFrame, scope: dict[str, str]
) -> int:
    """Delete the rows of ``table`` matching ``scope`` and insert ``frame``, in one transaction."""
    if table not in TABLES:
        raise ValueError(f"unknown warehouse table {table!r}")
    if not scope or not set(scope) <= SCOPE_COLUMNS:
        raise ValueError(f"scope must use only {sorted(SCOPE_COLUMNS)}, got {sorted(scope)}")
    where = " AND ".join(f"{column} = ${column}" for column in scope)
    connection.execute("BEGIN TRANSACTION")
    try:
        connection.execute(f"DELETE FROM {table} WHERE {where}", scope)
        if frame.height:
            connection.register("incoming_rows", frame.to_arrow())
            connection.execute(f"INSERT INTO {table} BY NAME SELECT * FROM incoming_rows")
            connection.unregister("incoming_rows")
        connection.execute("COMMIT")
    except Exception:
        connection.execute("ROLLBACK")
        raise
    return frame.height


def read_frame(
    connection: duckdb.DuckDBPyConnection, query: str, parameters: dict | None = None
) -> pl.DataFrame:
    """A query's result as a Polars frame (parameters bound, never formatted in)."""
    return query_frame(connection, query, parameters)


def table_counts(connection: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Row count of every contract table."""
    return {
        table: connection.sql(f"SELECT count(*) FROM {table}").fetchall()[0][0] for table in TABLES
    }
