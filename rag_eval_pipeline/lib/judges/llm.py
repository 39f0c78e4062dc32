"""An LLM judge over any OpenAI-compatible chat completions endpoint.

``LLMJudge`` implements the ``Judge`` protocol of ``judges.protocol``: it asks the model to decompose an
answer into claims (qualifiers, numbers and units kept), then asks for one verdict per claim
against the exact context sent (passage ids and texts), ``ENTAILED`` / ``CONTRADICTED`` /
``UNSUPPORTED`` with the passage that supports or contradicts it.

Operational rules:
- requests go to ``POST {base_url}/chat/completions`` at ``temperature`` (0 by default; part of
  the judge's configuration), optionally in JSON mode;
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
  served from the cache carries ``replayed=True``. A temperature other than 0 is part of every
  key, and so is the repeat index of a repeated verdict (``repeat_verdicts``, repeats 2, 3, ...;
  ``judges.stability``), so a repeat is a distinct call, never a replay of another repeat;
- ``verdicts`` judges many claims with at most ``concurrency`` requests in flight, in order;
- every request's tokens are estimated before it is sent (``estimated_tokens``) and counted
  (the reported ``usage.total_tokens`` when there is one); a ``JudgeBudget`` stops judging before
  a request would exceed it, recording the rest as ``JUDGE_ERROR`` "budget exhausted"
  (``judges.budget``).

The API key is read from the environment variable named by ``api_key_env`` when a request is
made. It is never stored on the judge, and never appears in ``config()``, ``repr``, logs,
exception messages or the cache.
"""

import hashlib
import json
import logging
import math
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
from pathlib import Path
from typing import Any, TypeVar

import httpx

from rag_eval_pipeline.lib.http_retry import retry_after_seconds
from rag_eval_pipeline.lib.judges.budget import BUDGET_EXHAUSTED, JudgeBudget, JudgeSpend
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

CHARS_PER_TOKEN = 4
VERDICT_REPLY_TOKENS = 30
CLAIMS_REPLY_OVERHEAD_TOKENS = 16

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


def estimated_tokens(messages: Sequence[dict], reply_tokens: int) -> int:
    """Tokens of one request, estimated before it is sent: the characters of its messages (the
    prompt text and the JSON payload) / 4, rounded up, plus ``reply_tokens`` for the reply. Four
    characters a token is the usual rule of thumb for English text with an OpenAI tokenizer;
    German, digits and JSON punctuation run higher, so read the figure as an estimate."""
    characters = sum(len(message["content"]) for message in messages)
    return math.ceil(characters / CHARS_PER_TOKEN) + reply_tokens


def claims_reply_tokens(answer: str) -> int:
    """The reply allowance of a claim split: the answer restated as claims, plus JSON."""
    return math.ceil(len(answer) / CHARS_PER_TOKEN) + CLAIMS_REPLY_OVERHEAD_TOKENS


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


def _reported_tokens(response: httpx.Response | None) -> int | None:
    """``usage.total_tokens`` of a successful chat completion, if it reports one."""
    if response is None or response.status_code >= 400:
        return None
    try:
        total = response.json().get("usage", {}).get("total_tokens")
    except (ValueError, AttributeError):
        return None
    return total if isinstance(total, int) and not isinstance(total, bool) else None


@dataclass(eq=False)
class LLMJudge:
    """A judge backed by an OpenAI-compatible chat model (see the module docstring).

    ``api_key_env`` is the NAME of the environment variable holding the key (``None`` for
    endpoints without authentication). ``timeout`` is per request in seconds; ``max_retries``
    counts retries after the first attempt; ``cache_path`` ``None`` disables the cache;
    ``temperature`` is the sampling temperature of every request (part of ``config()`` and of
    the cache keys when not 0); ``budget`` limits what the judge may spend (``judges.budget``).
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
    deadline_seconds: float = 1800.0
    temperature: float = 0.0
    budget: JudgeBudget = field(default_factory=JudgeBudget)
    judge_id: str = field(init=False)
    spend: JudgeSpend = field(init=False, repr=False)
    _client: httpx.Client | None = field(init=False, default=None, repr=False)
    _cache: JudgeCache | None = field(init=False, default=None, repr=False)
    _lock: threading.Lock = field(init=False, default_factory=threading.Lock, repr=False)
    _stop: threading.Event = field(init=False, default_factory=threading.Event, repr=False)
    _deadline: float | None = field(init=False, default=None, repr=False)

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {self.concurrency}")
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be 0 or more, got {self.max_retries}")
        if not 0 <= self.temperature <= 2:
            raise ValueError(f"temperature must be from 0 to 2, got {self.temperature}")
        self.spend = JudgeSpend(self.budget)
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
            # 0 stays the integer it always was, so a judge at temperature 0 keeps its digest.
            "temperature": self.temperature or 0,
            "json_mode": self.json_mode,
        }

    def usage(self) -> dict:
        """What the judge spent so far (``JudgeSpend.usage``)."""
        return self.spend.usage()

    def charge_earlier(self, tokens: float) -> None:
        """Count ``tokens`` spent by earlier steps of the run against the budget."""
        self.spend.spent_before = float(tokens)

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
        outcomes = self._bounded(lambda answer: self._claims(answer, headers), answers, "claims")
        for index, outcome in enumerate(outcomes):
            if isinstance(outcome, _Failure):
                if not outcome.reason.startswith(BUDGET_EXHAUSTED):
                    log.warning("judge %s: claim split failed (%s)", self.judge_id, outcome.reason)
                continue
            results[index] = outcome
        return results

    def _bounded(self, ask: Callable[[Any], Any], subjects: Sequence[Any], name: str) -> list:
        """``ask`` over ``subjects`` with at most ``concurrency`` in flight, results in order.

        A fatal error (wrong key or endpoint) cancels the rest and raises. An interrupt
        (SIGTERM, SIGINT) stops every retry loop and leaves without waiting for requests still
        in flight, so a run stops within seconds.
        """
        pool = ThreadPoolExecutor(
            max_workers=max(1, min(self.concurrency, len(subjects))),
            thread_name_prefix=f"llm-{name}",
        )
        results: list[Any] = [None] * len(subjects)
        try:
            futures = {pool.submit(ask, subject): i for i, subject in enumerate(subjects)}
            for future in as_completed(futures):
                results[futures[future]] = future.result()
        except BaseException:
            self._stop.set()
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown(wait=True)
        return results

    def _claims(self, answer: str, headers: dict[str, str]) -> list[Claim] | _Failure:
        if not answer.strip():
            return []
        cache_key = self._claims_key(answer)
        cached = self.cached_claims(answer)
        if cached is not None:
            self.spend.replay()
            return cached
        messages = self._messages(CLAIMS_PROMPT, {"answer": answer})
        outcome = self._ask(
            headers,
            messages,
            lambda content: parse_claims(content, answer),
            claims_reply_tokens(answer),
        )
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

    def cached_claims(self, answer: str) -> list[Claim] | None:
        """The answer's claims if the cache holds its split, without asking the model."""
        if self._cache is None or not answer.strip():
            return None
        cached = self._cache.get("claims", self._claims_key(answer))
        return None if cached is None else [Claim(text, tuple(cited)) for text, cited in cached]

    def planned_claims(self, answer: str) -> tuple[bool, int]:
        """Whether splitting ``answer`` would be served from the cache, and the estimated tokens
        of the request otherwise (0 when cached or empty); no request is made."""
        if not answer.strip():
            return True, 0
        if self.cached_claims(answer) is not None:
            return True, 0
        messages = self._messages(CLAIMS_PROMPT, {"answer": answer})
        return False, estimated_tokens(messages, claims_reply_tokens(answer))

    def planned_verdict(self, claim: str, context: Context, repeat: int = 1) -> tuple[bool, int]:
        """Whether the verdict on ``(claim, context)`` (as repeat ``repeat``) would be served
        from the cache, and the estimated tokens of the request otherwise; no request is made."""
        context = [(str(pid), str(text)) for pid, text in context]
        cache_key = self._verdict_key(claim, context_digest(context), repeat)
        if self._cache is not None and self._cache.get("verdict", cache_key) is not None:
            return True, 0
        messages = self._messages(VERDICT_PROMPT, self._verdict_payload(claim, context))
        return False, estimated_tokens(messages, VERDICT_REPLY_TOKENS)

    def verdict(self, claim: str, context: Context) -> Verdict:
        """One claim against the exact context sent (see ``verdicts``)."""
        return self.verdicts([(claim, context)])[0]

    def verdicts(self, pairs: Sequence[tuple[str, Context]]) -> list[Verdict]:
        """A verdict per ``(claim, context)`` pair, in the order given.

        Cached pairs are replayed; the rest are asked with at most ``concurrency`` requests in
        flight (identical pairs are asked once). A pair that fails after the retries gets
        ``JUDGE_ERROR`` and is not cached.
        """
        return self.repeat_verdicts(pairs, 1)

    def repeat_verdicts(self, pairs: Sequence[tuple[str, Context]], repeat: int) -> list[Verdict]:
        """``verdicts`` as repeat ``repeat`` of the same pairs: repeat 1 is ``verdicts``; a later
        repeat has cache keys of its own, so it asks the model again instead of replaying an
        earlier repeat (``judges.stability``)."""
        if repeat < 1:
            raise ValueError(f"repeat must be 1 or more, got {repeat}")
        results: list[Verdict | None] = [None] * len(pairs)
        pending: dict[str, list[int]] = {}
        subjects: dict[str, tuple[str, list[tuple[str, str]], str]] = {}
        for index, (claim, context) in enumerate(pairs):
            context = [(str(pid), str(text)) for pid, text in context]
            digest = context_digest(context)
            cache_key = self._verdict_key(claim, digest, repeat)
            cached = self._cache.get("verdict", cache_key) if self._cache is not None else None
            if cached is not None:
                self.spend.replay()
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
                if not outcome.reason.startswith(BUDGET_EXHAUSTED):
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
        keys = list(subjects)
        outcomes = self._bounded(
            lambda key: self._ask_verdict(headers, subjects[key][0], subjects[key][1]),
            keys,
            "judge",
        )
        for cache_key, outcome in zip(keys, outcomes, strict=True):
            record(cache_key, outcome)
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
        if self.temperature:
            parts = {**parts, "temperature": self.temperature}
        return hashlib.sha256(canonical_json(parts).encode("utf-8")).hexdigest()

    def _claims_key(self, answer: str) -> str:
        return self._key({"model": self.model, "prompt": self.prompt_key, "answer": answer})

    def _verdict_key(self, claim: str, digest: str, repeat: int) -> str:
        """A verdict's cache key; repeat 1 keeps the key it always had, so existing caches
        still replay."""
        parts = {"model": self.model, "prompt": self.prompt_key, "claim": claim, "context": digest}
        if repeat > 1:
            parts["repeat"] = repeat
        return self._key(parts)

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

    def _verdict_payload(self, claim: str, context: list[tuple[str, str]]) -> dict:
        return {
            "claim": claim,
            "context": [{"passage_id": pid, "text": text} for pid, text in context],
        }

    def _ask_verdict(
        self, headers: dict[str, str], claim: str, context: list[tuple[str, str]]
    ) -> Verdict | _Failure:
        context_ids = [pid for pid, _ in context]
        return self._ask(
            headers,
            self._messages(VERDICT_PROMPT, self._verdict_payload(claim, context)),
            lambda content: parse_verdict(content, context_ids),
            VERDICT_REPLY_TOKENS,
        )

    def _wait(self, attempt: int, server_asked: float | None) -> float:
        if server_asked is not None:
            return min(server_asked, self.max_wait_seconds)
        backoff = min(self.backoff_seconds * 2**attempt, self.max_wait_seconds)
        return backoff * random.uniform(0.5, 1.0)

    def _ask(
        self,
        headers: dict[str, str],
        messages: list[dict],
        parse: Callable[[str], T],
        reply_tokens: int,
    ) -> T | _Failure:
        """One chat completion parsed by ``parse``, retried on the failures worth retrying.

        Every attempt is estimated and reserved against the budget before it is sent; one the
        budget cannot take is not sent (``judges.budget``)."""
        url = f"{self.base_url}/chat/completions"
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": self.temperature,
        }
        estimate = estimated_tokens(messages, reply_tokens)
        if self.json_mode:
            body["response_format"] = {"type": "json_object"}
        reason = "no attempt made"
        with self._lock:
            if self._deadline is None:
                self._deadline = time.monotonic() + self.deadline_seconds
        for attempt in range(self.max_retries + 1):
            server_asked: float | None = None
            remaining = self._deadline - time.monotonic()
            if self._stop.is_set():
                return _Failure("stopped: the run was interrupted")
            if remaining <= 0:
                return _Failure(
                    f"the judge's deadline of {self.deadline_seconds:g} s for the run passed"
                )
            refused = self.spend.reserve(estimate)
            if refused is not None:
                return _Failure(refused)
            response = None
            try:
                response = self._http().post(
                    url, json=body, headers=headers, timeout=min(self.timeout, remaining)
                )
            except httpx.TimeoutException as exc:
                reason = f"timed out after {self.timeout} s ({type(exc).__name__})"
            except httpx.TransportError as exc:
                reason = f"connection failed ({type(exc).__name__})"
            finally:
                self.spend.settle(estimate, _reported_tokens(response))
            if response is not None:
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
                if self._stop.wait(min(wait, max(0.0, self._deadline - time.monotonic()))):
                    return _Failure("stopped: the run was interrupted")
        return _Failure(f"{reason} (after {self.max_retries + 1} attempts)")
