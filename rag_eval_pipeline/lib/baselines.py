"""Baselines: which run each golden set is compared against, and the recorded decisions.

A baseline is accepted explicitly and recorded in ``baseline_decisions``: the first completed
run of a golden set (``first_run``), a re-baseline run made after a corpus change
(``rebaseline``, with who asked and why), or a decision by hand (``decision``). The current
baseline of a golden set is its latest decision.
"""

import datetime as dt

import duckdb
import polars as pl

from rag_eval_pipeline.lib import warehouse
from rag_eval_pipeline.lib.comparison import COMPARED_METRICS, compare_items
from rag_eval_pipeline.lib.sql import load_sql

DECISION_KINDS = ("first_run", "rebaseline", "decision")


def run_identity(connection: duckdb.DuckDBPyConnection, eval_run_id: str) -> dict | None:
    """The ``eval_runs`` row of a run, or ``None``."""
    rows = warehouse.read_frame(
        connection, "SELECT * FROM eval_runs WHERE eval_run_id = $run", {"run": eval_run_id}
    ).to_dicts()
    return rows[0] if rows else None


def current_baseline(connection: duckdb.DuckDBPyConnection, golden_set: str) -> dict | None:
    """The ``eval_runs`` row of the golden set's current baseline, or ``None`` before the first."""
    decisions = warehouse.read_frame(
        connection,
        "SELECT eval_run_id FROM baseline_decisions WHERE golden_set = $golden "
        "ORDER BY decided_at DESC LIMIT 1",
        {"golden": golden_set},
    )
    if not decisions.height:
        return None
    return run_identity(connection, decisions["eval_run_id"][0])


def accept_baseline(
    connection: duckdb.DuckDBPyConnection,
    eval_run_id: str,
    *,
    kind: str,
    reason: str,
    requested_by: str | None = None,
) -> dict:
    """Record a run as its golden set's baseline (one transaction) and return the decision."""
    if kind not in DECISION_KINDS:
        raise ValueError(f"baseline decision kind {kind!r} is not one of {DECISION_KINDS}")
    if not reason.strip():
        raise ValueError("a baseline decision needs a reason")
    run = run_identity(connection, eval_run_id)
    if run is None:
        raise KeyError(f"no evaluation run {eval_run_id!r} in the warehouse")
    previous = current_baseline(connection, run["golden_set"])
    decision = {
        "golden_set": run["golden_set"],
        "eval_run_id": eval_run_id,
        "decided_at": dt.datetime.now(dt.UTC).replace(tzinfo=None),
        "kind": kind,
        "previous_baseline_run_id": previous["eval_run_id"] if previous else None,
        "requested_by": requested_by,
        "reason": reason,
    }
    connection.execute("BEGIN TRANSACTION")
    try:
        connection.register("decision", pl.DataFrame([decision]).to_arrow())
        connection.execute("INSERT INTO baseline_decisions BY NAME SELECT * FROM decision")
        connection.unregister("decision")
        connection.execute(
            "UPDATE eval_runs SET is_baseline = TRUE WHERE eval_run_id = $run", {"run": eval_run_id}
        )
        connection.execute("COMMIT")
    except Exception:
        connection.execute("ROLLBACK")
        raise
    return decision


def item_values(connection: duckdb.DuckDBPyConnection, eval_run_id: str) -> pl.DataFrame:
    """Per-item values of a run for paired comparison: ``item_id, metric, value``."""
    return warehouse.read_frame(
        connection, load_sql("comparison_item_values"), {"eval_run_id": eval_run_id}
    )


def compare_runs(
    connection: duckdb.DuckDBPyConnection,
    candidate_run_id: str,
    baseline_run_id: str,
    *,
    seed: int = 20261001,
    resamples: int = 2000,
) -> pl.DataFrame:
    """Paired comparison of two runs, metric by metric (see ``lib.comparison``)."""
    return compare_items(
        item_values(connection, candidate_run_id),
        item_values(connection, baseline_run_id),
        COMPARED_METRICS,
        seed=seed,
        resamples=resamples,
    )
