"""A fault-injecting system service on 127.0.0.1, for the tests and benchmarks of the HTTP system.

``FaultService`` speaks the system protocol (``docs/SYSTEM_API.md``) in front of any answerer
with ``health()`` and ``trace(request)`` (the reference system's ``ReferenceAnswers``), and plays
scripted faults, per item (``fail(kind, item_id=...)``: the next ``times`` requests for that item)
or per request (the next ``times`` requests of any item):

| kind | what the client gets |
|---|---|
| ``rate_limit`` | 429 with ``Retry-After`` (``retry_after``, seconds or an HTTP date) |
| ``server_error`` | 500 |
| ``hang`` | nothing for ``seconds`` (past the client's timeout), then the normal reply |
| ``reset`` | the connection reset, no reply |
| ``not_json`` | 200 with a body that is not JSON |
| ``missing_field`` | the trace without ``field`` |
| ``bad_field`` | the trace with ``field`` set to ``value`` |
| ``unknown_passage`` | a retrieved passage id that is not in the snapshot |
| ``cite_outside_context`` | an answer citing a passage of the snapshot that is not in its context |
| ``empty_answer`` | an empty answer, citing nothing, not refused |

``health_corpus_digest`` makes ``/health`` serve another corpus state. It counts requests (per
item too), records request bodies and whether each carried the expected bearer token, and runs
in a thread that ``stop()`` ends.
"""

import json
import threading
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from rag_eval_pipeline.lib.systems.service import BadRequest, JsonService, Reply

UNKNOWN_PASSAGE_ID = "NOT-IN-SNAPSHOT@v9#s9"
FAULT_KINDS = (
    "rate_limit",
    "server_error",
    "hang",
    "reset",
    "not_json",
    "missing_field",
    "bad_field",
    "unknown_passage",
    "cite_outside_context",
    "empty_answer",
)


class Answerer(Protocol):
    """What the fault service stands in front of (``ReferenceAnswers``)."""

    def health(self) -> dict: ...

    def trace(self, request: object) -> dict: ...


@dataclass(frozen=True)
class Fault:
    """One scripted fault (``kind`` of ``FAULT_KINDS``) and its details."""

    kind: str
    retry_after: str | None = "1"
    seconds: float = 0.0
    field: str = "answer"
    value: Any = None
    passage_id: str | None = None


class FaultService(JsonService):
    """The protocol in front of ``answers`` with scripted faults (module docstring)."""

    def __init__(
        self,
        answers: Answerer,
        *,
        latency_ms: float = 0.0,
        health_corpus_digest: str | None = None,
        api_key: str | None = None,
        port: int = 0,
    ) -> None:
        super().__init__("127.0.0.1", port)
        self.answers = answers
        self.latency_s = latency_ms / 1000
        self.health_corpus_digest = health_corpus_digest
        self.api_key = api_key
        self.requests_by_item: Counter[str | None] = Counter()
        self.bodies: list[dict] = []
        self.authorized: list[bool] = []
        self._general: deque[Fault] = deque()
        self._by_item: dict[str, deque[Fault]] = {}
        self._faults_lock = threading.Lock()

    def fail(self, kind: str, *, item_id: str | None = None, times: int = 1, **details) -> None:
        """Play fault ``kind`` on the next ``times`` requests (for ``item_id`` when given)."""
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault {kind!r}; known: {', '.join(FAULT_KINDS)}")
        faults = [Fault(kind, **details) for _ in range(times)]
        with self._faults_lock:
            if item_id is None:
                self._general.extend(faults)
            else:
                self._by_item.setdefault(item_id, deque()).extend(faults)

    def _next_fault(self, item_id: str | None) -> Fault | None:
        with self._faults_lock:
            own = self._by_item.get(item_id) if item_id is not None else None
            if own:
                return own.popleft()
            return self._general.popleft() if self._general else None

    def reply(self, method: str, path: str, body: bytes, headers: Mapping[str, str]) -> Reply:
        """The protocol's two routes, with the scripted faults."""
        if self.api_key is not None:
            allowed = headers.get("Authorization") == f"Bearer {self.api_key}"
            with self._faults_lock:
                self.authorized.append(allowed)
            if not allowed:
                return Reply.json({"error": "unauthorized"}, 401)
        if method == "GET" and path == "/health":
            health = dict(self.answers.health())
            if self.health_corpus_digest is not None:
                health["corpus_digest"] = self.health_corpus_digest
            return Reply.json(health)
        if method != "POST" or path != "/query":
            return Reply.json({"error": f"no route {method} {path}"}, 404)
        request = json.loads(body or b"null")
        item_id = request.get("item_id") if isinstance(request, dict) else None
        with self._faults_lock:
            self.bodies.append(request)
            self.requests_by_item[item_id] += 1
        fault = self._next_fault(item_id)
        delay = self.latency_s + (fault.seconds if fault and fault.kind == "hang" else 0.0)
        if delay and self.stopping.wait(delay):
            return Reply(reset=True)
        if fault is not None and fault.kind == "rate_limit":
            headers_out = {"Retry-After": fault.retry_after} if fault.retry_after else {}
            return Reply.json({"error": "rate limited"}, 429, headers_out)
        if fault is not None and fault.kind == "server_error":
            return Reply.json({"error": "internal error"}, 500)
        if fault is not None and fault.kind == "reset":
            return Reply(reset=True)
        if fault is not None and fault.kind == "not_json":
            return Reply(200, b"<html>Service temporarily unavailable</html>", "text/html")
        try:
            trace = self.answers.trace(request)
        except BadRequest as error:
            return Reply.json({"error": str(error)}, 400)
        return Reply.json(_with_fault(trace, fault))


def _with_fault(trace: dict, fault: Fault | None) -> dict:
    """The trace as the fault leaves it."""
    if fault is None:
        return trace
    trace = dict(trace)
    if fault.kind == "missing_field":
        trace.pop(fault.field, None)
    elif fault.kind == "bad_field":
        trace[fault.field] = fault.value
    elif fault.kind == "unknown_passage":
        rank = len(trace["retrieved"]) + 1
        trace["retrieved"] = [
            *trace["retrieved"],
            {"passage_id": fault.passage_id or UNKNOWN_PASSAGE_ID, "score": 0.5, "rank": rank},
        ]
    elif fault.kind == "cite_outside_context":
        outside = fault.passage_id or next(
            hit["passage_id"]
            for hit in trace["retrieved"]
            if hit["passage_id"] not in trace["context_ids"]
        )
        trace["answer"] = f"{trace['answer'] or 'See the procedure.'} [{outside}]".strip()
        trace["cited_ids"] = [*trace["cited_ids"], outside]
        trace["refused"], trace["refusal_reason"] = False, None
    elif fault.kind == "empty_answer":
        trace["answer"], trace["cited_ids"] = "", []
        trace["refused"], trace["refusal_reason"] = False, None
    return trace
