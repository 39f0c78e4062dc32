"""Two warehouses compared table by table, row by row, for runs that must give the same figures.

Rows are compared as sets (sorted on every column): the order rows are written in is not part of a
table. Only what records *when* and *which Dagster run* is left out, because two runs of the same
evaluation differ there and nowhere else:

- ``eval_runs`` and ``eval_run_records``: ``dagster_run_id`` (Dagster's id of the run),
  ``started_at`` and ``completed_at`` (wall clock), ``trace_digest`` (a digest of a live run's
  captured calls, which record each call's measured latency); ``report_path`` and
  ``trace_file`` are compared by file name (each warehouse writes its report and a live run's
  traces beside itself); ``headline`` is compared without its
  ``dagster_run_id`` key;
- ``corpus_snapshots.loaded_at``, ``baseline_decisions.decided_at``, ``run_baselines.decided_at``:
  wall clock;
- ``system_calls.latency_ms``, and the value of the latency metrics (``latency_p50_ms``,
  ``latency_p95_ms``, ``latency_max_ms`` in ``generation_metrics`` and the headline): the
  measured time of a live system's calls (their row, count and ``n`` are compared).

``eval_run_id`` is compared: it is a digest of the run's record, so equal ids say the runs had the
same inputs, system, judge and settings.
"""

import json
from pathlib import Path

import duckdb
import polars as pl

VOLATILE = {
    "eval_runs": ("dagster_run_id", "started_at", "completed_at", "trace_digest"),
    "eval_run_records": ("dagster_run_id", "started_at", "completed_at", "trace_digest"),
    "corpus_snapshots": ("loaded_at",),
    "baseline_decisions": ("decided_at",),
    "run_baselines": ("decided_at",),
    "system_calls": ("latency_ms",),
}


# Files each warehouse writes beside itself: compared by name (their digests are compared).
BESIDE_THE_WAREHOUSE = ("report_path", "trace_file")
MEASURED_PREFIX = "latency_"


def headline_without_run(headline: str | None) -> str | None:
    """The headline JSON without its Dagster run id and measured latencies."""
    if headline is None:
        return None
    document = json.loads(headline)
    document.pop("dagster_run_id", None)
    for row in document.get("operations") or []:
        if str(row.get("metric", "")).startswith(MEASURED_PREFIX):
            row["value"] = None
    return json.dumps(document, sort_keys=True)


def comparable_table(connection: duckdb.DuckDBPyConnection, table: str) -> pl.DataFrame:
    """``table`` without its volatile columns, every row in a canonical order."""
    excluded = VOLATILE.get(table, ())
    columns = [
        name
        for (name,) in connection.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = $table "
            "ORDER BY ordinal_position",
            {"table": table},
        ).fetchall()
        if name not in excluded
    ]
    # Identifiers come from the catalogue, not from input; nested values compare as text.
    select = ", ".join(f'"{name}"::VARCHAR AS "{name}"' for name in columns)
    frame = connection.sql(f'SELECT {select} FROM "{table}"').pl()
    for column in BESIDE_THE_WAREHOUSE:
        if column in frame.columns:
            frame = frame.with_columns(
                pl.col(column).map_elements(lambda path: Path(path).name, return_dtype=pl.Utf8)
            )
    if {"metric", "value"} <= set(frame.columns):
        measured = pl.col("metric").str.starts_with(MEASURED_PREFIX)
        frame = frame.with_columns(
            pl.when(measured).then(None).otherwise(pl.col("value")).alias("value")
        )
    if "headline" in frame.columns:
        frame = frame.with_columns(
            pl.col("headline").map_elements(headline_without_run, return_dtype=pl.Utf8)
        )
    return frame.sort(frame.columns, nulls_last=True)


def table_names(connection: duckdb.DuckDBPyConnection) -> list[str]:
    return [
        name
        for (name,) in connection.sql(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' "
            "ORDER BY table_name"
        ).fetchall()
    ]


def warehouse_differences(left: Path, right: Path) -> list[str]:
    """One line per table that differs between the two warehouses (empty when they agree)."""
    differences = []
    with (
        duckdb.connect(str(left), read_only=True) as one,
        duckdb.connect(str(right), read_only=True) as other,
    ):
        names = table_names(one)
        if names != table_names(other):
            return [f"tables differ: {names} against {table_names(other)}"]
        for table in names:
            a, b = comparable_table(one, table), comparable_table(other, table)
            if a.height != b.height:
                differences.append(f"{table}: {a.height} rows against {b.height}")
            elif not a.equals(b):
                for column in a.columns:
                    if not a[column].equals(b[column]):
                        row = (a[column] != b[column]).arg_true()[0]
                        differences.append(
                            f"{table}.{column} first differs at sorted row {row}: "
                            f"{str(a[column][row])[:120]!r} against {str(b[column][row])[:120]!r}"
                        )
                        break
    return differences
