"""The deterministic judge: lexical, exact and reproducible; the offline default.

It is strict about paraphrase. Calibrate any judge against human labels before a release gate
rests on it (``judges.calibration``).
"""

from collections.abc import Sequence
from dataclasses import dataclass

from rag_eval_pipeline.lib.judges.claims import CLAIM_BREAK, split_claims
from rag_eval_pipeline.lib.judges.protocol import (
    CONTRADICTED,
    ENTAILED,
    UNSUPPORTED,
    Claim,
    Context,
    Verdict,
)
from rag_eval_pipeline.lib.text import NEGATIONS, content_terms, numbers, sentences, words


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

    def claims_batch(self, answers: Sequence[str]) -> list[list[Claim] | None]:
        return [split_claims(answer) for answer in answers]

    def verdicts(self, pairs: Sequence[tuple[str, Context]]) -> list[Verdict]:
        return [self.verdict(claim, context) for claim, context in pairs]

    def verdict(self, claim: str, context: Context) -> Verdict:
        """One claim against its context (class docstring)."""
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
