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

import hashlib
import json
import math
import os
import warnings
from collections.abc import Mapping, Sequence, Set
from dataclasses import asdict, dataclass
from functools import lru_cache
from importlib.metadata import version as _version
from itertools import islice

import polars as pl
import Stemmer
from upath import UPath

from rag_eval_pipeline.lib.store.run_store import write_atomically
from rag_eval_pipeline.lib.systems import guardrails
from rag_eval_pipeline.lib.systems.bm25 import (
    INDEX_FORMAT,
    TOKEN_PATTERN,
    BM25Index,
    query_tokens,
    stop_words,
)
from rag_eval_pipeline.lib.systems.protocol import ContextPassage, Hit, Query, Response
from rag_eval_pipeline.lib.text import content_terms, sentences, split_sentences, term_sets

# A passage's sentences, each with its set of content terms.
AnalysedPassage = tuple[tuple[str, frozenset[str]], ...]


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
    """BM25 over current passages with the four guardrails above.

    The BM25 index is built on the first retrieval, so a system built only to answer from
    given hits (the generation step) never indexes the corpus."""

    system_id = "reference-bm25"

    def __init__(
        self,
        passages: pl.DataFrame,
        settings: ReferenceConfig | None = None,
        index_cache: UPath | None = None,
    ):
        self.settings = settings or ReferenceConfig()
        eligible = passages
        if self.settings.current_only:
            eligible = passages.filter(pl.col("status") == "current")
        columns = ["passage_id", "title", "section_title", "text"]
        if "passage_digest" in eligible.columns:
            columns.append("passage_digest")
        self._eligible = eligible.select(columns).sort("passage_id")
        self._index_cache = index_cache
        self._ids: list[str] = self._eligible["passage_id"].to_list()
        self._texts: dict[str, str] = {}
        self._stemmer = Stemmer.Stemmer("english")
        self._index: BM25Index | None = None

    def config(self) -> dict:
        return {"system_id": self.system_id, **self.settings.identity()}

    def index(self) -> BM25Index:
        """The BM25 index over title, section title and text of every eligible passage: read
        from ``index_cache`` when an index of exactly these passages and settings is there
        (``index_key``), else built, and then kept there for the next run."""
        if self._index is None:
            key = self.index_key() if self._index_cache is not None else None
            cached = None if key is None else self._index_cache / f"{key}.npz"
            if cached is not None and cached.exists():
                self._index = self._read_index(cached, key)
            if self._index is None:
                self._index = BM25Index.build(
                    self._eligible.select("title", "section_title", "text"),
                    k1=self.settings.k1,
                    b=self.settings.b,
                    stemmer=self._stemmer,
                    threads=self.settings.threads or os.cpu_count() or 1,
                )
                if cached is not None:
                    self._keep_index(cached, key)
        return self._index

    def _read_index(self, cached: UPath, key: str) -> BM25Index | None:
        """The index kept at ``cached``, or None (with a warning) when it cannot be used."""
        try:
            with cached.open("rb") as handle:
                index = BM25Index.load(handle, key)
        except Exception as error:  # any unreadable cache file is built again
            warnings.warn(f"{cached}: unreadable BM25 index, built again ({error})", stacklevel=3)
            return None
        if index.count != self._eligible.height:
            warnings.warn(f"{cached}: BM25 index of another corpus, built again", stacklevel=3)
            return None
        return index

    def _keep_index(self, cached: UPath, key: str) -> None:
        """Write the built index to ``cached``; a failure only warns (the index is built, and
        only the next night pays for it)."""
        index = self._index
        try:
            write_atomically(cached, lambda handle: index.save(handle, key))
        except OSError as error:
            warnings.warn(f"{cached}: BM25 index not kept for the next run ({error})", stacklevel=3)

    def index_key(self) -> str | None:
        """What the BM25 index is a function of, as a SHA-256: the eligible passages (ids and
        digests, in index order; a passage digest pins its title, section title and text), k1
        and b, the tokenizer (its pattern and stop words) and the libraries that define it.
        None when the passages carry no digests (then the index is never cached)."""
        if "passage_digest" not in self._eligible.columns:
            return None
        identity = hashlib.sha256()
        identity.update(
            json.dumps(
                {
                    "format": INDEX_FORMAT,
                    "k1": self.settings.k1,
                    "b": self.settings.b,
                    "fields": ["title", "section_title", "text"],
                    "token_pattern": TOKEN_PATTERN,
                    "stop_words": sorted(stop_words()),
                    "bm25s": _version("bm25s"),
                    "PyStemmer": _version("PyStemmer"),
                    "polars": _version("polars"),
                },
                sort_keys=True,
            ).encode()
        )
        for passage_id, digest in self._eligible.select("passage_id", "passage_digest").iter_rows():
            identity.update(f"\n{passage_id} {digest}".encode())
        return identity.hexdigest()

    def _text_of(self, passage_ids: set[str]) -> dict[str, str]:
        """The texts of ``passage_ids`` (eligible passages only), kept for later answers."""
        missing = passage_ids - self._texts.keys()
        if missing:
            rows = self._eligible.filter(pl.col("passage_id").is_in(sorted(missing)))
            self._texts.update(zip(rows["passage_id"], rows["text"], strict=True))
        return self._texts

    def retrieve_batch(self, queries: Sequence[Query], k: int) -> list[list[Hit]]:
        """Top-k current passages per query, every query scored in one batched call (as bm25s
        scores them, ``lib.systems.bm25``), ordered by score descending then passage id
        descending (trec_eval's tie order); passages sharing no term with the question are not
        returned."""
        if not self._ids or not queries:
            return [[] for _ in queries]
        tokens = query_tokens([query.question for query in queries], self._stemmer)
        threads = self.settings.threads or os.cpu_count() or 1
        ranked = self.index().search(tokens, k, threads=threads)
        return [
            [Hit(self._ids[index], score, rank) for rank, (index, score) in enumerate(hits, 1)]
            for hits in ranked
        ]

    def respond_batch(
        self, queries: Sequence[Query], hits: Sequence[Sequence[Hit]], context_k: int
    ) -> list[Response]:
        """The guarded answer for every query (module docstring), given its retrieved hits.

        The sentences of every context passage to answer from are analysed together first
        (``analyse_passages``), then each answer is picked from its context as ``respond``
        picks it."""
        answering = [
            not guardrails.input_check(query.question)
            and bool(item_hits)
            and max(h.score for h in item_hits) >= self.settings.evidence_threshold
            for query, item_hits in zip(queries, hits, strict=True)
        ]
        texts = self._text_of({hit.passage_id for item in hits for hit in item[:context_k]})
        needed = {
            hit.passage_id
            for answers, item_hits in zip(answering, hits, strict=True)
            if answers
            for hit in item_hits[:context_k]
        }
        asked = {
            term
            for query, answers in zip(queries, answering, strict=True)
            if answers
            for term in content_terms(query.question)
        }
        analysed = analyse_passages([texts[passage] for passage in sorted(needed)], asked)
        return [
            self.respond(query.question, item_hits, context_k, analysed)
            for query, item_hits in zip(queries, hits, strict=True)
        ]

    def respond(
        self,
        question: str,
        hits: Sequence[Hit],
        context_k: int,
        analysed: Mapping[str, AnalysedPassage] | None = None,
    ) -> Response:
        """One guarded answer: input check, evidence check, extractive answer, citation check.
        ``analysed`` holds context passages' sentences analysed already (by text)."""
        texts = self._texts
        if any(h.passage_id not in texts for h in hits[:context_k]):
            texts = self._text_of({h.passage_id for h in hits[:context_k]})
        context = [ContextPassage(h.passage_id, texts[h.passage_id]) for h in hits[:context_k]]
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
            analysed,
        )
        rejected = guardrails.citation_check(cited, context_ids)
        if rejected:
            return Response(True, rejected, answer, cited, context_ids, best)
        return Response(False, None, answer, cited, context_ids, best)


ANALYSE_CHUNK = 500


@lru_cache(maxsize=65536)
def analysed_sentences(text: str) -> AnalysedPassage:
    """A passage's sentences with their content terms, cached: the same passages are sent as
    context for many questions."""
    return tuple((sentence, frozenset(content_terms(sentence))) for sentence in sentences(text))


def analyse_passages(
    texts: Sequence[str], within: Set[str] | None = None
) -> dict[str, AnalysedPassage]:
    """``analysed_sentences`` of many passages at once (by text): every passage split into
    sentences and every sentence's terms found in one batch (``text.split_sentences``,
    ``text.term_sets``), the same sentences and terms as one by one. With ``within`` (the
    questions' terms), each sentence keeps only those terms: all the answer step compares.

    The passages are analysed ``ANALYSE_CHUNK`` at a time, so Polars' token tables are a chunk's
    (10,600 passages, 176,000 sentences: a peak of 174 MB above the start instead of 327 MB,
    and 1.8 s instead of 2.2 s)."""
    unique = list(dict.fromkeys(texts))
    analysed: dict[str, AnalysedPassage] = {}
    for start in range(0, len(unique), ANALYSE_CHUNK):
        chunk = unique[start : start + ANALYSE_CHUNK]
        split = split_sentences(chunk)
        terms = iter(term_sets([sentence for parts in split for sentence in parts], within))
        for text, parts in zip(chunk, split, strict=True):
            analysed[text] = tuple(zip(parts, islice(terms, len(parts)), strict=True))
    return analysed


def extractive_answer(
    question: str,
    context: Sequence[ContextPassage],
    max_sentences: int = 2,
    second_ratio: float = 0.8,
    analysed: Mapping[str, AnalysedPassage] | None = None,
) -> tuple[str, tuple[str, ...]]:
    """The context sentences that best cover the question, each followed by ``[passage id]``.

    A sentence scores the sum over distinct question terms it contains of ``1 + log(1 + n/df)``,
    where ``df`` counts context sentences with the term (rarer terms weigh more), added in term
    order (so equal term sets score exactly equal, whatever Python's string hashing); ties go to
    the earlier passage in the context. A further sentence is added while it scores at least
    ``second_ratio`` of the best. ``analysed`` may hold the passages' sentences already.
    """
    question_terms = set(content_terms(question))
    analysed = analysed or {}
    candidates: list[tuple[str, str, frozenset[str]]] = [
        (passage.passage_id, sentence, terms)
        for passage in context
        for sentence, terms in (analysed.get(passage.text) or analysed_sentences(passage.text))
    ]
    if not candidates or not question_terms:
        return "", ()
    n = len(candidates)
    df = {t: sum(1 for _, _, terms in candidates if t in terms) for t in question_terms}
    weights = {t: 1 + math.log(1 + n / df[t]) for t in question_terms if df[t]}
    scores = [
        sum(weights.get(t, 0.0) for t in sorted(terms & question_terms)) for *_, terms in candidates
    ]
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
