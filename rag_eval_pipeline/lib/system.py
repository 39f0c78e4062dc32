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

``ReplaySystem`` follows the same protocol from a trace file (JSONL, one trace a line, or
Parquet, one a row; read by ``lib.traces.load_traces``, described in ``docs/TRACES.md``)::

    {"item_id": "q17",                      # optional: the golden item; unique in the file
     "question": "How long may a labelled sample wait?",
     "retrieved": [{"passage_id": "LAB-LABEL-001@v2#s2", "score": 7.31, "rank": 1}, ...],
     "context_ids": ["LAB-LABEL-001@v2#s2", ...],   # the context as sent, in order
     "answer": "... within 15 minutes of collection. [LAB-LABEL-001@v2#s2]",
     "cited_ids": ["LAB-LABEL-001@v2#s2"],
     "refused": false, "refusal_reason": null,      # reason optional, e.g. evidence_check:...
     "system_version": "ward-assistant 2.3.1", "corpus_digest": "4b97..."}

Its configuration is the trace file's name and SHA-256 digest, so two different trace files
are two different evaluation runs.
"""

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple, Protocol

import bm25s
import numpy as np
import polars as pl
import Stemmer

from rag_eval_pipeline.lib import guardrails
from rag_eval_pipeline.lib.text import content_terms, sentences
from rag_eval_pipeline.lib.traces import (
    TraceError,
    load_traces,
    trace_file_digest,
    trace_location,
)


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


class ReplaySystem:
    """Replay of recorded traces (format in ``lib.traces`` and ``docs/TRACES.md``).

    ``retrieve`` returns the trace's retrieved passages (rank order, first ``k``); ``respond``
    returns the trace's answer, citations, refusal and the context *as sent*, whatever hits and
    ``context_k`` it is given, so a replay measures what the recorded system did. The best score
    is the highest retrieved score of the trace.

    A question is found by ``item_id`` when the caller passes one and the trace file has it,
    otherwise by its exact text. The pipeline asks in golden-set line order, so when several
    traces share a question text they are served in file order, one per request, separately
    for retrieval and for answers (and round again on a second pass). A question without a
    trace is an error naming the trace file. With ``passages`` given, every passage id a trace
    mentions must be in them (a trace recorded on another corpus state fails naming its line).
    """

    system_id = "replay"

    def __init__(self, path: Path | str, passages: pl.DataFrame | None = None):
        self.path = Path(path)
        self.traces = load_traces(self.path)
        self.trace_digest = trace_file_digest(self.path)
        if passages is not None:
            self._check_passages(set(passages["passage_id"].to_list()))
        self._rows = self.traces.to_dicts()
        self._by_item = {row["item_id"]: row for row in self._rows if row["item_id"]}
        self._by_question: dict[str, list[dict]] = {}
        for row in self._rows:
            self._by_question.setdefault(row["question"], []).append(row)
        self._served: dict[tuple[str, str], int] = {}

    @staticmethod
    def config_of(path: Path | str) -> dict:
        """The configuration that identifies a replay: the trace file's name and digest."""
        return {
            "system_id": ReplaySystem.system_id,
            "trace_file": Path(path).name,
            "trace_digest": trace_file_digest(path),
        }

    def config(self) -> dict:
        return {
            "system_id": self.system_id,
            "trace_file": self.path.name,
            "trace_digest": self.trace_digest,
        }

    def _check_passages(self, known: set[str]) -> None:
        mentioned = self.traces.select(
            "line",
            pl.concat_list(
                pl.col("retrieved").list.eval(pl.element().struct.field("passage_id")),
                "context_ids",
                "cited_ids",
            ).alias("passage_id"),
        ).explode("passage_id")
        unknown = mentioned.filter(
            pl.col("passage_id").is_not_null() & ~pl.col("passage_id").is_in(list(known))
        )
        if unknown.height:
            line, passage = unknown.row(0)
            raise TraceError(
                f"{trace_location(self.path, line)}: passage {passage!r} is not in the corpus snapshot "
                f"({unknown['passage_id'].n_unique()} unknown passage id(s) in all)"
            )

    def _trace(self, question: str, item_id: str | None, purpose: str) -> dict:
        if item_id is not None and item_id in self._by_item:
            return self._by_item[item_id]
        candidates = self._by_question.get(question)
        if not candidates:
            shown = f"item {item_id!r}" if item_id is not None else f"question {question!r}"
            raise TraceError(f"{self.path}: no trace for {shown}")
        served = self._served.get((purpose, question), 0)
        self._served[(purpose, question)] = served + 1
        return candidates[served % len(candidates)]

    def retrieve(self, question: str, k: int, item_id: str | None = None) -> list[Hit]:
        """The first ``k`` recorded hits of the question's trace."""
        trace = self._trace(question, item_id, "retrieve")
        return [Hit(h["passage_id"], h["score"], h["rank"]) for h in trace["retrieved"][:k]]

    def retrieve_many(
        self, questions: Sequence[str], k: int, item_ids: Sequence[str | None] | None = None
    ) -> list[list[Hit]]:
        """``retrieve`` for each question in order (by item id where given)."""
        ids = item_ids if item_ids is not None else [None] * len(questions)
        return [self.retrieve(q, k, i) for q, i in zip(questions, ids, strict=True)]

    def respond(
        self, question: str, hits: Sequence[Hit], context_k: int, item_id: str | None = None
    ) -> Response:
        """The recorded answer or refusal, with the context ids as sent."""
        trace = self._trace(question, item_id, "respond")
        best = max((h["score"] for h in trace["retrieved"]), default=None)
        return Response(
            refused=trace["refused"],
            refusal_reason=trace["refusal_reason"],
            answer=trace["answer"],
            cited_ids=tuple(trace["cited_ids"]),
            context_ids=tuple(trace["context_ids"]),
            best_score=best,
        )
