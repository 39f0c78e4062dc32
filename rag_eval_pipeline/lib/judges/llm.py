"""An LLM judge over any OpenAI-compatible chat completions endpoint.

``LLMJudge`` implements the ``Judge`` protocol of ``judges.protocol``: it asks the model to decompose an
answer into claims (qualifiers, numbers and units kept), then asks for one verdict per claim
against the exact context sent (passage ids and texts), ``ENTAILED`` / ``CONTRADICTED`` /
``UNSUPPORTED`` with the passage that supports or contradicts it.

Operational rules:
- requests go to ``POST {base_url}/chat/completions`` at temperature 0, optionally in JSON mode;
- 429, 5xx, timeouts and connection errors are retried with exponential backoff (jittered),
  honouring ``Retry-After`` / ``retry-after-ms`` when the server sends them;
- a malformed reply (not JSON, an unknown verdict, a passage id that is not in the context) is
  retried too; a verdict that still fails is recorded as ``JUDGE_ERROR``, which is never counted
  as supported and never cached, so a later run asks again;
- 401, 403 and 404 mean the endpoint, model or key is wrong for every request: they raise
  ``LLMJudgeError`` at once;
- results are cached in a SQLite file keyed by judge model, prompt version (and a digest of the
  prompt texts, so an edit without a version bump cannot serve stale verdicts), the claim or
  answer text and, for verdicts, the SHA-256 of the canonical JSON of the context. A verdict
  served from the cache carries ``replayed=True``;
- ``verdicts`` judges many claims with at most ``concurrency`` requests in flight, in order.

The API key is read from the environment variable named by ``api_key_env`` when a request is
made. It is never stored on the judge, and never appears in ``config()``, ``repr``, logs,
exception messages or the cache.
"""

import hashlib
import json
import logging
import os
import random
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any, TypeVar

import httpx

from rag_eval_pipeline.lib.judges.claims import CITATION
from rag_eval_pipeline.lib.judges.protocol import (
    JUDGE_ERROR,
    UNSUPPORTED,
    VERDICTS,
    Claim,
    Context,
    Verdict,
)

log = logging.getLogger(__name__)

PROMPT_VERSION = "llm-judge-prompts-v1"

CLAIMS_PROMPT = """\
You split an assistant's answer into atomic factual claims that can each be checked on its own.

Rules:
- One claim per checkable statement. Do not merge statements, do not drop any, do not add facts.
- Keep every qualifier attached to the claim it restricts: conditions and exceptions ("unless",
  "only if", "except", "provided that"), time limits and scope ("within", "before", "after",
  "at most", "at least"), and every number with its unit exactly as written ("30 days",
  "2-8 °C", "4.5 mL"). A claim without its qualifier is a different claim.
- Keep the answer's wording; resolve pronouns only when a claim would otherwise be unclear.
- Citation markers such as [DOC-1@v2#s3] follow the sentence they support. Leave them out of the
  claim text and list their ids, without brackets, in "cited_ids" of every claim taken from that
  sentence. Never invent an id.
- Greetings, refusals and hedges without factual content are not claims.

The user message is JSON: {"answer": "..."}.
Reply with JSON only: {"claims": [{"text": "...", "cited_ids": ["..."]}]}"""

VERDICT_PROMPT = """\
You check one claim against the context passages an assistant was given, and nothing else.

Verdicts:
- "ENTAILED": a passage states the claim, including every qualifier, number and unit in it.
- "CONTRADICTED": a passage covers the same statement but with a different number or unit, the
  opposite polarity, or a condition that makes the claim false.
- "UNSUPPORTED": no passage states or contradicts the claim. Use your own knowledge for nothing.

The user message is JSON: {"claim": "...", "context": [{"passage_id": "...", "text": "..."}]}.
Reply with JSON only: {"verdict": "ENTAILED" | "CONTRADICTED" | "UNSUPPORTED",
"passage_id": the passage_id that entails or contradicts the claim, or null when UNSUPPORTED}"""

PROMPT_DIGEST = hashlib.sha256(f"{CLAIMS_PROMPT}\n\n{VERDICT_PROMPT}".encode()).hexdigest()

RETRYABLE_STATUS = frozenset({408, 409, 429})
FATAL_STATUS = frozenset({401, 403, 404})
JSON_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)

T = TypeVar("T")


class LLMJudgeError(RuntimeError):
    """The judge cannot work at all (no key, wrong endpoint, model or key; failed decomposition).

    Messages name the endpoint, the model and the environment variable, never the key.
    """


class MalformedReply(ValueError):
    """A reply that parsed as HTTP but not as the answer the prompt asked for."""


def canonical_json(value: Any) -> str:
    """Key-sorted, compact, UTF-8 JSON: the same value always gives the same text."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def context_digest(context: Sequence[tuple[str, str]]) -> str:
    """SHA-256 of the canonical JSON of the context as sent: ``[[passage_id, text], ...]`` in
    order, so any change of id, text or order is a different context."""
    payload = canonical_json([[passage_id, text] for passage_id, text in context])
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def _reply_json(content: str) -> Any:
    """The JSON a model replied with, tolerating a Markdown code fence around it."""
    text = content.strip()
    fenced = JSON_FENCE.match(text)
    if fenced:
        text = fenced.group(1)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise MalformedReply(f"reply is not JSON ({exc.msg})") from None


def parse_claims(content: str, answer: str) -> list[Claim]:
    """Claims from a decomposition reply; cited ids must be citation markers of the answer."""
    reply = _reply_json(content)
    entries = reply.get("claims") if isinstance(reply, dict) else reply
    if not isinstance(entries, list):
        raise MalformedReply('reply has no "claims" list')
    markers = set(CITATION.findall(answer))
    claims: list[Claim] = []
    for entry in entries:
        if isinstance(entry, str):
            entry = {"text": entry, "cited_ids": []}
        if not isinstance(entry, dict) or not isinstance(entry.get("text"), str):
            raise MalformedReply(
                'every claim must be a string or {"text": ..., "cited_ids": [...]}'
            )
        cited = entry.get("cited_ids") or []
        if not isinstance(cited, list) or not all(isinstance(c, str) for c in cited):
            raise MalformedReply('"cited_ids" must be a list of strings')
        unknown = sorted(set(cited) - markers)
        if unknown:
            raise MalformedReply(f"claim cites ids that are not in the answer: {unknown}")
        text = entry["text"].strip()
        if text:
            claims.append(Claim(text, tuple(dict.fromkeys(cited))))
    return claims


def parse_verdict(content: str, context_ids: Sequence[str]) -> Verdict:
    """A verdict from a reply; ENTAILED and CONTRADICTED must name a passage of the context."""
    reply = _reply_json(content)
    if not isinstance(reply, dict):
        raise MalformedReply("reply is not a JSON object")
    verdict = reply.get("verdict")
    verdict = verdict.strip().upper() if isinstance(verdict, str) else verdict
    if verdict not in VERDICTS:
        raise MalformedReply(f"unknown verdict {reply.get('verdict')!r}")
    if verdict == UNSUPPORTED:
        return Verdict(UNSUPPORTED, None)
    passage_id = reply.get("passage_id")
    if passage_id not in context_ids:
        raise MalformedReply(f"{verdict} names passage {passage_id!r}, which is not in the context")
    return Verdict(verdict, passage_id)


def retry_after_seconds(headers: httpx.Headers) -> float | None:
    """The wait a server asked for: ``retry-after-ms``, or ``Retry-After`` in seconds or as an
    HTTP date; ``None`` when absent or unreadable."""
    milliseconds = headers.get("retry-after-ms")
    if milliseconds is not None:
        try:
            return max(0.0, float(milliseconds) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        moment = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return max(0.0, (moment - datetime.now(UTC)).total_seconds())


class JudgeCache:
    """Judge results in a SQLite file: one row per (kind, key), the reply as JSON.

    Safe to share between the judge's threads and between processes (SQLite locking).
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._connection = sqlite3.connect(self.path, timeout=30, check_same_thread=False)
        with self._lock, self._connection:
            self._connection.execute("PRAGMA journal_mode=WAL")
            # A cache may lose its last entries on power loss (they are asked again); it must
            # not cost an fsync per verdict.
            self._connection.execute("PRAGMA synchronous=NORMAL")
            self._connection.execute(
                """CREATE TABLE IF NOT EXISTS judge_cache (
                    kind TEXT NOT NULL,
                    cache_key TEXT NOT NULL,
                    model TEXT NOT NULL,
                    prompt_version TEXT NOT NULL,
                    subject TEXT NOT NULL,
                    context_digest TEXT,
                    result TEXT NOT NULL,
                    created_at TEXT NOT NULL,
                    PRIMARY KEY (kind, cache_key)
                )"""
            )

    def get(self, kind: str, cache_key: str) -> Any | None:
        with self._lock:
            row = self._connection.execute(
                "SELECT result FROM judge_cache WHERE kind = ? AND cache_key = ?",
                (kind, cache_key),
            ).fetchone()
        return json.loads(row[0]) if row else None

    def put(
        self,
        kind: str,
        cache_key: str,
        *,
        model: str,
        prompt_version: str,
        subject: str,
        digest: str | None,
        result: Any,
    ) -> None:
        with self._lock, self._connection:
            self._connection.execute(
                "INSERT OR REPLACE INTO judge_cache VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    kind,
                    cache_key,
                    model,
                    prompt_version,
                    subject,
                    digest,
                    canonical_json(result),
                    datetime.now(UTC).isoformat(timespec="seconds"),
                ),
            )

    def close(self) -> None:
        with self._lock:
            self._connection.close()


@dataclass
class _Failure:
    reason: str


@dataclass(eq=False)
class LLMJudge:
    """A judge backed by an OpenAI-compatible chat model (see the module docstring).

    ``api_key_env`` is the NAME of the environment variable holding the key (``None`` for
    endpoints without authentication). ``timeout`` is per request in seconds; ``max_retries``
    counts retries after the first attempt; ``cache_path`` ``None`` disables the cache.
    """

    base_url: str
    model: str
    api_key_env: str | None = "OPENAI_API_KEY"
    timeout: float = 60.0
    max_retries: int = 4
    concurrency: int = 8
    cache_path: Path | str | None = None
    json_mode: bool = True
    backoff_seconds: float = 0.5
    max_wait_seconds: float = 60.0
    judge_id: str = field(init=False)
    _client: httpx.Client | None = field(init=False, default=None, repr=False)
    _cache: JudgeCache | None = field(init=False, default=None, repr=False)
    _lock: threading.Lock = field(init=False, default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {self.concurrency}")
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be 0 or more, got {self.max_retries}")
        self.base_url = self.base_url.rstrip("/")
        self.judge_id = f"llm:{self.model}@{PROMPT_VERSION}"
        if self.cache_path is not None:
            self._cache = JudgeCache(self.cache_path)

    @property
    def prompt_key(self) -> str:
        """The prompt component of every cache key: the version and a digest of the texts."""
        return f"{PROMPT_VERSION}+{PROMPT_DIGEST[:16]}"

    def config(self) -> dict:
        """What decides the verdicts (never the key, nor operational settings like timeouts)."""
        return {
            "judge_id": self.judge_id,
            "base_url": self.base_url,
            "model": self.model,
            "prompt_version": PROMPT_VERSION,
            "prompt_digest": PROMPT_DIGEST,
            "temperature": 0,
            "json_mode": self.json_mode,
        }

    def claims(self, answer: str) -> list[Claim]:
        """The answer's claims, from the cache or the model; raises ``LLMJudgeError`` when the
        model gives no usable decomposition after the retries."""
        outcome = self._claims(answer, self._headers())
        if isinstance(outcome, _Failure):
            raise LLMJudgeError(
                f"claim decomposition by {self.model} at {self.base_url} failed: {outcome.reason}"
            )
        return outcome

    def claims_batch(self, answers: Sequence[str]) -> list[list[Claim] | None]:
        """The claims of every answer, at most ``concurrency`` requests in flight. An answer
        whose decomposition still fails after the retries gets ``None`` (its item is recorded
        as a judge error); a fatal error (wrong key, endpoint or model) raises at once."""
        if not answers:
            return []
        headers = self._headers()
        results: list[list[Claim] | None] = [None] * len(answers)
        with ThreadPoolExecutor(
            max_workers=min(self.concurrency, len(answers)), thread_name_prefix="llm-claims"
        ) as pool:
            futures = {
                pool.submit(self._claims, answer, headers): i for i, answer in enumerate(answers)
            }
            for future in as_completed(futures):
                try:
                    outcome = future.result()
                except BaseException:
                    for other in futures:
                        other.cancel()
                    raise
                if isinstance(outcome, _Failure):
                    log.warning("judge %s: claim split failed (%s)", self.judge_id, outcome.reason)
                    continue
                results[futures[future]] = outcome
        return results

    def _claims(self, answer: str, headers: dict[str, str]) -> list[Claim] | _Failure:
        if not answer.strip():
            return []
        cache_key = self._key({"model": self.model, "prompt": self.prompt_key, "answer": answer})
        if self._cache is not None:
            cached = self._cache.get("claims", cache_key)
            if cached is not None:
                return [Claim(text, tuple(cited)) for text, cited in cached]
        messages = self._messages(CLAIMS_PROMPT, {"answer": answer})
        outcome = self._ask(headers, messages, lambda content: parse_claims(content, answer))
        if isinstance(outcome, _Failure):
            return outcome
        if self._cache is not None:
            self._cache.put(
                "claims",
                cache_key,
                model=self.model,
                prompt_version=self.prompt_key,
                subject=answer,
                digest=None,
                result=[[claim.text, list(claim.cited_ids)] for claim in outcome],
            )
        return outcome

    def verdict(self, claim: str, context: Context) -> Verdict:
        """One claim against the exact context sent (see ``verdicts``)."""
        return self.verdicts([(claim, context)])[0]

    def verdicts(self, pairs: Sequence[tuple[str, Context]]) -> list[Verdict]:
        """A verdict per ``(claim, context)`` pair, in the order given.

        Cached pairs are replayed; the rest are asked with at most ``concurrency`` requests in
        flight (identical pairs are asked once). A pair that fails after the retries gets
        ``JUDGE_ERROR`` and is not cached.
        """
        results: list[Verdict | None] = [None] * len(pairs)
        pending: dict[str, list[int]] = {}
        subjects: dict[str, tuple[str, list[tuple[str, str]], str]] = {}
        for index, (claim, context) in enumerate(pairs):
            context = [(str(pid), str(text)) for pid, text in context]
            digest = context_digest(context)
            cache_key = self._key(
                {"model": self.model, "prompt": self.prompt_key, "claim": claim, "context": digest}
            )
            cached = self._cache.get("verdict", cache_key) if self._cache is not None else None
            if cached is not None:
                results[index] = Verdict(cached["verdict"], cached["passage_id"], replayed=True)
                continue
            pending.setdefault(cache_key, []).append(index)
            subjects[cache_key] = (claim, context, digest)
        if not pending:
            return [verdict for verdict in results if verdict is not None]
        headers = self._headers()

        def record(cache_key: str, outcome: Verdict | _Failure) -> None:
            claim, _, digest = subjects[cache_key]
            if isinstance(outcome, _Failure):
                log.warning("judge %s: %s (%s)", self.judge_id, JUDGE_ERROR, outcome.reason)
                outcome = Verdict(JUDGE_ERROR, None)
            elif self._cache is not None:
                self._cache.put(
                    "verdict",
                    cache_key,
                    model=self.model,
                    prompt_version=self.prompt_key,
                    subject=claim,
                    digest=digest,
                    result={"verdict": outcome.verdict, "passage_id": outcome.passage_id},
                )
            for index in pending[cache_key]:
                results[index] = outcome

        if len(subjects) == 1:
            # One request (the single ``verdict``): no thread pool to start and stop.
            [(cache_key, (claim, context, _))] = subjects.items()
            record(cache_key, self._ask_verdict(headers, claim, context))
            return [verdict for verdict in results if verdict is not None]
        with ThreadPoolExecutor(
            max_workers=min(self.concurrency, len(subjects)), thread_name_prefix="llm-judge"
        ) as pool:
            futures = {
                pool.submit(self._ask_verdict, headers, claim, context): cache_key
                for cache_key, (claim, context, _) in subjects.items()
            }
            for future in as_completed(futures):
                try:
                    outcome = future.result()
                except BaseException:
                    # A fatal error (wrong key or endpoint) would fail every other request too.
                    for other in futures:
                        other.cancel()
                    raise
                record(futures[future], outcome)
        return [verdict for verdict in results if verdict is not None]

    def close(self) -> None:
        """Close the HTTP connections and the cache file."""
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None
        if self._cache is not None:
            self._cache.close()
            self._cache = None

    def __enter__(self) -> "LLMJudge":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _key(self, parts: dict) -> str:
        return hashlib.sha256(canonical_json(parts).encode("utf-8")).hexdigest()

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self.api_key_env is None:
            return headers
        key = os.environ.get(self.api_key_env)
        if not key:
            raise LLMJudgeError(
                f"environment variable {self.api_key_env} is not set; it must hold the API key "
                f"for {self.base_url}"
            )
        headers["Authorization"] = f"Bearer {key}"
        return headers

    def _http(self) -> httpx.Client:
        with self._lock:
            if self._client is None:
                self._client = httpx.Client(
                    timeout=httpx.Timeout(self.timeout),
                    limits=httpx.Limits(
                        max_connections=self.concurrency, max_keepalive_connections=self.concurrency
                    ),
                )
            return self._client

    def _messages(self, system_prompt: str, payload: dict) -> list[dict]:
        return [
            {"role": "system", "content": system_prompt},
            {"role": "user", "content": canonical_json(payload)},
        ]

    def _ask_verdict(
        self, headers: dict[str, str], claim: str, context: list[tuple[str, str]]
    ) -> Verdict | _Failure:
        payload = {
            "claim": claim,
            "context": [{"passage_id": pid, "text": text} for pid, text in context],
        }
        context_ids = [pid for pid, _ in context]
        return self._ask(
            headers,
            self._messages(VERDICT_PROMPT, payload),
            lambda content: parse_verdict(content, context_ids),
        )

    def _wait(self, attempt: int, server_asked: float | None) -> float:
        if server_asked is not None:
            return min(server_asked, self.max_wait_seconds)
        backoff = min(self.backoff_seconds * 2**attempt, self.max_wait_seconds)
        return backoff * random.uniform(0.5, 1.0)

    def _ask(
        self, headers: dict[str, str], messages: list[dict], parse: Callable[[str], T]
    ) -> T | _Failure:
        """One chat completion parsed by ``parse``, retried on the failures worth retrying."""
        url = f"{self.base_url}/chat/completions"
        body: dict[str, Any] = {"model": self.model, "messages": messages, "temperature": 0}
        if self.json_mode:
            body["response_format"] = {"type": "json_object"}
        reason = "no attempt made"
        for attempt in range(self.max_retries + 1):
            server_asked: float | None = None
            try:
                response = self._http().post(url, json=body, headers=headers)
            except httpx.TimeoutException as exc:
                reason = f"timed out after {self.timeout} s ({type(exc).__name__})"
            except httpx.TransportError as exc:
                reason = f"connection failed ({type(exc).__name__})"
            else:
                status = response.status_code
                if status in FATAL_STATUS:
                    raise LLMJudgeError(
                        f"{url} answered HTTP {status} for model {self.model}: check base_url, "
                        f"model and the key in {self.api_key_env or 'the environment'}"
                    )
                if status in RETRYABLE_STATUS or status >= 500:
                    reason = f"HTTP {status}"
                    server_asked = retry_after_seconds(response.headers)
                elif status >= 400:
                    return _Failure(f"HTTP {status} (not retried)")
                else:
                    try:
                        content = response.json()["choices"][0]["message"]["content"]
                        if not isinstance(content, str):
                            raise MalformedReply("reply has no text content")
                        return parse(content)
                    except MalformedReply as exc:
                        reason = f"malformed reply: {exc}"
                    except (ValueError, KeyError, IndexError, TypeError):
                        reason = "malformed reply: not a chat completion"
            if attempt < self.max_retries:
                wait = self._wait(attempt, server_asked)
                log.info(
                    "judge %s: %s; retry %d of %d in %.2f s",
                    self.judge_id,
                    reason,
                    attempt + 1,
                    self.max_retries,
                    wait,
                )
                time.sleep(wait)
        return _Failure(f"{reason} (after {self.max_retries + 1} attempts)")
