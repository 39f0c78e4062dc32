"""Judges: split an answer into claims and give each a verdict against the exact context sent.

Verdicts: ``ENTAILED`` (a context passage states it), ``CONTRADICTED`` (a passage covers the same
statement with a different number or the opposite polarity: an intrinsic error), ``UNSUPPORTED``
(nothing in the context states it: an extrinsic error). Each verdict carries the passage that
supports or contradicts the claim. ``JUDGE_ERROR`` is not a verdict: it records that judging
failed, is never counted as supported, and is left out of every rate with its count shown.

Both methods take a whole batch, so a judge can batch or parallelise its calls.
Implementations: the deterministic lexical judge (``judges.deterministic``, the offline default)
and an LLM judge over any OpenAI-compatible endpoint (``judges.llm``).
"""

from collections.abc import Sequence
from typing import NamedTuple, Protocol, runtime_checkable

ENTAILED = "ENTAILED"
CONTRADICTED = "CONTRADICTED"
UNSUPPORTED = "UNSUPPORTED"
JUDGE_ERROR = "JUDGE_ERROR"
VERDICTS = (ENTAILED, CONTRADICTED, UNSUPPORTED)

Context = Sequence[tuple[str, str]]


class Claim(NamedTuple):
    text: str
    cited_ids: tuple[str, ...]


class Verdict(NamedTuple):
    verdict: str
    passage_id: str | None
    replayed: bool = False


class Judge(Protocol):
    """Any judge: claim decomposition and one verdict per claim against its context."""

    judge_id: str

    def config(self) -> dict: ...

    def claims_batch(self, answers: Sequence[str]) -> list[list[Claim] | None]:
        """The claims of every answer; ``None`` for an answer whose decomposition failed."""
        ...

    def verdicts(self, pairs: Sequence[tuple[str, Context]]) -> list[Verdict]: ...


@runtime_checkable
class PaidJudge(Protocol):
    """A judge that calls a model: it keeps an account of what it spent, can be charged what
    earlier steps of the run spent (one budget per run), and can say what a call would cost
    before making it (``judges.plan``). The deterministic judge is not one: it spends nothing."""

    def usage(self) -> dict: ...

    def charge_earlier(self, tokens: float) -> None: ...

    def cached_claims(self, answer: str) -> list[Claim] | None: ...

    def planned_claims(self, answer: str) -> tuple[bool, int]: ...

    def planned_verdict(
        self, claim: str, context: Context, repeat: int = 1
    ) -> tuple[bool, int]: ...

    def close(self) -> None: ...
