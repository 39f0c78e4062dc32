"""The system under test: the protocol every implementation follows, and what it returns.

The pipeline asks a system two things, each for a whole batch of golden questions at once (so a
system can batch, thread or pipeline its work; nothing in the assets loops over questions):

- ``retrieve_batch(queries, k)``: the top ``k`` passages for every query, ranked, with scores;
- ``respond_batch(queries, hits, context_k)``: for every query, the guarded answer (or refusal with
  its reason) given the context the system sends, with the ids it cites and the context ids as sent.

Implementations: the built-in reference system (``systems.reference``), replay of a trace file
(``systems.replay``) and, as the team's live assistant, the HTTP client (``systems.http``).
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol


class Query(NamedTuple):
    """One question as the system is asked it (``item_id`` is the golden item, when there is one)."""

    item_id: str | None
    question: str
    language: str = "en"


class Hit(NamedTuple):
    """One retrieved passage: id, score and 1-based rank."""

    passage_id: str
    score: float
    rank: int


class ContextPassage(NamedTuple):
    passage_id: str
    text: str


@dataclass(frozen=True)
class Response:
    """What the system did with one question."""

    refused: bool
    refusal_reason: str | None
    answer: str
    cited_ids: tuple[str, ...]
    context_ids: tuple[str, ...]
    best_score: float | None


class SystemUnderTest(Protocol):
    """What the pipeline needs from any assistant: batched retrieval and guarded answers."""

    system_id: str

    def config(self) -> dict: ...

    def retrieve_batch(self, queries: Sequence[Query], k: int) -> list[list[Hit]]: ...

    def respond_batch(
        self, queries: Sequence[Query], hits: Sequence[Sequence[Hit]], context_k: int
    ) -> list[Response]: ...
