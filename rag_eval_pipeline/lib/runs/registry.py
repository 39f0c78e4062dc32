"""The one writer of the evaluation-run record (``eval_run_records``) and of ``run_baselines``.

A run's record is written when the run starts (status ``started``), completed when the summary
step has loaded every table (``complete``), or marked ``failed`` when it ends any other way. A run
killed before it could say so stays ``started``: readers show both as incomplete, and an
incomplete run is never compared and never becomes a baseline. ``eval_runs`` (a view) joins the
record with its baseline, which lives in ``baseline_decisions`` and ``run_baselines``, so a re-run
of a run never changes whether it is a baseline.
"""

import datetime as dt
import json

import duckdb
import polars as pl

from rag_eval_pipeline.lib.runs.record import STARTED, EvalRunRecord
from rag_eval_pipeline.lib.store.sql import sql_query
from rag_eval_pipeline.lib.store.warehouse import read_frame, replace_rows


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


def start_run(
    connection: duckdb.DuckDBPyConnection,
    record: EvalRunRecord,
    dagster_run_id: str | None,
    started_at: dt.datetime | None = None,
) -> None:
    """Write the run's record with status ``started`` (replacing an earlier attempt's)."""
    row = {
        **record.as_row(),
        "dagster_run_id": dagster_run_id,
        "status": STARTED,
        "started_at": started_at or utc_now(),
    }
    replace_rows(
        connection, "eval_run_records", pl.DataFrame([row]), {"eval_run_id": record.eval_run_id}
    )


def complete_run(
    connection: duckdb.DuckDBPyConnection,
    eval_run_id: str,
    headline: dict,
    report_path: str | None,
    completed_at: dt.datetime | None = None,
) -> None:
    """Mark the run complete with its headline figures."""
    connection.execute(
        sql_query("runs", "complete"),
        {
            "eval_run_id": eval_run_id,
            "completed_at": completed_at or utc_now(),
            "headline": json.dumps(headline, sort_keys=True, default=str),
            "report_path": report_path,
        },
    )


def fail_run(connection: duckdb.DuckDBPyConnection, eval_run_id: str, reason: str) -> None:
    """Mark a run that did not finish as failed, with why (a complete run stays complete)."""
    connection.execute(sql_query("runs", "fail"), {"eval_run_id": eval_run_id, "reason": reason})


def record_capture(
    connection: duckdb.DuckDBPyConnection, eval_run_id: str, trace_file: str, trace_digest: str
) -> None:
    """Record the trace file a live run was captured in and its SHA-256 (``eval_runs``
    ``trace_file``, ``trace_digest``): replaying that file reproduces the run's tables."""
    connection.execute(
        sql_query("capture", "record_capture"),
        {"eval_run_id": eval_run_id, "trace_file": trace_file, "trace_digest": trace_digest},
    )


def run_row(connection: duckdb.DuckDBPyConnection, eval_run_id: str) -> dict | None:
    """The ``eval_runs`` row of a run, or ``None``."""
    rows = read_frame(connection, sql_query("runs", "run"), {"eval_run_id": eval_run_id})
    return rows.to_dicts()[0] if rows.height else None


def latest_complete_run(
    connection: duckdb.DuckDBPyConnection, suite: str | None = None
) -> str | None:
    """The most recently completed run (of ``suite`` when given)."""
    rows = read_frame(connection, sql_query("runs", "latest_complete"), {"suite": suite})
    return rows["eval_run_id"][0] if rows.height else None


def latest_complete_of_partition(
    connection: duckdb.DuckDBPyConnection, night: str, suite: str
) -> str | None:
    """The latest completed nightly run of one night and suite (re-baseline runs left out)."""
    rows = read_frame(
        connection,
        sql_query("runs", "latest_complete_of_partition"),
        {"night": night, "suite": suite},
    )
    return rows["eval_run_id"][0] if rows.height else None


def set_baseline_for(
    connection: duckdb.DuckDBPyConnection,
    eval_run_id: str,
    baseline_run_id: str | None,
    comparable: bool | None,
    reason: str,
) -> None:
    """Record which baseline a run is measured against, and whether the two compare."""
    connection.execute(
        sql_query("runs", "set_baseline_for"),
        {
            "eval_run_id": eval_run_id,
            "baseline_run_id": baseline_run_id,
            "comparable": comparable,
            "reason": reason,
            "decided_at": utc_now(),
        },
    )
