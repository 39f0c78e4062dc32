"""What each call to the system under test came to: the ``system_calls`` table and its bound.

Every item of a run gets one outcome:

- ``ok``: the system answered with a trace (a refusal is an answer: it is ``ok``);
- ``system_error``: the call finally failed (timeouts, connection errors, HTTP errors after the
  retries, a malformed reply, a passage id the snapshot lacks, another corpus state, the run's
  deadline, an interrupt). ``cause`` is a stable code (``CAUSES``), ``error`` a short text naming
  the item and, for a malformed reply, the field.

A system error is neither a refusal, a wrong answer nor a right one: the item is left out of every
retrieval and generation rate and counted in ``system_error_rate`` instead. In
``generation_results`` (and in a trace file) it is a refused row whose ``refusal_reason`` is
``system_error:<cause>``, so a replay of a captured run leaves the same items out.

Systems that call a service report their outcomes (``ReportsCalls``); the in-process systems make
no calls, and every item is ``ok`` with no attempts, latency, tokens or cost.
"""

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

import polars as pl

from rag_eval_pipeline.lib.errors import RagEvalError
from rag_eval_pipeline.lib.store.tables import row_schema
from rag_eval_pipeline.lib.systems.protocol import Query

OK = "ok"
SYSTEM_ERROR = "system_error"
SYSTEM_ERROR_REASON = "system_error:"
DEFAULT_MAX_ERROR_SHARE = 0.02

TIMEOUT = "timeout"
CONNECTION = "connection"
HTTP_STATUS = "http_status"
MALFORMED_REPLY = "malformed_reply"
UNKNOWN_PASSAGE = "unknown_passage"
CORPUS_MISMATCH = "corpus_mismatch"
DEADLINE_EXCEEDED = "deadline_exceeded"
INTERRUPTED = "interrupted"
CAUSES = (
    TIMEOUT,
    CONNECTION,
    HTTP_STATUS,
    MALFORMED_REPLY,
    UNKNOWN_PASSAGE,
    CORPUS_MISMATCH,
    DEADLINE_EXCEEDED,
    INTERRUPTED,
)


@dataclass(frozen=True)
class CallOutcome:
    """What the call for one item came to (a row of ``system_calls`` without the run id)."""

    item_id: str | None
    outcome: str = OK
    cause: str | None = None
    error: str | None = None
    attempts: int | None = None
    latency_ms: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost: float | None = None

    @property
    def failed(self) -> bool:
        return self.outcome == SYSTEM_ERROR

    @property
    def refusal_reason(self) -> str | None:
        """``system_error:<cause>`` for a system error (its row in ``generation_results``)."""
        return f"{SYSTEM_ERROR_REASON}{self.cause}" if self.failed else None


def system_error(item_id: str | None, cause: str, error: str, **measured) -> CallOutcome:
    """A system error for one item; ``error`` should name the item."""
    if cause not in CAUSES:
        raise ValueError(f"unknown system error cause {cause!r}; known: {', '.join(CAUSES)}")
    return CallOutcome(item_id, SYSTEM_ERROR, cause, error, **measured)


def cause_of(refusal_reason: str | None) -> str | None:
    """The cause of a ``system_error:<cause>`` refusal reason; ``None`` for any other reason."""
    if refusal_reason and refusal_reason.startswith(SYSTEM_ERROR_REASON):
        return refusal_reason[len(SYSTEM_ERROR_REASON) :]
    return None


def is_system_error(refusal_reason: pl.Expr) -> pl.Expr:
    """Rows of ``generation_results`` (or traces) that record a system error, not a refusal."""
    return refusal_reason.fill_null("").str.starts_with(SYSTEM_ERROR_REASON)


@runtime_checkable
class ReportsCalls(Protocol):
    """A system that can say what each call came to, in the order of ``queries``."""

    def call_outcomes(self, queries: Sequence[Query]) -> list[CallOutcome]: ...


@runtime_checkable
class CapturesTraces(Protocol):
    """A live system that keeps what it did as a trace file (``lib.systems.capture``)."""

    @property
    def captured(self) -> Path | None: ...


def calls_frame(outcomes: Sequence[CallOutcome]) -> pl.DataFrame:
    """``system_calls`` rows (without ``eval_run_id``)."""
    return pl.DataFrame(
        [asdict(outcome) for outcome in outcomes], schema=row_schema("system_calls")
    )


class SystemErrorBoundError(RagEvalError):
    """A run whose share of system errors is above its bound; the message gives the counts."""


@dataclass(frozen=True)
class ErrorBound:
    """The error-share check of one run: how many items failed, why, against the bound."""

    items: int
    errors: int
    max_share: float
    by_cause: dict[str, int]
    first_errors: tuple[str, ...]

    @property
    def share(self) -> float:
        return self.errors / self.items if self.items else 0.0

    @property
    def passed(self) -> bool:
        return self.share <= self.max_share

    @property
    def message(self) -> str:
        """``7 of 266 items (2.6%) ended in a system error, above the bound of 2.0%: 5
        timeout, 2 http_status; e.g. item q17: ...``."""
        relation = "within" if self.passed else "above"
        text = (
            f"{self.errors} of {self.items} items ({self.share:.1%}) ended in a system error, "
            f"{relation} the bound of {self.max_share:.1%}"
        )
        if self.by_cause:
            text += ": " + ", ".join(f"{n} {cause}" for cause, n in self.by_cause.items())
        if self.first_errors:
            text += "; e.g. " + "; ".join(self.first_errors)
        return text


def error_bound(calls: pl.DataFrame, max_share: float, examples: int = 3) -> ErrorBound:
    """The error-share check over a run's ``system_calls``: causes by count (most first)."""
    failed = calls.filter(pl.col("outcome") == SYSTEM_ERROR)
    by_cause = Counter(cause or "unknown" for cause in failed["cause"].to_list())
    return ErrorBound(
        items=calls.height,
        errors=failed.height,
        max_share=max_share,
        by_cause=dict(sorted(by_cause.items(), key=lambda pair: (-pair[1], pair[0]))),
        first_errors=tuple(e for e in failed["error"].head(examples).to_list() if e),
    )
