"""The reference system: what runs offline on a fresh machine.

BM25 (bm25s, Snowball stemming, English stop words) over the passages whose document is *current*
(the metadata filter the case study asks for), then a guarded answer:

1. input check: prompt-override phrases and out-of-scope topics are refused before retrieval is
   used (``systems.guardrails``);
2. evidence check: when no current passage scores at least ``evidence_threshold`` the system
   abstains *before* the answer step;
3. extractive answer: the sentences of the context that best cover the question's terms, each
   followed by the id of the passage it came from, e.g. ``... within 4 hours. [SPEC-LABEL-004@v3#s2]``;
4. citation check: an answer citing an id that is not in the context sent is rejected.
"""

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache

import bm25s
import numpy as np
import polars as pl
import Stemmer

from rag_eval_pipeline.lib.systems import guardrails
from rag_eval_pipeline.lib.systems.protocol import ContextPassage, Hit, Query, Response
from rag_eval_pipeline.lib.text import content_terms, sentences


@dataclass(frozen=True)
class ReferenceConfig:
    """Settings of the reference system; their digest identifies the configuration."""

    k1: float = 1.5
    b: float = 0.75
    current_only: bool = True
    evidence_threshold: float = 3.0
    max_answer_sentences: int = 2
    second_sentence_ratio: float = 0.8
    threads: int = 0

    def identity(self) -> dict:
        """The settings that decide the answers (``threads`` only decides the speed)."""
        return {key: value for key, value in asdict(self).items() if key != "threads"}


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
        return {"system_id": self.system_id, **self.settings.identity()}

    def retrieve_batch(self, queries: Sequence[Query], k: int) -> list[list[Hit]]:
        """Top-k current passages per query in one batched BM25 call, ordered by score descending
        then passage id descending (trec_eval's tie order); passages sharing no term with the
        question are not returned."""
        if not self._ids or not queries:
            return [[] for _ in queries]
        depth = min(len(self._ids), k + 16)
        query_tokens = bm25s.tokenize(
            [query.question for query in queries],
            stopwords="en",
            stemmer=self._stemmer,
            return_ids=False,
            show_progress=False,
        )
        asked = [i for i, tokens in enumerate(query_tokens) if tokens]
        results: list[list[Hit]] = [[] for _ in queries]
        if not asked:
            return results
        indices, scores = self._index.retrieve(
            [query_tokens[i] for i in asked],
            k=depth,
            show_progress=False,
            n_threads=self.settings.threads,
        )
        for position, row in enumerate(asked):
            pairs = [
                (self._ids[int(i)], round(float(s), 6))
                for i, s in zip(indices[position], scores[position], strict=True)
                if s > 0
            ]
            pairs.sort(key=lambda pair: pair[0], reverse=True)
            pairs.sort(key=lambda pair: pair[1], reverse=True)
            results[row] = [Hit(pid, score, rank) for rank, (pid, score) in enumerate(pairs[:k], 1)]
        return results

    def respond_batch(
        self, queries: Sequence[Query], hits: Sequence[Sequence[Hit]], context_k: int
    ) -> list[Response]:
        """The guarded answer for every query (module docstring), given its retrieved hits."""
        return [
            self.respond(query.question, item_hits, context_k)
            for query, item_hits in zip(queries, hits, strict=True)
        ]

    def respond(self, question: str, hits: Sequence[Hit], context_k: int) -> Response:
        """One guarded answer: input check, evidence check, extractive answer, citation check."""
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


@lru_cache(maxsize=65536)
def analysed_sentences(text: str) -> tuple[tuple[str, frozenset[str]], ...]:
    """A passage's sentences with their content terms, cached: the same passages are sent as
    context for many questions."""
    return tuple((sentence, frozenset(content_terms(sentence))) for sentence in sentences(text))


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
    candidates: list[tuple[str, str, frozenset[str]]] = [
        (passage.passage_id, sentence, terms)
        for passage in context
        for sentence, terms in analysed_sentences(passage.text)
    ]
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
