"""Retrying HTTP calls politely: what a server asked for, and jittered exponential backoff.

Shared by the clients that call services over HTTP (the LLM judge, the HTTP system under test):

- ``retry_after_seconds``: the wait a 429 or 503 reply asks for, from ``retry-after-ms`` or
  ``Retry-After`` (seconds, or an HTTP date);
- ``backoff_seconds``: the wait before retry ``attempt`` when the server asked for none:
  ``base * 2**attempt`` capped at ``cap``, scaled by a uniform jitter in [0.5, 1.0) so that
  clients failing together do not retry together.
"""

import random
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx

RETRYABLE_STATUS = frozenset({408, 409, 429})


def retryable_status(status: int) -> bool:
    """Whether a reply with this status is worth retrying: 408, 409, 429 and every 5xx."""
    return status in RETRYABLE_STATUS or status >= 500


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


def backoff_seconds(attempt: int, base: float, cap: float) -> float:
    """Jittered exponential backoff before retry ``attempt`` (0 for the first retry)."""
    return min(base * 2**attempt, cap) * random.uniform(0.5, 1.0)
