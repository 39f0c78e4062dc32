"""The team's live assistant over HTTP as the system under test (``docs/SYSTEM_API.md``).

The protocol is two calls on a base URL:

- ``GET <base>/health`` answers ``{"system_version": ..., "corpus_digest": ...}``: what the service
  is and which corpus state it serves;
- ``POST <base>/query`` with ``{"question", "k", "item_id", "language"}`` answers one trace in the
  fields of ``docs/TRACES.md`` (optionally ``prompt_tokens``, ``completion_tokens``, ``cost``).

How the client behaves:

- before the first question, ``/health`` must serve the snapshot being evaluated: another
  ``corpus_digest`` fails the run naming both digests (unless ``allow_corpus_mismatch``, which is
  then part of the system configuration recorded in ``eval_runs.system_config``);
- one ``POST /query`` per item with ``k`` = the retrieval depth, at most ``concurrency`` in flight;
- each request has a timeout; 408, 409, 429, 5xx, timeouts and connection errors are retried with
  jittered exponential backoff, honouring ``Retry-After`` (seconds or an HTTP date, at most
  ``max_wait_s``); other 4xx are not retried; 401, 403 and 404 stop the run at once (the URL or
  the key is wrong for every item);
- every reply is checked as a trace file's line is (``inputs.traces``); a malformed reply, a
  passage id the snapshot lacks or a trace from another corpus state is a system error for that
  item, naming the item and the field. An answer citing an id outside its context is recorded as
  it is: citation validity catches it;
- an overall deadline: items not answered when it passes are system errors
  (``deadline_exceeded``); SIGTERM (in the main thread) or KeyboardInterrupt stops within a fraction
  of a second: no new call starts, calls in flight are abandoned, and what was answered is
  captured before the run fails;
- every item ends as ``ok`` or ``system_error`` (``systems.calls``); the capture
  (``systems.capture``) is written before ``retrieve_batch`` returns, and the answers are read
  back from it, so the generation step (perhaps in another process) and a later replay see the
  same traces.

The API key is read from the environment variable named by ``api_key_env`` when the calls are
made; it never appears in the configuration, the capture, logs or error messages.
"""

import logging
import math
import os
import queue
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path

import httpx
import polars as pl

from rag_eval_pipeline.lib.errors import ConfigError, RagEvalError
from rag_eval_pipeline.lib.http_retry import backoff_seconds, retry_after_seconds, retryable_status
from rag_eval_pipeline.lib.inputs.traces import TraceError, _check_trace, check_scored_trace
from rag_eval_pipeline.lib.systems import calls
from rag_eval_pipeline.lib.systems.calls import CallOutcome, system_error
from rag_eval_pipeline.lib.systems.capture import (
    RecordedReplaySystem,
    capture_row,
    write_capture,
)
from rag_eval_pipeline.lib.systems.protocol import Hit, Query, Response

log = logging.getLogger(__name__)

SYSTEM_ID = "http"
FATAL_STATUS = frozenset({401, 403, 404})
USAGE_FIELDS = {"prompt_tokens": int, "completion_tokens": int, "cost": float}


@dataclass(frozen=True)
class ClientSettings:
    """How the client calls the service; none of it decides an answer, so none of it is part
    of the run's identity."""

    concurrency: int = 8
    timeout_s: float = 30.0
    max_retries: int = 4
    deadline_s: float = 3600.0
    backoff_s: float = 0.5
    max_wait_s: float = 60.0

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(f"HTTP system setting '{item.name}' must be a number")
        for name, low in (("concurrency", 1), ("max_retries", 0)):
            value = getattr(self, name)
            if value < low or int(value) != value:
                raise ConfigError(
                    f"HTTP system '{name}' must be a whole number from {low}, got {value}"
                )
        for name in ("timeout_s", "deadline_s"):
            if not getattr(self, name) > 0:
                raise ConfigError(
                    f"HTTP system '{name}' must be above 0, got {getattr(self, name)}"
                )
        for name in ("backoff_s", "max_wait_s"):
            if getattr(self, name) < 0:
                raise ConfigError(
                    f"HTTP system '{name}' must be 0 or more, got {getattr(self, name)}"
                )


@dataclass(frozen=True)
class Health:
    """What ``GET /health`` says the service is and serves."""

    system_version: str
    corpus_digest: str


class ServiceError(RagEvalError):
    """The service cannot be evaluated at all: unreachable, the wrong URL or key, another corpus
    state. Messages name the URL and the key's variable, never the key."""


class CorpusMismatch(ServiceError):
    """The service serves another corpus state than the snapshot being evaluated."""

    def __init__(self, message: str, served: str, evaluated: str):
        super().__init__(message)
        self.served = served
        self.evaluated = evaluated

    def __reduce__(self):
        return (CorpusMismatch, (str(self), self.served, self.evaluated))

    def naming_snapshots(self, names: dict[str, str]) -> "CorpusMismatch":
        """The same error with the snapshot folder of each digest that has one (``names``:
        digest -> folder), which a person acts on sooner than on two digests."""

        def named(digest: str) -> str:
            folder = names.get(digest)
            return f"{digest} (snapshot {folder})" if folder else f"{digest} (no snapshot here)"

        message = str(self).replace(self.served, named(self.served), 1)
        message = message.replace(self.evaluated, named(self.evaluated), 1)
        return CorpusMismatch(message, self.served, self.evaluated)


class RunStopped(RagEvalError):
    """The live pass was stopped (SIGTERM) before every item was asked."""


@dataclass
class CallStats:
    """What the last live pass did: requests made, retries, items in error, wall time."""

    items: int = 0
    requests: int = 0
    retries: int = 0
    errors: int = 0
    wall_s: float = 0.0


def identity_config(base_url: str, system_version: str, allow_corpus_mismatch: bool) -> dict:
    """The configuration that identifies a live system: where it is and what it says it is
    (an allowed corpus mismatch is recorded too)."""
    config = {
        "system_id": SYSTEM_ID,
        "base_url": base_url.rstrip("/"),
        "system_version": system_version,
    }
    if allow_corpus_mismatch:
        config["allow_corpus_mismatch"] = True
    return config


def auth_headers(api_key_env: str | None) -> dict[str, str]:
    """``Authorization: Bearer <key>`` from the variable named ``api_key_env`` (none without)."""
    if not api_key_env:
        return {}
    key = os.environ.get(api_key_env)
    if not key:
        raise ConfigError(
            f"environment variable {api_key_env} is not set; it must hold the key of the "
            "system under test (RAG_EVAL_SYSTEM_KEY_ENV names it)"
        )
    return {"Authorization": f"Bearer {key}"}


def fatal_advice(status: int, api_key_env: str | None) -> str:
    """What to check when the service answers a status no retry can change (``FATAL_STATUS``):
    the URL for a 404, the key (or that none is sent) for a 401 or 403."""
    if status == 404:
        return "no such endpoint there; check the URL (RAG_EVAL_SYSTEM_URL)"
    if api_key_env:
        return f"check the key in {api_key_env} and the URL (RAG_EVAL_SYSTEM_URL)"
    return (
        "no key was sent; name the variable that holds it in RAG_EVAL_SYSTEM_KEY_ENV (or the "
        "system resource's api_key_env), and check the URL (RAG_EVAL_SYSTEM_URL)"
    )


def fetch_health(
    base_url: str,
    *,
    api_key_env: str | None = None,
    timeout_s: float = 10.0,
    attempts: int = 3,
) -> Health:
    """``GET <base>/health``, retried like a query; every problem is a ``ServiceError`` naming
    the URL and what is wrong."""
    if not base_url.lower().startswith(("http://", "https://")):
        raise ServiceError(
            f"{base_url}: the system's URL needs its scheme, e.g. http://{base_url} "
            "(RAG_EVAL_SYSTEM_URL or the system resource's base_url)"
        )
    url = f"{base_url.rstrip('/')}/health"
    headers = auth_headers(api_key_env)
    reason = "no attempt made"
    with httpx.Client(timeout=httpx.Timeout(timeout_s)) as client:
        for attempt in range(attempts):
            wait = backoff_seconds(attempt, 0.25, 2.0)
            try:
                response = client.get(url, headers=headers)
            except httpx.TimeoutException:
                reason = f"timed out after {timeout_s:g} s"
            except httpx.TransportError as exc:
                reason = f"connection failed ({type(exc).__name__})"
            else:
                if response.status_code in FATAL_STATUS:
                    raise ServiceError(
                        f"{url} answered HTTP {response.status_code}: "
                        f"{fatal_advice(response.status_code, api_key_env)}"
                    )
                if response.status_code == 200:
                    return _health(url, response)
                reason = f"HTTP {response.status_code}"
                if not retryable_status(response.status_code):
                    break
                wait = retry_after_seconds(response.headers) or wait
            if attempt + 1 < attempts:
                time.sleep(min(wait, 10.0))
    raise ServiceError(f"{url}: {reason}; is the system under test running at {base_url}?")


def _health(url: str, response: httpx.Response) -> Health:
    try:
        document = response.json()
    except ValueError:
        raise ServiceError(f"{url}: the reply is not JSON") from None
    if not isinstance(document, dict):
        raise ServiceError(f"{url}: the reply must be a JSON object")
    for field in ("system_version", "corpus_digest"):
        value = document.get(field)
        if not isinstance(value, str) or not value.strip():
            raise ServiceError(f"{url}: '{field}' must be a non-empty string, got {value!r}")
    return Health(document["system_version"], document["corpus_digest"])


class _Fatal(Exception):
    """A reply that means no item can be answered (401, 403, 404)."""


class HttpSystem:
    """A live assistant behind the protocol of the module docstring.

    ``passages`` are the staged passages of the snapshot being evaluated (their ``corpus_digest``
    column is the digest the service must serve); ``capture`` is the Parquet trace file the live
    pass writes and the answers are read back from.
    """

    system_id = SYSTEM_ID

    def __init__(
        self,
        base_url: str,
        passages: pl.DataFrame,
        *,
        capture: Path | str,
        api_key_env: str | None = None,
        settings: ClientSettings | None = None,
        allow_corpus_mismatch: bool = False,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.passages = passages
        self.capture = Path(capture)
        self.api_key_env = api_key_env or None
        self.settings = settings or ClientSettings()
        self.allow_corpus_mismatch = allow_corpus_mismatch
        digests = passages["corpus_digest"].unique().to_list() if passages.height else []
        if len(digests) != 1:
            raise RagEvalError(
                f"the HTTP system needs the passages of one snapshot, got {len(digests)} corpus states"
            )
        self.corpus_digest: str = digests[0]
        self._known = frozenset(passages["passage_id"].to_list())
        self.health: Health | None = None
        self.stats = CallStats()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._stopped_by: str | None = None
        self._replay: RecordedReplaySystem | None = None
        self._abandoned: list[tuple[dict | None, CallOutcome]] = []

    def __repr__(self) -> str:
        return f"HttpSystem({self.base_url!r}, capture={str(self.capture)!r})"

    def config(self) -> dict:
        """The identifying configuration (``identity_config``), from the service's ``/health``."""
        health = self.health or fetch_health(
            self.base_url, api_key_env=self.api_key_env, timeout_s=self.settings.timeout_s
        )
        return identity_config(self.base_url, health.system_version, self.allow_corpus_mismatch)

    def check_corpus(self) -> Health:
        """``/health`` must serve the snapshot being evaluated (else ``ServiceError`` naming
        both digests), unless the mismatch is allowed."""
        health = fetch_health(
            self.base_url, api_key_env=self.api_key_env, timeout_s=self.settings.timeout_s
        )
        if health.corpus_digest != self.corpus_digest:
            if not self.allow_corpus_mismatch:
                raise CorpusMismatch(
                    f"{self.base_url}/health: the service serves corpus state "
                    f"{health.corpus_digest}, but this run evaluates snapshot corpus "
                    f"{self.corpus_digest}; point the service at that snapshot, or allow the "
                    "mismatch (allow_corpus_mismatch, recorded in eval_runs.system_config)",
                    health.corpus_digest,
                    self.corpus_digest,
                )
            log.warning(
                "%s serves corpus %s, the snapshot is %s: mismatch allowed and recorded",
                self.base_url,
                health.corpus_digest[:12],
                self.corpus_digest[:12],
            )
        self.health = health
        return health

    def stop(self, reason: str = "stop requested") -> None:
        """Stop the live pass: no new call starts; calls in flight are abandoned."""
        self._stopped_by = self._stopped_by or reason
        self._stop.set()

    def retrieve_batch(self, queries: Sequence[Query], k: int) -> list[list[Hit]]:
        """Ask the service every query (module docstring), capture the traces, and return each
        trace's first ``k`` retrieved passages as read back from the capture."""
        health = self.check_corpus()
        self._stop.clear()
        self._stopped_by = None
        started = time.monotonic()
        self.stats = CallStats(items=len(queries))
        headers = auth_headers(self.api_key_env)
        limits = httpx.Limits(
            max_connections=self.settings.concurrency,
            max_keepalive_connections=self.settings.concurrency,
        )
        client = httpx.Client(timeout=httpx.Timeout(self.settings.timeout_s), limits=limits)
        interrupted: BaseException | None = None
        try:
            with self._stop_on_sigterm():
                try:
                    results = self._ask_all(client, headers, queries, k, started)
                except KeyboardInterrupt as exc:
                    interrupted = exc
                    results = self._abandoned
        finally:
            client.close()
        self.stats.wall_s = time.monotonic() - started
        self.stats.errors = sum(outcome.failed for _, outcome in results)
        rows = [
            capture_row(
                query,
                trace,
                outcome,
                system_version=health.system_version,
                corpus_digest=self.corpus_digest,
            )
            for query, (trace, outcome) in zip(queries, results, strict=True)
        ]
        write_capture(self.capture, rows)
        self._replay = None
        log.info(
            "%s: %d items, %d requests, %d retries, %d system errors in %.2f s",
            self.base_url,
            self.stats.items,
            self.stats.requests,
            self.stats.retries,
            self.stats.errors,
            self.stats.wall_s,
        )
        if interrupted is not None:
            raise interrupted
        if self._stopped_by is not None and self._stopped_by != calls.DEADLINE_EXCEEDED:
            raise RunStopped(
                f"{self.base_url}: stopped by {self._stopped_by} after "
                f"{self.stats.items - self.stats.errors} of {self.stats.items} items; no new call "
                f"was started and calls in flight were abandoned; what was answered is in "
                f"{self.capture}"
            )
        return self._replayed().retrieve_batch(queries, k)

    def respond_batch(
        self, queries: Sequence[Query], hits: Sequence[Sequence[Hit]], context_k: int
    ) -> list[Response]:
        """The captured answer of every query (the service chose its context; ``hits`` and
        ``context_k`` are not used): read from the capture, so any process answers alike."""
        return self._replayed().respond_batch(queries, hits, context_k)

    def call_outcomes(self, queries: Sequence[Query]) -> list[CallOutcome]:
        """What each query's call came to, as captured."""
        return self._replayed().call_outcomes(queries)

    @property
    def captured(self) -> Path | None:
        """The capture, once the live pass wrote it."""
        return self.capture if self.capture.is_file() else None

    def _replayed(self) -> RecordedReplaySystem:
        if self._replay is None:
            if not self.capture.is_file():
                raise RagEvalError(
                    f"{self.capture}: no capture of this run; its retrieval step (the live pass) "
                    "did not finish"
                )
            self._replay = RecordedReplaySystem(
                self.capture, self.passages, allow_corpus_mismatch=self.allow_corpus_mismatch
            )
        return self._replay

    @contextmanager
    def _stop_on_sigterm(self) -> Iterator[None]:
        """While the live pass runs in the main thread, SIGTERM stops it (then the handler that
        was there is back)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = signal.getsignal(signal.SIGTERM)
        signal.signal(signal.SIGTERM, lambda signum, frame: self.stop("SIGTERM"))
        try:
            yield
        finally:
            signal.signal(signal.SIGTERM, previous)

    def _ask_all(
        self,
        client: httpx.Client,
        headers: dict[str, str],
        queries: Sequence[Query],
        k: int,
        started: float,
    ) -> list[tuple[dict | None, CallOutcome]]:
        """Every query through ``concurrency`` daemon workers; the main thread waits, watching the
        deadline and the stop, so a stop takes effect at once whatever the workers are doing."""
        deadline = started + self.settings.deadline_s
        results: list[tuple[dict | None, CallOutcome] | None] = [None] * len(queries)
        pending: queue.SimpleQueue[int] = queue.SimpleQueue()
        for index in range(len(queries)):
            pending.put(index)
        finished = threading.Condition()
        state = {"done": 0, "open": True, "fatal": None}

        def unanswered() -> list[tuple[dict | None, CallOutcome]]:
            """The results, each item left without one a system error saying why."""
            if self._stopped_by == calls.DEADLINE_EXCEEDED:
                cause = calls.DEADLINE_EXCEEDED
                why = f"deadline exceeded ({self.settings.deadline_s:g} s for the run)"
            else:
                cause = calls.INTERRUPTED
                why = f"not answered: the run was stopped ({self._stopped_by or 'interrupted'})"
            return [
                result
                if result is not None
                else (None, system_error(query.item_id, cause, f"{_label(query)}: {why}"))
                for query, result in zip(queries, results, strict=True)
            ]

        def work() -> None:
            while not self._stop.is_set():
                try:
                    index = pending.get_nowait()
                except queue.Empty:
                    return
                try:
                    result = self._ask_one(client, headers, queries[index], k, deadline)
                except _Fatal as fatal:
                    with finished:
                        state["fatal"] = state["fatal"] or str(fatal)
                    self.stop("a fatal reply")
                    result = None
                except Exception as error:  # a bug must not hang the run: fail it, named
                    with finished:
                        state["fatal"] = state["fatal"] or f"{type(error).__name__}: {error}"
                    self.stop("an unexpected error")
                    result = None
                with finished:
                    if state["open"] and result is not None:
                        results[index] = result
                        state["done"] += 1
                    finished.notify_all()

        workers = [
            threading.Thread(target=work, name=f"http-system-{n}", daemon=True)
            for n in range(min(self.settings.concurrency, len(queries)))
        ]
        for worker in workers:
            worker.start()
        self._abandoned = []
        try:
            with finished:
                while state["done"] < len(queries) and not self._stop.is_set():
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        self.stop(calls.DEADLINE_EXCEEDED)
                        break
                    finished.wait(timeout=min(0.1, remaining))
        except KeyboardInterrupt:
            self.stop("KeyboardInterrupt")
            with finished:
                state["open"] = False
            self._abandoned = unanswered()
            raise
        with finished:
            state["open"] = False
        if state["fatal"] is not None:
            raise ServiceError(str(state["fatal"]))
        return unanswered()

    def _ask_one(
        self,
        client: httpx.Client,
        headers: dict[str, str],
        query: Query,
        k: int,
        deadline: float,
    ) -> tuple[dict | None, CallOutcome]:
        """One item: the request, retried as the module docstring says, and its outcome."""
        url = f"{self.base_url}/query"
        body = {
            "question": query.question,
            "k": k,
            "item_id": query.item_id,
            "language": query.language,
        }
        label = _label(query)
        cause, reason, latency_ms = calls.CONNECTION, "no attempt made", None
        attempts = 0
        for attempt in range(self.settings.max_retries + 1):
            if time.monotonic() >= deadline:
                return None, system_error(
                    query.item_id,
                    calls.DEADLINE_EXCEEDED,
                    f"{label}: deadline exceeded ({self.settings.deadline_s:g} s for the run) "
                    f"after {attempts} attempt(s); last: {reason}",
                    attempts=attempts,
                    latency_ms=latency_ms,
                )
            attempts += 1
            with self._lock:
                self.stats.requests += 1
            server_asked: float | None = None
            began = time.perf_counter()
            try:
                response = client.post(url, json=body, headers=headers)
            except httpx.TimeoutException:
                cause = calls.TIMEOUT
                reason = f"timed out after {self.settings.timeout_s:g} s waiting for {url}"
            except httpx.TransportError as exc:
                cause = calls.CONNECTION
                reason = f"connection to {url} failed ({type(exc).__name__})"
            except RuntimeError:
                # The client was closed under the call: the run is stopping.
                cause, reason = calls.INTERRUPTED, "abandoned: the run was stopped"
                return None, system_error(query.item_id, cause, f"{label}: {reason}")
            else:
                status = response.status_code
                if status in FATAL_STATUS:
                    raise _Fatal(
                        f"{url} answered HTTP {status} for {label}: "
                        f"{fatal_advice(status, self.api_key_env)}"
                    )
                if retryable_status(status):
                    cause, reason = calls.HTTP_STATUS, f"HTTP {status} from {url}{_said(response)}"
                    server_asked = retry_after_seconds(response.headers)
                elif status != 200:
                    return None, system_error(
                        query.item_id,
                        calls.HTTP_STATUS,
                        f"{label}: HTTP {status} from {url}{_said(response)} (not retried)",
                        attempts=attempts,
                        latency_ms=_elapsed_ms(began),
                    )
                else:
                    return self._checked(query, response, attempts, _elapsed_ms(began))
            latency_ms = _elapsed_ms(began)
            if self._stop.is_set():
                break
            if attempt < self.settings.max_retries:
                wait = (
                    min(server_asked, self.settings.max_wait_s)
                    if server_asked is not None
                    else backoff_seconds(attempt, self.settings.backoff_s, self.settings.max_wait_s)
                )
                if time.monotonic() + wait >= deadline:
                    return None, system_error(
                        query.item_id,
                        calls.DEADLINE_EXCEEDED,
                        f"{label}: deadline exceeded ({self.settings.deadline_s:g} s for the run) "
                        f"before retry {attempt + 1}; last: {reason}",
                        attempts=attempts,
                        latency_ms=latency_ms,
                    )
                with self._lock:
                    self.stats.retries += 1
                if self._stop.wait(wait):
                    break
        return None, system_error(
            query.item_id,
            cause,
            f"{label}: {reason} ({attempts} attempt{'s' if attempts != 1 else ''})",
            attempts=attempts,
            latency_ms=latency_ms,
        )

    def _checked(
        self, query: Query, response: httpx.Response, attempts: int, latency_ms: float
    ) -> tuple[dict | None, CallOutcome]:
        """A 200 reply as a checked trace, or the system error that says what is wrong with it."""
        label = _label(query)
        measured = {"attempts": attempts, "latency_ms": latency_ms}

        def malformed(cause: str, text: str) -> tuple[None, CallOutcome]:
            return None, system_error(query.item_id, cause, text, **measured)

        try:
            record = response.json()
        except ValueError:
            kind = response.headers.get("content-type", "no content type")
            return malformed(
                calls.MALFORMED_REPLY,
                f"{label}: malformed reply: not JSON ({kind}){_said(response)}",
            )
        try:
            trace = _check_trace(record, f"{label}: malformed reply")
            check_scored_trace(trace, f"{label}: malformed reply")
        except TraceError as error:
            return malformed(calls.MALFORMED_REPLY, str(error))
        if calls.cause_of(trace["refusal_reason"]) is not None:
            return malformed(
                calls.MALFORMED_REPLY,
                f"{label}: malformed reply: 'refusal_reason' {trace['refusal_reason']!r} is "
                "reserved for the pipeline's own system errors (answer 5xx when the service fails)",
            )
        if trace["item_id"] is not None and trace["item_id"] != query.item_id:
            return malformed(
                calls.MALFORMED_REPLY,
                f"{label}: malformed reply: 'item_id' is {trace['item_id']!r}, not the item asked",
            )
        usage = {}
        for field, kind in USAGE_FIELDS.items():
            value = record.get(field)
            if value is None:
                continue
            whole = kind is int and isinstance(value, int)
            number = kind is float and isinstance(value, int | float) and math.isfinite(value)
            if isinstance(value, bool) or not (whole or number) or value < 0:
                expected = "a whole number" if kind is int else "a number"
                return malformed(
                    calls.MALFORMED_REPLY,
                    f"{label}: malformed reply: '{field}' must be {expected} from 0, got {value!r}",
                )
            usage[field] = kind(value)
        for field, ids in (
            ("retrieved", [hit["passage_id"] for hit in trace["retrieved"]]),
            ("context_ids", trace["context_ids"]),
            ("cited_ids", trace["cited_ids"]),
        ):
            unknown = [passage for passage in ids if passage not in self._known]
            if unknown:
                return malformed(
                    calls.UNKNOWN_PASSAGE,
                    f"{label}: '{field}' names passage {unknown[0]!r}, which is not in the "
                    f"snapshot being evaluated ({len(unknown)} unknown id(s) in '{field}')",
                )
        if trace["corpus_digest"] != self.corpus_digest and not self.allow_corpus_mismatch:
            return malformed(
                calls.CORPUS_MISMATCH,
                f"{label}: 'corpus_digest' is {trace['corpus_digest'][:12]}, not the snapshot "
                f"being evaluated ({self.corpus_digest[:12]})",
            )
        return trace, CallOutcome(query.item_id, **measured, **usage)


def _said(response: httpx.Response, limit: int = 160) -> str:
    """``, saying '<the body's start>'`` (white space collapsed, at most ``limit`` characters),
    or nothing for an empty body: what the service said with a status or reply it should not
    have given."""
    text = " ".join(response.text.split())
    if not text:
        return ""
    return f", saying {text[:limit] + ('…' if len(text) > limit else '')!r}"


def _label(query: Query) -> str:
    return f"item {query.item_id}" if query.item_id else f"question {query.question[:60]!r}"


def _elapsed_ms(began: float) -> float:
    return round((time.perf_counter() - began) * 1000, 3)
