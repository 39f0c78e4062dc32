"""A fake OpenAI-compatible chat completions server for judge tests, over real HTTP.

``FakeOpenAI`` serves ``POST /v1/chat/completions`` on 127.0.0.1 (a free port) from a thread
running ``http.server.ThreadingHTTPServer``. It checks ``Authorization: Bearer <key>``, counts
requests, records their bodies and the most requests it had in flight at once, waits
``latency`` seconds before every answer, and plays scripted faults first (``fail``).

Its answers are deterministic. The user message is the JSON the judge sends:
- ``{"answer": ...}``: claims, one per sentence, with the ``[id]`` markers of that sentence as
  ``cited_ids``;
- ``{"claim": ..., "context": [...]}``: ENTAILED with the first passage whose text contains the
  claim (case-insensitive, the claim's final full stop ignored), else UNSUPPORTED.
"""

import json
import random
import re
import threading
import time
from collections import deque
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# A sentence ends at . ! ? (or at the citation markers after one) before a capital or a digit.
SENTENCE_END = re.compile(r"(?<=[.!?\]])\s+(?=[A-Z0-9\"'(])")
MARKER = re.compile(r"\s*\[([^\[\]\s]+)\]")

FAULT_KINDS = (
    "rate_limit",  # 429 with a Retry-After header
    "server_error",  # 500
    "not_json",  # 200, the message content is not JSON
    "unknown_verdict",  # 200, a verdict outside the three
    "unknown_passage",  # 200, ENTAILED with a passage id that is not in the context
    "slow",  # the normal answer after `seconds`
)


@dataclass
class Fault:
    kind: str
    retry_after: str | None = None
    seconds: float = 0.0


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256


class FakeOpenAI:
    """The fake server; use as a context manager or call ``start`` / ``stop``."""

    def __init__(self, api_key: str, *, latency: float = 0.0) -> None:
        self.api_key = api_key
        self.latency = latency
        self.request_count = 0
        self.max_in_flight = 0
        self.bodies: list[dict] = []
        self._in_flight = 0
        self._faults: deque[Fault] = deque()
        self._standing: tuple[Fault, str | None] | None = None
        self._flaky: tuple[float, random.Random] | None = None
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        if self._server is None:
            raise RuntimeError("the fake server is not running")
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def fail(
        self, kind: str, times: int = 1, *, retry_after: str | None = "1", seconds: float = 0.0
    ) -> None:
        """Answer the next ``times`` requests with fault ``kind`` (one of ``FAULT_KINDS``)."""
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault {kind!r}; known: {', '.join(FAULT_KINDS)}")
        with self._lock:
            self._faults.extend(Fault(kind, retry_after, seconds) for _ in range(times))

    def fail_always(
        self,
        kind: str,
        *,
        only: str | None = None,
        retry_after: str | None = "1",
        seconds: float = 0.0,
    ) -> None:
        """Answer every request (every ``only="claims"`` or ``only="verdicts"`` request) with
        fault ``kind`` from now on: an endpoint that is down, throttled or never answers."""
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault {kind!r}; known: {', '.join(FAULT_KINDS)}")
        if only not in (None, "claims", "verdicts"):
            raise ValueError(f"only must be 'claims', 'verdicts' or None, got {only!r}")
        with self._lock:
            self._standing = (Fault(kind, retry_after, seconds), only)

    def flaky(self, share: float, *, seed: int = 7) -> None:
        """From now on answer a seeded random ``share`` of requests with a 500 (a transient
        fault: the judge's retry succeeds)."""
        with self._lock:
            self._flaky = (share, random.Random(seed))

    def reset_counts(self) -> None:
        with self._lock:
            self.request_count = 0
            self.max_in_flight = 0
            self.bodies.clear()

    def start(self) -> "FakeOpenAI":
        self._server = _Server(("127.0.0.1", 0), self._handler_class())
        # A short poll interval so that stopping the server does not hold up every test.
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.02},
            name="fake-openai",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> "FakeOpenAI":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _next_fault(self, request_kind: str) -> Fault | None:
        with self._lock:
            if self._faults:
                return self._faults.popleft()
            if self._standing is not None and self._standing[1] in (None, request_kind):
                return self._standing[0]
            if self._flaky is not None and self._flaky[1].random() < self._flaky[0]:
                return Fault("server_error")
            return None

    def _answer(self, body: dict, fault: Fault | None) -> dict:
        request = json.loads(body["messages"][-1]["content"])
        if fault is not None and fault.kind == "not_json":
            content = "Sure! The claim looks entailed to me."
        elif fault is not None and fault.kind == "unknown_verdict":
            content = json.dumps({"verdict": "PROBABLY", "passage_id": None})
        elif fault is not None and fault.kind == "unknown_passage":
            content = json.dumps({"verdict": "ENTAILED", "passage_id": "NOT-IN-CONTEXT@v9#s9"})
        elif "answer" in request:
            content = json.dumps({"claims": decompose(request["answer"])})
        else:
            content = json.dumps(judge(request["claim"], request["context"]))
        return {
            "id": f"chatcmpl-fake-{self.request_count}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        }

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with fake._lock:
                    fake.request_count += 1
                    fake._in_flight += 1
                    fake.max_in_flight = max(fake.max_in_flight, fake._in_flight)
                try:
                    self._respond(raw)
                finally:
                    with fake._lock:
                        fake._in_flight -= 1

            def _respond(self, raw: bytes) -> None:
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                given = self.headers.get("Authorization", "")
                if given != f"Bearer {fake.api_key}":
                    # Real providers echo (part of) the key they were given; so does the fake,
                    # so a judge that forwards error bodies would leak it in a test.
                    self._send(
                        401,
                        {"error": {"message": f"Incorrect API key provided: {given}"}},
                    )
                    return
                body = json.loads(raw)
                with fake._lock:
                    fake.bodies.append(body)
                asked = json.loads(body["messages"][-1]["content"])
                fault = fake._next_fault("claims" if "answer" in asked else "verdicts")
                delay = fake.latency + (fault.seconds if fault and fault.kind == "slow" else 0)
                if delay:
                    fake._stopping.wait(delay)
                if fault is not None and fault.kind == "rate_limit":
                    headers = {"Retry-After": fault.retry_after} if fault.retry_after else {}
                    self._send(429, {"error": {"message": "Rate limit reached"}}, headers)
                elif fault is not None and fault.kind == "server_error":
                    self._send(500, {"error": {"message": "The server had an error"}})
                else:
                    self._send(200, fake._answer(body, fault))

            def _send(self, status: int, payload: dict, headers: dict | None = None) -> None:
                data = json.dumps(payload).encode("utf-8")
                lines = [
                    f"{self.protocol_version} {status} {HTTPStatus(status).phrase}",
                    "Content-Type: application/json",
                    f"Content-Length: {len(data)}",
                    *(f"{name}: {value}" for name, value in (headers or {}).items()),
                ]
                head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
                try:
                    # One write for head and body: fewer system calls, and no wait for the
                    # client's delayed ACK between two small segments.
                    self.wfile.write(head + data)
                except (BrokenPipeError, ConnectionResetError):
                    # The client gave up (its timeout); nothing to answer.
                    self.close_connection = True

        return Handler


def decompose(answer: str) -> list[dict]:
    """One claim per sentence, citation markers moved to ``cited_ids``."""
    claims = []
    for sentence in SENTENCE_END.split(" ".join(answer.split())):
        cited = MARKER.findall(sentence)
        text = MARKER.sub("", sentence).strip()
        if text:
            claims.append({"text": text, "cited_ids": cited})
    return claims


def judge(claim: str, context: list[dict]) -> dict:
    """ENTAILED by the first passage containing the claim (case-insensitive), else UNSUPPORTED."""
    needle = claim.strip().rstrip(".").lower()
    for passage in context:
        if needle and needle in passage["text"].lower():
            return {"verdict": "ENTAILED", "passage_id": passage["passage_id"]}
    return {"verdict": "UNSUPPORTED", "passage_id": None}
