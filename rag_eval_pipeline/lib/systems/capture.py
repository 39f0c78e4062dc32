"""The capture of a live run: its traces as a Parquet trace file, and replaying it as it happened.

A live system (``systems.http``) writes what it did with every item to
``<warehouse folder>/traces/<eval_run_id>.parquet``: the columns of ``docs/TRACES.md`` (so
``load_traces`` and ``RAG_EVAL_SYSTEM=replay`` read it) plus what the call came to, each nullable:

| column | meaning |
|---|---|
| ``attempts`` | requests made for the item (1 = no retry) |
| ``latency_ms`` | wall time of the request that gave the outcome, in milliseconds |
| ``prompt_tokens``, ``completion_tokens``, ``cost`` | as the service reported them, when it did |
| ``error`` | for a system error, the short cause naming the item (and the field) |

An item whose call failed is a trace with ``refused`` true, ``refusal_reason``
``system_error:<cause>`` and nothing retrieved, sent or cited (``systems.calls``), so a replay
leaves it out of the rates exactly as the live run did. ``RecordedReplaySystem`` replays any trace
file and reports these columns as the run's ``system_calls``: replaying a capture gives the same
``retrieval_results``, ``generation_results``, ``system_calls`` and metric tables as the live run.
"""

import contextlib
import json
import os
from collections.abc import Sequence
from pathlib import Path

import polars as pl

from rag_eval_pipeline.lib.files import replaced_atomically
from rag_eval_pipeline.lib.inputs.golden import jsonl_lines
from rag_eval_pipeline.lib.inputs.traces import (
    JSONL_SUFFIXES,
    PARQUET_SUFFIXES,
    TRACE_SCHEMA,
    trace_file_digest,
)
from rag_eval_pipeline.lib.systems.calls import OK, SYSTEM_ERROR, CallOutcome, cause_of
from rag_eval_pipeline.lib.systems.protocol import Query
from rag_eval_pipeline.lib.systems.replay import ReplaySystem

MEASURED_SCHEMA = {
    "attempts": pl.Int32,
    "latency_ms": pl.Float64,
    "prompt_tokens": pl.Int64,
    "completion_tokens": pl.Int64,
    "cost": pl.Float64,
    "error": pl.String,
}
# A capture row is a trace (without the reader's line and trace id) and what its call came to.
CAPTURE_SCHEMA = {
    **{name: dtype for name, dtype in TRACE_SCHEMA.items() if name not in ("line", "trace_id")},
    **MEASURED_SCHEMA,
}


def capture_row(
    query: Query,
    trace: dict | None,
    outcome: CallOutcome,
    *,
    system_version: str,
    corpus_digest: str,
) -> dict:
    """One row of a capture: the checked trace of an item, or the trace of its system error."""
    measured = {
        "attempts": outcome.attempts,
        "latency_ms": outcome.latency_ms,
        "prompt_tokens": outcome.prompt_tokens,
        "completion_tokens": outcome.completion_tokens,
        "cost": outcome.cost,
        "error": outcome.error,
    }
    if trace is not None and not outcome.failed:
        return {
            **{field: trace[field] for field in CAPTURE_SCHEMA if field in trace},
            "item_id": query.item_id,
            "question": query.question,
            **measured,
        }
    return {
        "item_id": query.item_id,
        "question": query.question,
        "retrieved": [],
        "context_ids": [],
        "answer": "",
        "cited_ids": [],
        "refused": True,
        "refusal_reason": outcome.refusal_reason,
        "system_version": system_version,
        "corpus_digest": corpus_digest,
        **measured,
    }


def write_capture(path: Path | str, rows: Sequence[dict]) -> str:
    """Write the capture atomically (a temporary file beside it, then a rename); its SHA-256."""
    target = Path(path)
    with replaced_atomically(target) as temporary:
        pl.DataFrame(list(rows), schema=CAPTURE_SCHEMA).write_parquet(temporary, statistics=True)
    return trace_file_digest(target)


def measured_fields(path: Path | str) -> dict[int, dict]:
    """The optional call columns of a trace file (``MEASURED_SCHEMA``), by JSONL line or Parquet
    row number (as ``load_traces`` numbers them); fields a file lacks are absent."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in PARQUET_SUFFIXES:
        present = [name for name in MEASURED_SCHEMA if name in pl.read_parquet_schema(path)]
        if not present:
            return {}
        frame = pl.read_parquet(path, columns=present)
        return dict(enumerate(frame.iter_rows(named=True), start=1))
    if suffix in JSONL_SUFFIXES:
        measured = {}
        for number, line in jsonl_lines(path.read_text(encoding="utf-8")):
            record = json.loads(line)
            measured[number] = {k: record[k] for k in MEASURED_SCHEMA if k in record}
        return measured
    return {}


def _number(value: object, kind: type) -> int | float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return kind(value)


class RecordedReplaySystem(ReplaySystem):
    """Replay of a trace file that also reports what each recorded call came to.

    ``call_outcomes`` gives ``system_error`` (its cause from the ``system_error:<cause>`` refusal
    reason, its text from the ``error`` column) or ``ok``, with the recorded attempts, latency,
    tokens and cost where the file has them (a capture does; a hand-made trace file usually not).
    """

    def __init__(
        self,
        path: Path | str,
        passages: pl.DataFrame | None = None,
        *,
        allow_corpus_mismatch: bool = False,
    ):
        super().__init__(path, passages, allow_corpus_mismatch=allow_corpus_mismatch)
        self._measured = measured_fields(self.path)

    def call_outcomes(self, queries: Sequence[Query]) -> list[CallOutcome]:
        """The recorded outcome of each query's trace, in order."""
        outcomes = []
        for query in queries:
            trace = self._trace(query.question, query.item_id, "calls")
            measured = self._measured.get(trace["line"], {})
            cause = cause_of(trace["refusal_reason"])
            error = measured.get("error")
            if cause is not None and not error:
                error = f"item {query.item_id}: recorded as {trace['refusal_reason']}"
            outcomes.append(
                CallOutcome(
                    item_id=query.item_id,
                    outcome=OK if cause is None else SYSTEM_ERROR,
                    cause=cause,
                    error=error if cause is not None else None,
                    attempts=_number(measured.get("attempts"), int),
                    latency_ms=_number(measured.get("latency_ms"), float),
                    prompt_tokens=_number(measured.get("prompt_tokens"), int),
                    completion_tokens=_number(measured.get("completion_tokens"), int),
                    cost=_number(measured.get("cost"), float),
                )
            )
        return outcomes


def merge_captures(
    parts: Sequence[str | Path], target: Path, item_order: Sequence[str]
) -> tuple[Path, str]:
    """Merge the shards' capture parts into the run's trace file, rows in golden-set order (so
    the capture is the same for any number of shards), written atomically; the parts are
    removed. Returns the trace file and its SHA-256.

    A trace file already there is never replaced: it may be what a complete run's figures were
    measured from (a run run again keeps its figures, and its recorded capture, until the new
    attempt completes). A capture with other bytes goes to ``<stem>.<first 12 of its
    digest>.parquet`` beside it, so equal names always hold equal bytes."""
    frames = [pl.read_parquet(part) for part in parts]
    merged = pl.concat(frames, how="vertical_relaxed")
    order = pl.DataFrame({"item_id": list(item_order), "position": range(len(item_order))})
    merged = (
        merged.join(order, on="item_id", how="left")
        .sort("position", nulls_last=True, maintain_order=True)
        .drop("position")
    )
    staged = target.with_name(f".{target.name}.merged")
    with replaced_atomically(staged) as temporary:
        merged.write_parquet(temporary, statistics=True)
    digest = trace_file_digest(staged)
    if target.is_file() and trace_file_digest(target) != digest:
        target = target.with_name(f"{target.stem}.{digest[:12]}{target.suffix}")
    if target.is_file():
        staged.unlink()
    else:
        os.replace(staged, target)
    for part in parts:
        if Path(part) != target:
            Path(part).unlink(missing_ok=True)
    if parts and Path(parts[0]).parent != target.parent:
        with contextlib.suppress(OSError):
            Path(parts[0]).parent.rmdir()
    return target, digest
