"""The deterministic judge: lexical, exact and reproducible; the offline default.

It is strict about paraphrase. Calibrate any judge against human labels before a release gate
rests on it (``judges.calibration``).
"""

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain

from rag_eval_pipeline.lib.judges.claims import CLAIM_BREAK, split_claims
from rag_eval_pipeline.lib.judges.protocol import (
    CONTRADICTED,
    ENTAILED,
    UNSUPPORTED,
    Claim,
    Context,
    Verdict,
)
from rag_eval_pipeline.lib.text import (
    TextFacts,
    sentences,
    split_sentences,
    text_facts,
    text_facts_of,
)


def _units(text: str, split: Sequence[str] | None = None) -> list[str]:
    """A passage's sentences, and the semicolon clauses of those that have several: claims are
    split at semicolons, so a claim is compared with the clause it came from as well as with the
    whole sentence (a "not" in the other clause must not flip its polarity). ``split`` is the
    passage's sentences when they are known already."""
    units = []
    for sentence in sentences(text) if split is None else split:
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
        """Every ``(claim, context)`` pair's verdict, as ``verdict`` gives it.

        Each distinct passage is split into its units once and every distinct unit and claim
        is analysed once, all of them in one batch (``text.split_sentences``,
        ``text.text_facts``); the comparisons then only intersect sets."""
        texts = list(dict.fromkeys(text for _, context in pairs for _, text in context))
        units_of = {
            text: _units(text, split)
            for text, split in zip(texts, split_sentences(texts), strict=True)
        }
        claims = list(dict.fromkeys(claim for claim, _ in pairs))
        claim_facts = dict(zip(claims, text_facts(claims), strict=True))
        # A unit is only ever compared with claims: its terms and numbers outside theirs are
        # left out (and whether it states other numbers kept), which changes no verdict.
        units = list(dict.fromkeys(chain(*units_of.values())))
        unit_facts = dict(
            zip(
                units,
                text_facts(
                    units,
                    terms=set().union(*(f.terms for f in claim_facts.values())),
                    numbers=set().union(*(f.numbers for f in claim_facts.values())),
                ),
                strict=True,
            )
        )
        return [
            self._judge(
                claim_facts[claim],
                [
                    (passage_id, [unit_facts[unit] for unit in units_of[text]])
                    for passage_id, text in context
                ],
            )
            for claim, context in pairs
        ]

    def verdict(self, claim: str, context: Context) -> Verdict:
        """One claim against its context (class docstring)."""
        return self._judge(
            text_facts_of(claim),
            [
                (passage_id, [text_facts_of(unit) for unit in _units(text)])
                for passage_id, text in context
            ],
        )

    def _judge(
        self, claim: TextFacts, context: Sequence[tuple[str, Sequence[TextFacts]]]
    ) -> Verdict:
        claim_numbers = claim.numbers
        claim_terms = claim.terms - claim_numbers
        if not claim_terms and not claim_numbers:
            return Verdict(UNSUPPORTED, None)
        best_contradiction: tuple[float, str] | None = None
        for passage_id, units in context:
            for unit in units:
                coverage = len(claim_terms & unit.terms) / max(len(claim_terms), 1)
                same_polarity = claim.negated == unit.negated
                sentence_numbers = unit.numbers
                if (
                    coverage >= self.entail_coverage
                    and claim_numbers <= sentence_numbers
                    and same_polarity
                ):
                    return Verdict(ENTAILED, passage_id)
                conflicting_numbers = (
                    bool(claim_numbers)
                    and (unit.other_numbers or bool(sentence_numbers - claim_numbers))
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
