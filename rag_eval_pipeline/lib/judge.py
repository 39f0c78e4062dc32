"""Judges: split an answer into claims and give each a verdict against the exact context sent.

Verdicts: ``ENTAILED`` (a context passage states it), ``CONTRADICTED`` (a passage covers the same
statement with a different number or the opposite polarity: an intrinsic error), ``UNSUPPORTED``
(nothing in the context states it: an extrinsic error). Each verdict carries the passage that
supports or contradicts the claim.

The deterministic judge is the offline default; it is lexical and exact, so it is strict about
paraphrase. Calibrate any judge against human labels before a release gate rests on it.
"""

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from rag_eval_pipeline.lib.text import NEGATIONS, content_terms, numbers, sentences, words

ENTAILED = "ENTAILED"
CONTRADICTED = "CONTRADICTED"
UNSUPPORTED = "UNSUPPORTED"
JUDGE_ERROR = "JUDGE_ERROR"
VERDICTS = (ENTAILED, CONTRADICTED, UNSUPPORTED)

CITATION = re.compile(r"\s*\[([^\[\]\s]+)\]")
# Split a sentence into separately checkable claims only at semicolons; commas and subordinate
# clauses ("unless", "within", "only if") stay attached so qualifiers are never dropped.
CLAIM_BREAK = re.compile(r";\s+")


class Claim(NamedTuple):
    text: str
    cited_ids: tuple[str, ...]


class Verdict(NamedTuple):
    verdict: str
    passage_id: str | None
    replayed: bool = False


class Judge(Protocol):
    """Any judge: claim decomposition and one verdict per claim against the context."""

    judge_id: str

    def config(self) -> dict: ...

    def claims(self, answer: str) -> list[Claim]: ...

    def verdict(self, claim: str, context: Sequence[tuple[str, str]]) -> Verdict: ...


def split_claims(answer: str) -> list[Claim]:
    """Sentences (and semicolon-separated clauses), each with the citations that close it.

    A citation marker ``[id]`` ends the stretch of text it cites: every sentence of that stretch
    carries its ids. Text after the last marker carries none.
    """
    claims: list[Claim] = []
    position = 0
    stretches: list[tuple[str, list[str]]] = []
    for match in CITATION.finditer(answer):
        text = answer[position : match.start()]
        if text.strip() or not stretches:
            stretches.append((text, [match.group(1)]))
        else:
            stretches[-1][1].append(match.group(1))
        position = match.end()
    if answer[position:].strip():
        stretches.append((answer[position:], []))
    for text, cited in stretches:
        for sentence in sentences(text):
            for part in CLAIM_BREAK.split(sentence):
                if part.strip() and content_terms(part):
                    claims.append(Claim(part.strip(), tuple(cited)))
    return claims


def _units(text: str) -> list[str]:
    """A passage's sentences, and the semicolon clauses of those that have several: claims are
    split at semicolons, so a claim is compared with the clause it came from as well as with the
    whole sentence (a "not" in the other clause must not flip its polarity)."""
    units = []
    for sentence in sentences(text):
        units.append(sentence)
        clauses = [c for c in CLAIM_BREAK.split(sentence) if c.strip()]
        if len(clauses) > 1:
            units.extend(clauses)
    return units


@dataclass(frozen=True)
class DeterministicJudge:
    """A lexical judge with exact, reproducible verdicts.

    A claim is ENTAILED by a context sentence that contains at least ``entail_coverage`` of its
    stemmed content terms, every number it states and the same polarity (negation words present
    in both or neither); sentences are also read clause by clause at semicolons. It is
    CONTRADICTED when some sentence covers at least
    ``contradict_coverage`` of its non-number terms but states other numbers, or the opposite
    polarity. Otherwise UNSUPPORTED.
    """

    entail_coverage: float = 0.8
    contradict_coverage: float = 0.6
    judge_id: str = "deterministic-lexical-v2"

    def config(self) -> dict:
        return {
            "judge_id": self.judge_id,
            "entail_coverage": self.entail_coverage,
            "contradict_coverage": self.contradict_coverage,
        }

    def claims(self, answer: str) -> list[Claim]:
        return split_claims(answer)

    def verdict(self, claim: str, context: Sequence[tuple[str, str]]) -> Verdict:
        claim_numbers = numbers(claim)
        claim_terms = {t for t in content_terms(claim) if t not in claim_numbers}
        claim_negated = bool(NEGATIONS & set(words(claim)))
        if not claim_terms and not claim_numbers:
            return Verdict(UNSUPPORTED, None)
        best_contradiction: tuple[float, str] | None = None
        for passage_id, text in context:
            for sentence in _units(text):
                sentence_terms = set(content_terms(sentence))
                coverage = len(claim_terms & sentence_terms) / max(len(claim_terms), 1)
                same_polarity = claim_negated == bool(NEGATIONS & set(words(sentence)))
                sentence_numbers = numbers(sentence)
                if (
                    coverage >= self.entail_coverage
                    and claim_numbers <= sentence_numbers
                    and same_polarity
                ):
                    return Verdict(ENTAILED, passage_id)
                conflicting_numbers = (
                    bool(claim_numbers)
                    and bool(sentence_numbers - claim_numbers)
                    and not claim_numbers <= sentence_numbers
                )
                if (
                    coverage >= self.contradict_coverage
                    and (conflicting_numbers or not same_polarity)
                    and (best_contradiction is None or coverage > best_contradiction[0])
                ):
                    best_contradiction = (coverage, passage_id)
        if best_contradiction is not None:
            return Verdict(CONTRADICTED, best_contradiction[1])
        return Verdict(UNSUPPORTED, None)
