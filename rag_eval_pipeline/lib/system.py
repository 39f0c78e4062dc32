"""The system under test: the protocol every implementation follows, and the reference system.

The reference system is what runs offline on a fresh machine: BM25 (bm25s, Snowball stemming,
English stop words) over the passages whose document is *current* (the metadata filter the case
study asks for), then a guarded answer:

1. input check: prompt-override phrases and out-of-scope topics are refused before retrieval is
   used (``lib.guardrails``);
2. evidence check: when no current passage scores at least ``evidence_threshold`` the system
   abstains *before* the answer step;
3. extractive answer: the sentences of the context that best cover the question's terms, each
   followed by the id of the passage it came from, e.g. ``... within 4 hours. [SPEC-LABEL-004@v3#s2]``;
4. citation check: an answer citing an id that is not in the context sent is rejected.
"""

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import NamedTuple, Protocol

import bm25s
import numpy as np
import polars as pl
import Stemmer

from rag_eval_pipeline.lib import guardrails
from rag_eval_pipeline.lib.text import content_terms, sentences


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
    """What the pipeline needs from any assistant: retrieval and a (possibly refused) answer."""

    system_id: str

    def config(self) -> dict: ...

    def retrieve(self, question: str, k: int) -> list[Hit]: ...

    def respond(self, question: str, hits: Sequence[Hit], context_k: int) -> Response: ...


def config_digest(config: dict) -> str:
    """SHA-256 of a configuration as canonical JSON: two runs with equal digests ran alike."""
    canonical = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class ReferenceConfig:
    """Settings of the reference system; their digest identifies the configuration."""

    k1: float = 1.5
    b: float = 0.75
    current_only: bool = True
    evidence_threshold: float = 3.0
    max_answer_sentences: int = 2
    second_sentence_ratio: float = 0.8


class ReferenceSystem:
    """BM25 over current passages with the four guardrails above."""

    system_id = "reference-bm25"

    def __init__(self, passages: pl.DataFrame, settings: ReferenceConfig | None = None):
        self.settings = settings or ReferenceConfig()
        eligible = passages
        if self.settings.current_only:
            eligible = passages.filter(pl.col("status") == "current")
        eligible = eligible.sort("passage_id")
        self._ids: list[str] = eligible["passage_id"].to_list()
        self._texts: dict[str, str] = dict(zip(self._ids, eligible["text"].to_list(), strict=True))
        indexed = (
            eligible.select(
                pl.concat_str(["title", "section_title", "text"], separator="\n").alias("doc")
            )
            .to_series()
            .to_list()
        )
        self._stemmer = Stemmer.Stemmer("english")
        self._index = bm25s.BM25(k1=self.settings.k1, b=self.settings.b)
        if indexed:
            tokens = bm25s.tokenize(
                indexed, stopwords="en", stemmer=self._stemmer, show_progress=False
            )
            self._index.index(tokens, show_progress=False)

    def config(self) -> dict:
        return {"system_id": self.system_id, **asdict(self.settings)}

    def retrieve(self, question: str, k: int) -> list[Hit]:
        return self.retrieve_many([question], k)[0]

    def retrieve_many(self, questions: Sequence[str], k: int) -> list[list[Hit]]:
        """Top-k current passages per question, ordered by score descending then passage id
        descending (trec_eval's tie order); passages sharing no term with the question are not
        returned."""
        if not self._ids or not questions:
            return [[] for _ in questions]
        depth = min(len(self._ids), k + 16)
        query_tokens = bm25s.tokenize(
            list(questions),
            stopwords="en",
            stemmer=self._stemmer,
            return_ids=False,
            show_progress=False,
        )
        results: list[list[Hit]] = []
        for tokens in query_tokens:
            if not tokens:
                results.append([])
                continue
            indices, scores = self._index.retrieve([tokens], k=depth, show_progress=False)
            pairs = [
                (self._ids[int(i)], round(float(s), 6))
                for i, s in zip(indices[0], scores[0], strict=True)
                if s > 0
            ]
            pairs.sort(key=lambda pair: pair[0], reverse=True)
            pairs.sort(key=lambda pair: pair[1], reverse=True)
            results.append(
                [Hit(pid, score, rank) for rank, (pid, score) in enumerate(pairs[:k], 1)]
            )
        return results

    def respond(self, question: str, hits: Sequence[Hit], context_k: int) -> Response:
        context = [
            ContextPassage(h.passage_id, self._texts[h.passage_id]) for h in hits[:context_k]
        ]
        context_ids = tuple(p.passage_id for p in context)
        best = max((h.score for h in hits), default=None)
        blocked = guardrails.input_check(question)
        if blocked:
            return Response(True, blocked, "", (), context_ids, best)
        if best is None or best < self.settings.evidence_threshold:
            return Response(True, guardrails.NO_EVIDENCE, "", (), context_ids, best)
        answer, cited = extractive_answer(
            question,
            context,
            self.settings.max_answer_sentences,
            self.settings.second_sentence_ratio,
        )
        rejected = guardrails.citation_check(cited, context_ids)
        if rejected:
            return Response(True, rejected, answer, cited, context_ids, best)
        return Response(False, None, answer, cited, context_ids, best)


def extractive_answer(
    question: str,
    context: Sequence[ContextPassage],
    max_sentences: int = 2,
    second_ratio: float = 0.8,
) -> tuple[str, tuple[str, ...]]:
    """The context sentences that best cover the question, each followed by ``[passage id]``.

    A sentence scores the sum over distinct question terms it contains of ``1 + log(1 + n/df)``,
    where ``df`` counts context sentences with the term (rarer terms weigh more); ties go to the
    earlier passage in the context. A further sentence is added while it scores at least
    ``second_ratio`` of the best.
    """
    question_terms = set(content_terms(question))
    candidates: list[tuple[str, str, set[str]]] = []
    for passage in context:
        for sentence in sentences(passage.text):
            candidates.append((passage.passage_id, sentence, set(content_terms(sentence))))
    if not candidates or not question_terms:
        return "", ()
    n = len(candidates)
    df = {t: sum(1 for _, _, terms in candidates if t in terms) for t in question_terms}
    weights = {t: 1 + math.log(1 + n / df[t]) for t in question_terms if df[t]}
    scores = np.array(
        [sum(weights.get(t, 0.0) for t in terms & question_terms) for *_, terms in candidates]
    )
    order = sorted(range(n), key=lambda i: (-scores[i], i))
    if scores[order[0]] <= 0:
        return "", ()
    chosen = [order[0]]
    for index in order[1:max_sentences]:
        if scores[index] >= second_ratio * scores[order[0]]:
            chosen.append(index)
    chosen.sort()
    parts = [f"{candidates[i][1]} [{candidates[i][0]}]" for i in chosen]
    cited = tuple(dict.fromkeys(candidates[i][0] for i in chosen))
    return " ".join(parts), cited
