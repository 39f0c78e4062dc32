"""The warehouse tables: their names, their scope, and their schema, written once in SQL.

``sql/schema.sql`` is the only definition of a table's columns; ``table_schema`` reads it back as
a Polars schema (through an in-memory DuckDB), so a frame headed for a table is shaped by the same
definition everywhere (``conform``), whether it is written to the run store as Parquet or loaded
into the warehouse.
"""

from functools import cache

import duckdb
import polars as pl

from rag_eval_pipeline.lib.store.sql import sql_statements

# Scoped by eval_run_id: written to the run store by the steps, loaded by the summary step.
RUN_TABLES = (
    "retrieval_results",
    "system_calls",
    "generation_results",
    "judge_verdicts",
    "retrieval_item_metrics",
    "retrieval_metrics",
    "generation_item_metrics",
    "generation_metrics",
    "sufficiency_correctness",
    "abstention_sweep",
    "judge_calibration",
    "judge_repeat_verdicts",
    "judge_rate_estimates",
    "judge_usage",
    "diagnostic_verdicts",
    "diagnostic_item_metrics",
    "diagnostic_metrics",
)
# Scoped by corpus_digest and golden_digest: content-addressed, loaded once per digest.
CORPUS_TABLES = ("corpus_snapshots", "corpus_documents", "corpus_passages")
GOLDEN_TABLES = ("golden_items", "golden_gold")
DRIFT_TABLE = "golden_drift"
# Written in the warehouse only, each by one module of lib/runs.
RECORD_TABLES = (
    "eval_run_records",
    "run_baselines",
    "baseline_decisions",
    "run_comparisons",
    "rebaseline_offsets",
    "gate_results",
)
TABLES = (*CORPUS_TABLES, *GOLDEN_TABLES, DRIFT_TABLE, *RUN_TABLES, *RECORD_TABLES)
VIEWS = ("eval_runs",)
SCOPE_COLUMNS = frozenset(
    {"eval_run_id", "corpus_digest", "golden_digest", "candidate_run_id", "rebaseline_run_id"}
)

DUCKDB_TYPES = {
    "VARCHAR": pl.String,
    "INTEGER": pl.Int32,
    "BIGINT": pl.Int64,
    "DOUBLE": pl.Float64,
    "BOOLEAN": pl.Boolean,
    "DATE": pl.Date,
    "TIMESTAMP": pl.Datetime("us"),
    "VARCHAR[]": pl.List(pl.String),
}


@cache
def _described() -> dict[str, list[tuple[str, str, bool]]]:
    """Every table's ``(column, duckdb type, nullable)`` from ``sql/schema.sql``."""
    connection = duckdb.connect()
    try:
        for statement in sql_statements("schema"):
            connection.execute(statement)
        return {
            table: [
                (name, kind, nullable == "YES")
                for name, kind, nullable, *_ in connection.sql(f'DESCRIBE "{table}"').fetchall()
            ]
            for table in TABLES
        }
    finally:
        connection.close()


def table_schema(table: str) -> dict[str, pl.DataType]:
    """The Polars schema of a warehouse table, in column order."""
    if table not in TABLES:
        raise ValueError(f"unknown warehouse table {table!r}")
    return {name: DUCKDB_TYPES[kind] for name, kind, _ in _described()[table]}


def row_schema(
    table: str, *, without: tuple[str, ...] = ("eval_run_id",)
) -> dict[str, pl.DataType]:
    """The table's schema less its scope columns: the shape of rows a step builds before the
    run they belong to is attached."""
    return {name: dtype for name, dtype in table_schema(table).items() if name not in without}


def required_columns(table: str) -> set[str]:
    return {name for name, _, nullable in _described()[table] if not nullable}


def conform(frame: pl.DataFrame, table: str) -> pl.DataFrame:
    """``frame`` with exactly ``table``'s columns, in order and cast to their types.

    A nullable column the frame lacks is filled with nulls; a missing required column is a bug in
    the step that built the frame and raises, naming the table and the columns.
    """
    schema = table_schema(table)
    missing = required_columns(table) - set(frame.columns)
    if missing:
        raise ValueError(
            f"rows for {table} lack the required column(s) {', '.join(sorted(missing))}"
        )
    return frame.select(
        pl.col(name).cast(dtype) if name in frame.columns else pl.lit(None, dtype=dtype).alias(name)
        for name, dtype in schema.items()
    )


def empty(table: str) -> pl.DataFrame:
    """An empty frame with ``table``'s schema."""
    return pl.DataFrame(schema=table_schema(table))
