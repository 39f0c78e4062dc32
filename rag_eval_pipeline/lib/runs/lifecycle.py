"""An evaluation run from start to finish: the record in the run store and in the warehouse.

- ``begin_run``: the record goes to ``run.json`` in the run folder and to the warehouse with
  status ``started``, before the system is asked anything, so a run that dies is visible as
  incomplete rather than missing;
- ``finish_run``: the summary step loads every table, completes the record and settles the
  baseline, in one private copy of the warehouse published at once;
- ``abandon_run``: a run that ended without finishing is marked ``failed`` with why.
"""

from dataclasses import dataclass

import duckdb

from rag_eval_pipeline.lib.errors import RagEvalError
from rag_eval_pipeline.lib.reporting.summary import headline_from_tables
from rag_eval_pipeline.lib.runs import registry
from rag_eval_pipeline.lib.runs.baselines import Settled, settle_baseline
from rag_eval_pipeline.lib.runs.load import load_run
from rag_eval_pipeline.lib.runs.record import EvalRunRecord
from rag_eval_pipeline.lib.store.run_store import RunStore
from rag_eval_pipeline.lib.store.warehouse import Warehouse

RECORD_FILE = "run.json"


def begin_run(
    warehouse: Warehouse, store: RunStore, record: EvalRunRecord, dagster_run_id: str | None
) -> None:
    """Write the run's record (status ``started``) to its run folder and to the warehouse."""
    store.write_json(
        store.run_dir(record.eval_run_id) / RECORD_FILE,
        {**record.as_json(), "dagster_run_id": dagster_run_id},
    )
    with warehouse.writing() as connection:
        registry.start_run(connection, record, dagster_run_id)


def read_record(store: RunStore, eval_run_id: str) -> EvalRunRecord:
    """The record a run's folder holds."""
    document = store.read_json(store.run_dir(eval_run_id) / RECORD_FILE)
    if document is None:
        raise RagEvalError(f"{store.run_dir(eval_run_id)}: no {RECORD_FILE}; the run never began")
    return EvalRunRecord.from_json(document)


@dataclass(frozen=True)
class Finished:
    """What the summary step read back after loading a run."""

    run: dict
    headline: dict
    settled: Settled
    loaded: dict[str, int]


def finish_run(
    connection: duckdb.DuckDBPyConnection,
    store: RunStore,
    record: EvalRunRecord,
    *,
    report_path: str | None,
    seed: int,
) -> Finished:
    """Load the run, complete its record, settle its baseline (on a writing connection)."""
    loaded = load_run(connection, store, record)
    headline = headline_from_tables(connection, record.eval_run_id)
    registry.complete_run(connection, record.eval_run_id, headline, report_path)
    run = registry.run_row(connection, record.eval_run_id)
    settled = settle_baseline(connection, run, seed=seed)
    return Finished(registry.run_row(connection, record.eval_run_id), headline, settled, loaded)


def abandon_run(warehouse: Warehouse, eval_run_id: str, reason: str) -> None:
    """Mark a run that ended without finishing as ``failed`` (a complete run stays complete)."""
    with warehouse.writing() as connection:
        registry.fail_run(connection, eval_run_id, reason)
