"""Traces: what an assistant did with one question, read from JSONL or Parquet.

One trace per JSONL line (or Parquet row); the format is documented in ``docs/TRACES.md``:

- ``trace_id`` (optional, string): the trace's own id (``asst-0017``); unique in a file. It is
  the trace's key in ``judge_verdicts`` and human labels; without it the key is the ``item_id``,
  else ``<file name>:<line>``;
- ``item_id`` (optional, string or null): the golden item the trace answers; unique in a file;
- ``question`` (string, not empty): the question as asked;
- ``retrieved`` (list of ``{passage_id, score, rank}``): what retrieval returned, ranks being
  distinct integers from 1; read back in rank order; in a trace of the system under test each
  passage listed once (``check_scored_trace``: twice would count as two relevant results);
- ``context_ids`` (list of strings): the passages in the context as sent, in order;
- ``answer`` (string, may be empty when refused), ``cited_ids`` (list of strings); an answer
  the system under test gives (a live reply, a replayed file) is empty only when refused
  (``check_scored_trace``: it would be scored as a confident wrong one); a production trace,
  which is judged and not scored, may have an empty answer;
- ``refused`` (true or false), ``refusal_reason`` (optional, string or null);
- ``system_version`` and ``corpus_digest`` (strings): which system answered, on which corpus.

Fields not listed are ignored, so production traces may carry more. A trace file is read
whole and checked before anything uses it: every error is a ``TraceError`` naming the file,
the line (JSONL) or row (Parquet, counted from 1) and the problem.
"""

import hashlib
import json
import math
from collections.abc import Mapping
from pathlib import Path

import polars as pl

from rag_eval_pipeline.lib.errors import InputError
from rag_eval_pipeline.lib.inputs.golden import json_line_problem, jsonl_lines, utf8_text

JSONL_SUFFIXES = (".jsonl", ".ndjson")
PARQUET_SUFFIXES = (".parquet", ".pq")
REQUIRED_FIELDS = (
    "question",
    "retrieved",
    "context_ids",
    "answer",
    "cited_ids",
    "refused",
    "system_version",
    "corpus_digest",
)
# Every field the format names, optional ones too: a trace missing a required field names
# the fields it has beyond these (a misspelt ``cited`` for ``cited_ids``).
KNOWN_FIELDS = (
    *REQUIRED_FIELDS,
    "trace_id",
    "item_id",
    "refusal_reason",
    "prompt_tokens",
    "completion_tokens",
    "cost",
    "latency_ms",
    "attempts",
    "error",
)
HIT_TYPE = pl.Struct({"passage_id": pl.String, "score": pl.Float64, "rank": pl.Int32})
TRACE_SCHEMA = {
    "line": pl.Int64,
    "trace_id": pl.String,
    "item_id": pl.String,
    "question": pl.String,
    "retrieved": pl.List(HIT_TYPE),
    "context_ids": pl.List(pl.String),
    "answer": pl.String,
    "cited_ids": pl.List(pl.String),
    "refused": pl.Boolean,
    "refusal_reason": pl.String,
    "system_version": pl.String,
    "corpus_digest": pl.String,
}


class TraceError(InputError):
    """A trace file that cannot be used; the message names the file, the line and the problem."""


def trace_file_digest(path: Path | str) -> str:
    """SHA-256 of the trace file's bytes: two runs replaying equal digests replayed alike."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def trace_location(path: Path | str, number: int) -> str:
    """Where a trace is: ``<file>:<line>`` for JSONL, ``<file>: row <n>`` for Parquet."""
    if Path(path).suffix.lower() in PARQUET_SUFFIXES:
        return f"{path}: row {number}"
    return f"{path}:{number}"


def refuse_other_corpus_states(
    traces: pl.DataFrame, path: Path | str, other: pl.Expr, why: str, then: str
) -> None:
    """A ``TraceError`` when traces (``load_traces``' rows, ``line`` included) of ``path`` match
    ``other`` (a filter on their ``corpus_digest``): it names the first one's line and corpus
    state, ``why`` it cannot be used, and ``then`` (advice, with ``{count}`` the count)."""
    found = traces.filter(other)
    if found.height:
        first = found.row(0, named=True)
        raise TraceError(
            f"{trace_location(path, first['line'])}: trace recorded on corpus state "
            f"{first['corpus_digest']}, {why} ({then.format(count=found.height)})"
        )


def _is_text(value: object) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _id_list(record: dict, field: str, where: str) -> list[str]:
    values = record[field]
    if not isinstance(values, list) or not all(_is_text(v) for v in values):
        raise TraceError(f"{where}: '{field}' must be a list of non-empty passage id strings")
    return values


def _retrieved(record: dict, where: str) -> list[dict]:
    hits = record["retrieved"]
    if not isinstance(hits, list):
        raise TraceError(f"{where}: 'retrieved' must be a list of {{passage_id, score, rank}}")
    checked = []
    for position, hit in enumerate(hits, start=1):
        at = f"{where}: retrieved[{position}]"
        if not isinstance(hit, dict) or not {"passage_id", "score", "rank"} <= set(hit):
            raise TraceError(f"{at} must be an object with 'passage_id', 'score' and 'rank'")
        if not _is_text(hit["passage_id"]):
            raise TraceError(f"{at}: 'passage_id' must be a non-empty string")
        score = hit["score"]
        if (
            isinstance(score, bool)
            or not isinstance(score, int | float)
            or not math.isfinite(score)
        ):
            raise TraceError(f"{at}: 'score' must be a finite number, got {score!r}")
        rank = hit["rank"]
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
            raise TraceError(f"{at}: 'rank' must be an integer from 1, got {rank!r}")
        checked.append({"passage_id": hit["passage_id"], "score": float(score), "rank": rank})
    ranks = [hit["rank"] for hit in checked]
    if len(set(ranks)) != len(ranks):
        raise TraceError(f"{where}: 'retrieved' gives a rank twice")
    return sorted(checked, key=lambda hit: hit["rank"])


def _check_trace(record: object, where: str) -> dict:
    """One trace as a row of ``TRACE_SCHEMA`` (without ``line``; ``trace_id`` as given)."""
    if not isinstance(record, dict):
        raise TraceError(f"{where}: expected a JSON object, got {type(record).__name__}")
    missing = [field for field in REQUIRED_FIELDS if field not in record]
    if missing:
        unknown = [field for field in record if field not in KNOWN_FIELDS]
        also = f" (it has field(s) the format does not name: {', '.join(unknown)})"
        raise TraceError(
            f"{where}: trace is missing the field(s) {', '.join(missing)}{also if unknown else ''}"
        )
    item_id = record.get("item_id")
    if item_id is not None and not _is_text(item_id):
        raise TraceError(f"{where}: 'item_id' must be a non-empty string or null")
    trace_id = record.get("trace_id")
    if trace_id is not None and not _is_text(trace_id):
        raise TraceError(f"{where}: 'trace_id' must be a non-empty string or null")
    if not _is_text(record["question"]):
        raise TraceError(f"{where}: 'question' must be a non-empty string")
    if not isinstance(record["answer"], str):
        raise TraceError(f"{where}: 'answer' must be a string")
    if not isinstance(record["refused"], bool):
        raise TraceError(f"{where}: 'refused' must be true or false, got {record['refused']!r}")
    reason = record.get("refusal_reason")
    if reason is not None and not isinstance(reason, str):
        raise TraceError(f"{where}: 'refusal_reason' must be a string or null")
    for field in ("system_version", "corpus_digest"):
        if not _is_text(record[field]):
            raise TraceError(f"{where}: '{field}' must be a non-empty string")
    return {
        "trace_id": trace_id,
        "item_id": item_id,
        "question": record["question"],
        "retrieved": _retrieved(record, where),
        "context_ids": _id_list(record, "context_ids", where),
        "answer": record["answer"],
        "cited_ids": _id_list(record, "cited_ids", where),
        "refused": record["refused"],
        "refusal_reason": reason,
        "system_version": record["system_version"],
        "corpus_digest": record["corpus_digest"],
    }


def _jsonl_records(path: Path) -> list[tuple[int, str, str, object]]:
    records = []
    for number, line in jsonl_lines(utf8_text(path, TraceError)):
        where = trace_location(path, number)
        try:
            records.append((number, where, f"line {number}", json.loads(line)))
        except json.JSONDecodeError as exc:
            raise TraceError(f"{where}: {json_line_problem(exc)}") from None
    return records


def _parquet_records(path: Path) -> list[tuple[int, str, str, object]]:
    try:
        frame = pl.read_parquet(path)
    except Exception as exc:  # polars raises several error types for an unreadable file
        raise TraceError(f"{path}: not a readable Parquet file ({exc})") from None
    missing = [field for field in REQUIRED_FIELDS if field not in frame.columns]
    if missing:
        raise TraceError(f"{path}: Parquet file lacks the column(s) {', '.join(missing)}")
    return [
        (number, trace_location(path, number), f"row {number}", record)
        for number, record in enumerate(frame.iter_rows(named=True), start=1)
    ]


def check_scored_trace(trace: Mapping, where: str) -> None:
    """Refuse, in a trace of the system under test (a live reply, a replayed file), what would
    be scored wrongly: a passage listed twice in ``retrieved`` (each copy would count as a
    relevant result: recall above 1), and an answer that is empty (or blank) but not refused
    (scored as a confident wrong answer, where the system most likely declined). A production
    trace is only judged (its answer against its context), so ``load_traces`` does not ask this
    of it."""
    first_rank: dict[str, int] = {}
    for hit in trace["retrieved"]:
        earlier = first_rank.setdefault(hit["passage_id"], hit["rank"])
        if earlier != hit["rank"]:
            raise TraceError(
                f"{where}: 'retrieved' lists passage '{hit['passage_id']}' twice "
                f"(ranks {min(earlier, hit['rank'])} and {max(earlier, hit['rank'])}); "
                "list each passage once"
            )
    if not trace["refused"] and not trace["answer"].strip():
        raise TraceError(
            f"{where}: 'answer' is empty but 'refused' is false: a system that declines says "
            "'refused': true (an empty answer would be scored as a confident wrong one)"
        )


def load_traces(path: Path | str) -> pl.DataFrame:
    """Read and check a trace file (``.jsonl``/``.ndjson`` or ``.parquet``/``.pq``).

    Returns one row per trace in ``TRACE_SCHEMA``: ``line`` is the JSONL line or Parquet row
    number, ``trace_id`` the trace's own ``trace_id`` when given, else its ``item_id``, else
    ``<file name>:<line>``; both ids are unique in a file, and so is the resulting key. Errors
    (``TraceError``) name the file, the line or row and the problem.
    """
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"{path}: trace file does not exist")
    suffix = path.suffix.lower()
    if suffix in JSONL_SUFFIXES:
        records = _jsonl_records(path)
    elif suffix in PARQUET_SUFFIXES:
        records = _parquet_records(path)
    else:
        raise TraceError(
            f"{path}: unknown trace file type {suffix!r}; "
            f"expected one of {', '.join(JSONL_SUFFIXES + PARQUET_SUFFIXES)}"
        )
    rows = []
    seen: dict[str, str] = {}
    keys: dict[str, str] = {}
    for number, where, label, record in records:
        trace = _check_trace(record, where)
        item_id = trace["item_id"]
        if item_id is not None:
            if item_id in seen:
                raise TraceError(f"{where}: item_id {item_id!r} already traced at {seen[item_id]}")
            seen[item_id] = label
        key = trace["trace_id"] or item_id or f"{path.name}:{number}"
        if key in keys:
            raise TraceError(f"{where}: trace_id {key!r} already used at {keys[key]}")
        keys[key] = label
        rows.append({"line": number, **trace, "trace_id": key})
    if not rows:
        raise TraceError(f"{path}: trace file holds no traces")
    return pl.DataFrame(rows, schema=TRACE_SCHEMA)
