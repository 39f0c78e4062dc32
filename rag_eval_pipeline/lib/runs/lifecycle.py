"""An evaluation run from start to finish: its record in the run store, then in the warehouse.

- ``begin_run``: the record goes to ``run.json`` in the run's folder (status ``started``) before the
  system is asked anything. No step but the summary writes the warehouse, so the record reaches
  it at the next publish: every write of the warehouse (``publishing``) first copies the records
  of runs it does not know yet, and of runs that began again (unless complete there: a complete
  run run again stays complete until the new attempt completes), from the run store. A run that
  dies is therefore listed as incomplete at the next publish, never complete;
- ``note_capture``: a live run's trace file and its digest, on the record in the run store;
- ``finish_run``: the summary step loads every table, completes the record and settles the
  baseline, in one private copy of the warehouse published at once;
- ``abandon_run``: a run that ended without finishing is marked ``failed`` with why.
"""

import datetime as dt
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import duckdb

from rag_eval_pipeline.lib.errors import RagEvalError
from rag_eval_pipeline.lib.reporting.summary import headline_from_tables
from rag_eval_pipeline.lib.runs import registry
from rag_eval_pipeline.lib.runs.baselines import Settled, baseline_eligibility, settle_baseline
from rag_eval_pipeline.lib.runs.load import load_run
from rag_eval_pipeline.lib.runs.record import COMPLETE, EvalRunRecord
from rag_eval_pipeline.lib.store.run_store import RunStore
from rag_eval_pipeline.lib.store.sql import sql_query
from rag_eval_pipeline.lib.store.warehouse import Warehouse

RECORD_FILE = "run.json"


def begin_run(store: RunStore, record: EvalRunRecord, dagster_run_id: str | None) -> None:
    """Write the run's record (status ``started``) to its run folder."""
    store.write_json(
        store.run_dir(record.eval_run_id) / RECORD_FILE,
        {
            **record.as_json(),
            "dagster_run_id": dagster_run_id,
            "started_at": registry.utc_now().isoformat(),
            "trace_file": None,
            "trace_digest": None,
        },
    )


def note_capture(store: RunStore, eval_run_id: str, trace_file: str, trace_digest: str) -> None:
    """Record the trace file a live run was captured in, and its SHA-256, on the run's record:
    replaying that file reproduces the run's tables."""
    path = store.run_dir(eval_run_id) / RECORD_FILE
    document = store.read_json(path)
    if document is None:
        raise RagEvalError(f"{path}: no record; the run never began")
    store.write_json(path, {**document, "trace_file": trace_file, "trace_digest": trace_digest})


def noted_capture(store: RunStore, eval_run_id: str) -> Path | None:
    """The trace file noted on the run's record by its retrieval step (``note_capture``), if
    any: the capture of this attempt, which the later steps read."""
    document = store.read_json(store.run_dir(eval_run_id) / RECORD_FILE) or {}
    return Path(document["trace_file"]) if document.get("trace_file") else None


def read_record(store: RunStore, eval_run_id: str) -> EvalRunRecord:
    """The record a run's folder holds."""
    document = store.read_json(store.run_dir(eval_run_id) / RECORD_FILE)
    if document is None:
        raise RagEvalError(f"{store.run_dir(eval_run_id)}: no {RECORD_FILE}; the run never began")
    return EvalRunRecord.from_json(document)


def _known_starts(connection: duckdb.DuckDBPyConnection) -> dict[str, tuple]:
    """``eval_run_id -> (started_at, trace_file, status)`` of the warehouse's records."""
    return {
        eval_run_id: (started_at, trace_file, status)
        for eval_run_id, started_at, trace_file, status in connection.execute(
            sql_query("runs", "record_starts")
        ).fetchall()
    }


def _sync_record(
    connection: duckdb.DuckDBPyConnection, document: dict, seen: tuple | None, *, force: bool
) -> bool:
    """Copy one run store record into the warehouse when the warehouse does not know the run,
    or the run began again since and is not complete there (or ``force``: the run is being
    completed now), with its capture; whether the record was written."""
    started_at = dt.datetime.fromisoformat(document["started_at"])
    eval_run_id = document["eval_run_id"]
    settled = seen is not None and seen[2] == COMPLETE and not force
    written = seen is None or (seen[0] < started_at and not settled)
    if written:
        registry.start_run(
            connection,
            EvalRunRecord.from_json(document),
            document.get("dagster_run_id"),
            started_at,
        )
    trace_file = document.get("trace_file")
    if trace_file and (written or (seen[1] != trace_file and not settled)):
        registry.record_capture(connection, eval_run_id, trace_file, document["trace_digest"])
    return written


def sync_records(connection: duckdb.DuckDBPyConnection, store: RunStore) -> list[str]:
    """Copy into the warehouse the records of runs it does not know, or that began again since
    (status ``started``), and their capture; returns the runs written.

    A run that is complete in the warehouse stays complete while it is run again (the same
    evaluation run: same night, inputs and settings): the warehouse still holds its finished
    tables, so it stays the figures and the baseline it is until the new attempt completes
    (``finish_run`` then writes its record), and an attempt that dies leaves it as it was."""
    runs = store.root / "runs"
    if not runs.exists():
        return []
    known = _known_starts(connection)
    written = []
    for folder in sorted(runs.iterdir(), key=lambda path: path.name):
        document = store.read_json(folder / RECORD_FILE)
        if document is None or "started_at" not in document:
            continue
        if _sync_record(connection, document, known.get(document["eval_run_id"]), force=False):
            written.append(document["eval_run_id"])
    return written


@contextmanager
def publishing(
    warehouse: Warehouse,
    store: RunStore,
    before_publish: Callable[[], None] | None = None,
    after_publish: Callable[[], None] | None = None,
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A writing connection to the warehouse (``Warehouse.writing``, ``before_publish`` called
    just before it is published, ``after_publish`` just after, under its lock) with the run
    store's records synced first: every writer goes through here."""
    with warehouse.writing(before_publish, after_publish) as connection:
        sync_records(connection, store)
        yield connection


@dataclass(frozen=True)
class Finished:
    """What the summary step read back after loading a run."""

    run: dict
    headline: dict
    settled: Settled
    loaded: dict[str, int]
    # Why this attempt replaced other figures of a run that had completed (``replaced_figures``).
    replaced: str = ""


# The figures of a headline; the rest is the run's identity and where its files are.
FIGURES = ("retrieval", "generation", "no_answer")


def _when(moment) -> str:
    return f"{moment:%Y-%m-%d %H:%M:%S} UTC" if isinstance(moment, dt.datetime) else str(moment)


def _listed(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _measured(headline: dict, key: str) -> list[dict]:
    """The figures of ``key`` that have a value, as a headline before units and "not measured"
    rows were kept holds them, in a stable order."""
    rows = [
        {name: value for name, value in row.items() if name not in ("unit", "not_measured")}
        for row in headline.get(key) or []
        if row.get("value") is not None
    ]
    return sorted(rows, key=lambda row: json.dumps(row, sort_keys=True, default=str))


def replaced_figures(before: dict | None, headline: dict) -> str:
    """A warning when a run that had completed (``before``, its ``eval_runs`` row) completes
    again with other figures; empty when it had not, or its figures are the same. The run's
    identity is every input and setting that is known to change a figure, so two attempts of
    one run measuring differently means something that changes the answers is outside it."""
    if before is None or not before["complete"] or not before.get("headline"):
        return ""
    earlier = json.loads(before["headline"])
    now = json.loads(json.dumps(headline, sort_keys=True, default=str))
    changed = [key for key in FIGURES if _measured(earlier, key) != _measured(now, key)]
    if not changed:
        return ""
    kept = f"; its capture is still at {before['trace_file']}" if before.get("trace_file") else ""
    return (
        f"evaluation run {before['eval_run_id']} had completed ({_when(before['completed_at'])}) with "
        f"other {_listed([key.replace('_', '-') for key in changed])} figures, which this attempt "
        "replaced under the same identity (night, suite, digests, system configuration and "
        "settings): the system answered otherwise with nothing in its configuration saying so "
        "(a live service whose system_version leaves out a setting, or a system that is not "
        f"deterministic){kept}"
    )


def finish_run(
    connection: duckdb.DuckDBPyConnection,
    store: RunStore,
    record: EvalRunRecord,
    *,
    report_path: str | None,
    seed: int,
    max_judge_error_share: float = 0.05,
) -> Finished:
    """Load the run, complete its record, settle its baseline (on a ``publishing`` connection).
    The record of this attempt is written first, also over a complete one of an earlier
    attempt (``sync_records`` leaves those)."""
    before = registry.run_row(connection, record.eval_run_id)
    document = store.read_json(store.run_dir(record.eval_run_id) / RECORD_FILE)
    if document is not None and "started_at" in document:
        seen = _known_starts(connection).get(record.eval_run_id)
        _sync_record(connection, document, seen, force=True)
    loaded = load_run(connection, store, record)
    headline = headline_from_tables(connection, record.eval_run_id, with_gates=False)
    registry.complete_run(connection, record.eval_run_id, headline, report_path)
    run = registry.run_row(connection, record.eval_run_id)
    settled = settle_baseline(
        connection,
        run,
        seed=seed,
        eligible=baseline_eligibility(headline, max_judge_error_share),
    )
    return Finished(
        registry.run_row(connection, record.eval_run_id),
        headline,
        settled,
        loaded,
        replaced_figures(before, headline),
    )


def abandon_run(warehouse: Warehouse, store: RunStore, eval_run_id: str, reason: str) -> None:
    """Mark a run that ended without finishing as ``failed`` (a complete run stays complete)."""
    with publishing(warehouse, store) as connection:
        registry.fail_run(connection, eval_run_id, reason)
