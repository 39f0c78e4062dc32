"""The reference system served over the system protocol (``docs/SYSTEM_API.md``).

``rag-eval serve-reference`` runs ``ReferenceService`` on 127.0.0.1: the built-in reference system
(BM25 over current passages with its guardrails, ``systems.reference``) over one snapshot of a
suite, answering ``POST /query`` with the trace the in-process system would give (the top ``k``
retrieved with scores and ranks, the context of the top ``context_k``, the same answer or
refusal) and ``GET /health`` with its ``system_version`` (``reference-bm25 <digest of its configuration and
``context_k``>``) and
the snapshot's ``corpus_digest``. So the whole live path can be run on the bundled library with two
terminals, and the tests have a real server.

``JsonService`` is the small HTTP/1.1 server underneath (the standard library's
``ThreadingHTTPServer`` in a thread, one JSON reply per request), shared with the fault-injecting
service of the tests (``testing.fault_service``).
"""

import datetime as dt
import json
import socket
import struct
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import polars as pl

from rag_eval_pipeline.lib.errors import ConfigError
from rag_eval_pipeline.lib.inputs.corpus import choose_snapshot, load_snapshot, snapshot_tables
from rag_eval_pipeline.lib.inputs.suites import Suite
from rag_eval_pipeline.lib.runs.record import config_digest
from rag_eval_pipeline.lib.systems.protocol import Query
from rag_eval_pipeline.lib.systems.reference import ReferenceConfig, ReferenceSystem

DEFAULT_CONTEXT_K = 5
MAX_K = 1000


@dataclass(frozen=True)
class Reply:
    """One HTTP reply; ``reset`` drops the connection instead (a TCP reset, no reply at all)."""

    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    headers: Mapping[str, str] = field(default_factory=dict)
    reset: bool = False

    @classmethod
    def json(cls, payload: Any, status: int = 200, headers: Mapping[str, str] | None = None):
        """A JSON reply."""
        return cls(status, json.dumps(payload).encode("utf-8"), headers=headers or {})


class BadRequest(ValueError):
    """A request the service cannot answer (HTTP 400)."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256


class JsonService:
    """A threaded HTTP/1.1 server on ``host:port`` (0 picks a free port) answering with
    ``reply(method, path, body, headers)``; counts requests and the most it had in flight."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self.port = port
        self.request_count = 0
        self.max_in_flight = 0
        self._in_flight = 0
        self._lock = threading.Lock()
        self.stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def reply(self, method: str, path: str, body: bytes, headers: Mapping[str, str]) -> Reply:
        """The reply to one request (subclasses)."""
        raise NotImplementedError

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>`` once started."""
        if self._server is None:
            raise RuntimeError("the service is not running")
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "JsonService":
        """Listen and serve from a daemon thread."""
        self._server = _Server((self.host, self.port), self._handler_class())
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=type(self).__name__,
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving: requests waiting on ``stopping`` end at once, the socket is closed."""
        self.stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> "JsonService":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        service = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_GET(self) -> None:
                self._handle("GET", b"")

            def do_POST(self) -> None:
                self._handle("POST", self.rfile.read(int(self.headers.get("Content-Length", 0))))

            def _handle(self, method: str, body: bytes) -> None:
                with service._lock:
                    service.request_count += 1
                    service._in_flight += 1
                    service.max_in_flight = max(service.max_in_flight, service._in_flight)
                try:
                    self._send(service.reply(method, self.path.rstrip("/"), body, self.headers))
                finally:
                    with service._lock:
                        service._in_flight -= 1

            def _send(self, reply: Reply) -> None:
                if reply.reset:
                    # SO_LINGER 0: close sends a reset rather than an orderly end.
                    self.connection.setsockopt(
                        socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                    )
                    self.close_connection = True
                    return
                lines = [
                    f"{self.protocol_version} {reply.status} {HTTPStatus(reply.status).phrase}",
                    f"Content-Type: {reply.content_type}",
                    f"Content-Length: {len(reply.body)}",
                    *(f"{name}: {value}" for name, value in reply.headers.items()),
                ]
                head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
                try:
                    self.wfile.write(head + reply.body)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True

        return Handler


class ReferenceAnswers:
    """The reference system's traces for protocol requests, over one snapshot's passages.

    Thread-safe: the BM25 index and the stemmer are not, so one request is answered at a time
    (the added latency of ``ReferenceService`` is waited outside the lock).
    """

    def __init__(
        self,
        passages: pl.DataFrame,
        corpus_digest: str,
        *,
        context_k: int = DEFAULT_CONTEXT_K,
        settings: ReferenceConfig | None = None,
    ) -> None:
        if context_k < 1:
            raise ConfigError(f"context_k must be at least 1, got {context_k}")
        self.system = ReferenceSystem(passages, settings)
        self.corpus_digest = corpus_digest
        self.context_k = context_k
        # Every setting that changes an answer is in the version, context_k included: two
        # services answering differently must never report one version (one evaluation run).
        served = {**self.system.config(), "context_k": context_k}
        self.system_version = f"{self.system.system_id} {config_digest(served)[:12]}"
        self._lock = threading.Lock()

    def warm(self) -> None:
        """Answer one question and forget it: the index is built and what the first answer
        loads is loaded before the service listens, so the first requests' latency is the
        system's, not its start-up's (about 0.3 s, which eight requests in flight all waited:
        a night's latency p50 read 200 ms where it is 1-5 ms)."""
        self.trace({"question": "warm up", "k": 1})

    def health(self) -> dict:
        """The ``GET /health`` reply."""
        return {"system_version": self.system_version, "corpus_digest": self.corpus_digest}

    def trace(self, request: object) -> dict:
        """The ``POST /query`` reply for one request (``BadRequest`` when it cannot be read)."""
        if not isinstance(request, dict):
            raise BadRequest("the request must be a JSON object")
        question, k = request.get("question"), request.get("k", 20)
        if not isinstance(question, str) or not question.strip():
            raise BadRequest("'question' must be a non-empty string")
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
            raise BadRequest(f"'k' must be a whole number from 1 to {MAX_K}")
        item_id = request.get("item_id")
        language = request.get("language") or "en"
        with self._lock:
            hits = self.system.retrieve_batch([Query(item_id, question, language)], k)[0]
            response = self.system.respond(question, hits, self.context_k)
        return {
            "item_id": item_id,
            "question": question,
            "retrieved": [
                {"passage_id": h.passage_id, "score": h.score, "rank": h.rank} for h in hits
            ],
            "context_ids": list(response.context_ids),
            "answer": response.answer,
            "cited_ids": list(response.cited_ids),
            "refused": response.refused,
            "refusal_reason": response.refusal_reason,
            "system_version": self.system_version,
            "corpus_digest": self.corpus_digest,
        }


def suite_reference_answers(
    suite: Suite, snapshot: str | None = None, *, context_k: int = DEFAULT_CONTEXT_K
) -> tuple[ReferenceAnswers, Path]:
    """The reference system over a suite's snapshot: ``snapshot`` (a folder name), else the one
    the suite names, else (``auto``) the newest; returns it with the snapshot folder."""
    folder = choose_snapshot(suite.corpus_root, None, snapshot or suite.snapshot)
    loaded = load_snapshot(folder)
    passages = snapshot_tables(loaded, loaded_at=dt.datetime.now())["corpus_passages"]
    return ReferenceAnswers(passages, loaded.corpus_digest, context_k=context_k), folder


class ReferenceService(JsonService):
    """``ReferenceAnswers`` over HTTP, each reply after ``latency_ms`` of added delay."""

    def __init__(
        self,
        answers: ReferenceAnswers,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        latency_ms: float = 0.0,
    ) -> None:
        super().__init__(host, port)
        self.answers = answers
        self.latency_s = max(0.0, latency_ms) / 1000
        self.answers.warm()

    def reply(self, method: str, path: str, body: bytes, headers: Mapping[str, str]) -> Reply:
        """``GET /health`` and ``POST /query``; anything else is 404, a bad request 400."""
        if method == "GET" and path == "/health":
            return Reply.json(self.answers.health())
        if method != "POST" or path != "/query":
            return Reply.json({"error": f"no route {method} {path}"}, 404)
        if self.latency_s and self.stopping.wait(self.latency_s):
            return Reply.json({"error": "the service is stopping"}, 503)
        try:
            return Reply.json(self.answers.trace(json.loads(body or b"null")))
        except (BadRequest, ValueError) as error:
            return Reply.json({"error": str(error)}, 400)
