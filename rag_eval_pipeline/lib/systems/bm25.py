"""BM25 as bm25s 0.3.16 computes it, indexed and scored for every question at once.

The reference system's ranking is defined by bm25s (Lucene BM25, its tokenizer, English stop
words, Snowball stemming; ``bm25s.BM25(k1, b).index(bm25s.tokenize(...))``). This module
reproduces that index bit for bit and scores a whole batch of questions with NumPy, because the
library's own batch path either compiles Numba functions for about six seconds in every process
(when Numba is installed) or adds each query's postings with ``np.add.at`` one query at a time
(about 2.6 ms per question on 80,000 passages). ``rag_eval_pipeline_tests/test_guardrails.py``
checks the index and the rankings against bm25s itself.

What is reproduced exactly:

- tokens: ``text.lower()``, then every match of ``(?u)\\b\\w\\w+\\b``, minus bm25s's English stop
  words, each stemmed with PyStemmer (``stemWords``); ASCII texts (and ASCII apart from a few
  symbols such as °, ``text.PLAIN_SYMBOLS``) are tokenized by Polars' regex engine, identical to
  Python's on them, other texts by Python's ``re``;
- weights, in bm25s's float types and operation order: ``idf = log(1 + (N - df + 0.5) /
  (df + 0.5))`` as float32; ``w = float32(idf * tf / (k1 * ((1 - b) + b * dl / avgdl) + tf))``
  with the denominator in float64;
- scores: a float32 sum of ``w`` over the question's tokens in order (a repeated token counts
  again), as bm25s adds them.

Ranking: passages sharing no token with the question (score 0) are not returned; the others are
ordered by score rounded to 6 decimals, descending, then by passage index descending (passage id
descending, trec_eval's tie order), and cut at ``k``. The rounded order is taken among the
``k + 16`` best raw scores and every passage tied with the last of them, which is bm25s's top
``k + 16`` plus its ties (so the result does not depend on how a top-k routine breaks ties).

Memory: the postings of frequent tokens (in at least a quarter of the passages) are kept as
dense float32 rows, which is at most twice their sparse size, and scores are accumulated for a
block of questions at a time (about 8 million floats), so memory is bounded by the corpus and
not by corpus x questions.
"""

import functools
import math
import re
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np
import polars as pl
import Stemmer

from rag_eval_pipeline.lib.text import plain_mask

TOKEN_PATTERN = r"(?u)\b\w\w+\b"
DEPTH_MARGIN = 16
DENSE_SHARE = 0.25
BLOCK_FLOATS = 1 << 23
CHUNK_BYTES = 8 << 20
# What ``BM25Index.save`` writes; a file of another format is not read.
INDEX_FORMAT = 1

_python_tokens = re.compile(TOKEN_PATTERN).findall


@functools.cache
def stop_words() -> frozenset[str]:
    """bm25s's English stop words, read from bm25s when first needed (importing bm25s costs a
    process that never ranks, such as the command that starts a night on workers, a third of a
    second)."""
    from bm25s.tokenization import _infer_stopwords

    return frozenset(_infer_stopwords("en"))


def _stem_map(tokens: Sequence[str], stemmer: Stemmer.Stemmer) -> dict[str, str]:
    unique = list(dict.fromkeys(tokens))
    return dict(zip(unique, stemmer.stemWords(unique), strict=True))


def query_tokens(questions: Sequence[str], stemmer: Stemmer.Stemmer) -> list[list[str]]:
    """Each question's stemmed tokens in order, as ``bm25s.tokenize(..., return_ids=False)``."""
    stop = stop_words()
    split = [
        [token for token in _python_tokens(question.lower()) if token not in stop]
        for question in questions
    ]
    stems = _stem_map([token for tokens in split for token in tokens], stemmer)
    return [[stems[token] for token in tokens] for tokens in split]


def _document_tokens(fields: pl.DataFrame, first: int, engine: str = "streaming") -> pl.DataFrame:
    """``document, token`` (a Categorical, so each distinct token is a small integer) for every
    token of every text column of ``fields``, stop words included; passage numbers start at
    ``first``. A passage's columns joined by newlines give the same tokens as its columns one by
    one (no token crosses a newline), so the joined text is never built."""
    frame = fields.lazy().with_row_index("document", offset=first)
    parts = []
    for column in fields.columns:
        is_ascii = plain_mask(fields[column])
        parts.append(
            frame.filter(is_ascii)
            .select(
                "document",
                pl.col(column).str.to_lowercase().str.extract_all(TOKEN_PATTERN).alias("token"),
            )
            .explode("token")
            .drop_nulls("token")
            .with_columns(pl.col("token").cast(pl.Categorical))
        )
        others = frame.filter(~is_ascii).select("document", column).collect()
        if others.height:
            parts.append(
                pl.LazyFrame(
                    {
                        "document": others["document"],
                        "token": [_python_tokens(text.lower()) for text in others[column]],
                    },
                    schema={"document": pl.UInt32, "token": pl.List(pl.String)},
                )
                .explode("token")
                .drop_nulls("token")
                .with_columns(pl.col("token").cast(pl.Categorical))
            )
    return pl.concat(parts).collect(engine=engine)


class _Vocabulary:
    """Token ids in the order stems are first seen (the order does not change a score), each
    distinct word stemmed once; stop words are -1."""

    def __init__(self, stemmer: Stemmer.Stemmer) -> None:
        self.stemmer = stemmer
        self.stems: dict[str, int] = {}
        self.words: dict[str, int] = {}

    def ids(self, tokens: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        """``(passages, token ids)`` of the tokens that are not stop words.

        Each distinct word of the chunk is looked up once through its Categorical code (codes
        are only compared within this one frame)."""
        codes = tokens["token"].to_physical().to_numpy()
        documents = tokens["document"].to_numpy().astype(np.int64)
        if not codes.size:
            return documents, codes.astype(np.int64)
        distinct = tokens["token"].unique()
        words = distinct.cast(pl.String).to_list()
        new = [word for word in words if word not in self.words]
        stop = stop_words()
        for word, stem in zip(new, self.stemmer.stemWords(new), strict=True):
            self.words[word] = -1 if word in stop else self.stems.setdefault(stem, len(self.stems))
        by_code = np.full(int(codes.max()) + 1, -1, dtype=np.int64)
        by_code[distinct.to_physical().to_numpy()] = [self.words[word] for word in words]
        ids = by_code[codes]
        kept = ids >= 0
        return documents[kept], ids[kept]


def _chunks(texts: pl.DataFrame) -> list[tuple[int, int]]:
    """``(first, stop)`` passage ranges of about ``CHUNK_BYTES`` of text each."""
    sizes = texts.select(pl.sum_horizontal(pl.all().str.len_bytes())).to_series().cum_sum()
    sizes = sizes.to_numpy()
    ranges, first = [], 0
    while first < len(sizes):
        base = sizes[first - 1] if first else 0
        stop = int(np.searchsorted(sizes, base + CHUNK_BYTES, side="right"))
        stop = max(stop, first + 1)
        ranges.append((first, stop))
        first = stop
    return ranges


def _token_chunks(texts: pl.DataFrame, threads: int) -> Iterator[pl.DataFrame]:
    """``_document_tokens`` of each chunk of ``texts`` (``_chunks``), in passage order, tokenized
    on ``threads`` threads (Polars' regex matching runs on one core per call and releases the
    GIL; each thread's query runs on Polars' in-memory engine, as the streaming engine's own
    threads would compete with them). At most ``threads + 1`` chunks' tokens are held at once,
    so memory stays bounded by a few chunks, while the caller numbers the previous chunk's
    tokens."""
    ranges = _chunks(texts)
    if threads <= 1 or len(ranges) <= 1:
        for first, stop in ranges:
            yield _document_tokens(texts.slice(first, stop - first), first)
        return
    with ThreadPoolExecutor(threads) as pool:
        pending: deque = deque()
        for first, stop in ranges:
            chunk = texts.slice(first, stop - first)
            pending.append(pool.submit(_document_tokens, chunk, first, "in-memory"))
            if len(pending) > threads:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def _top(scores: np.ndarray, depth: int) -> list[np.ndarray]:
    """For each row, the indices (ascending) of the positive scores at least as high as its
    ``depth``-th highest score, ties included.

    A strided sample of the row gives a lower bound of that score (the ``depth``-th highest of
    a subset is never higher), so only the scores above the bound are partitioned exactly."""
    count = scores.shape[1]
    stride = max(1, min(64, count // (4 * depth)))
    sample = scores[:, ::stride]
    width = sample.shape[1]
    bounds = np.partition(sample, width - min(depth, width), axis=1)[:, width - min(depth, width)]
    selected = []
    for line, bound in zip(scores, bounds.tolist(), strict=True):
        above = np.flatnonzero(line >= bound) if bound > 0 else np.flatnonzero(line > 0)
        values = line[above]
        if above.size > depth:
            cut = np.partition(values, above.size - depth)[above.size - depth]
            keep = (values >= cut) & (values > 0)
            above = above[keep]
        selected.append(above)
    return selected


@dataclass
class BM25Index:
    """An index over ``count`` passages: the vocabulary, sparse postings (CSC, passage indices
    ascending per token) and dense rows for the frequent tokens."""

    count: int
    vocabulary: dict[str, int]
    indptr: np.ndarray
    indices: np.ndarray
    weights: np.ndarray
    dense_row: np.ndarray
    dense: np.ndarray

    @classmethod
    def build(
        cls,
        texts: pl.DataFrame | pl.Series | Sequence[str],
        *,
        k1: float,
        b: float,
        stemmer: Stemmer.Stemmer,
        threads: int = 1,
    ) -> "BM25Index":
        """Index ``texts`` (passage ``i`` is row ``i``) as bm25s does (module docstring). A frame
        of several text columns is indexed as their values joined by newlines.

        Passages are tokenized in chunks of about ``CHUNK_BYTES`` of text, on ``threads``
        threads, so the long table of tokens never holds the whole corpus; token ids are given
        in passage order whatever the threads, so the index does not depend on them."""
        if not isinstance(texts, pl.DataFrame):
            series = texts if isinstance(texts, pl.Series) else pl.Series("text", list(texts))
            texts = series.to_frame("text")
        texts = texts.select(pl.all().cast(pl.String).fill_null(""))
        count = texts.height
        width = max(count, 1)
        vocabulary = _Vocabulary(stemmer)
        lengths = np.zeros(count, dtype=np.int64)
        chunks: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        for tokens in _token_chunks(texts, threads):
            documents_of, ids = vocabulary.ids(tokens)
            lengths += np.bincount(documents_of, minlength=count)
            # One posting per (token, passage) of the chunk, with its count, by token.
            runs = pl.Series(ids * width + documents_of).sort().rle()
            token_ids, documents = np.divmod(runs.struct.field("value").to_numpy(), width)
            tf = runs.struct.field("len").to_numpy()
            chunks.append((token_ids.astype(np.int32), documents.astype(np.int32), tf))
        vocabulary_size = len(vocabulary.stems)
        df = np.zeros(vocabulary_size, dtype=np.int64)
        for token_ids, _, _ in chunks:
            df += np.bincount(token_ids, minlength=vocabulary_size)
        idf = np.array(
            [math.log(1 + (count - n + 0.5) / (n + 0.5)) for n in df.tolist()], dtype=np.float32
        )
        average = lengths.mean() if count else 0.0
        indptr = np.zeros(vocabulary_size + 1, dtype=np.int64)
        np.cumsum(df, out=indptr[1:])
        # Each chunk's postings go after the earlier chunks' ones of the same token (counting
        # sort), so passages stay ascending within a token.
        documents = np.empty(int(indptr[-1]), dtype=np.int32)
        weights = np.empty(int(indptr[-1]), dtype=np.float32)
        fill = indptr[:-1].copy()
        while chunks:
            token_ids, passages, tf = chunks.pop(0)
            counts = np.bincount(token_ids, minlength=vocabulary_size)
            rank = np.arange(token_ids.size) - (np.cumsum(counts) - counts)[token_ids]
            positions = fill[token_ids] + rank
            tf = tf.astype(np.float32)
            denominator = k1 * ((1 - b) + (b * lengths[passages].astype(np.float64)) / average)
            documents[positions] = passages
            weights[positions] = (idf[token_ids] * (tf / (denominator + tf))).astype(np.float32)
            fill += counts
        return cls._of(count, dict(vocabulary.stems), indptr, documents, weights)

    @classmethod
    def _of(cls, count, vocabulary, indptr, documents, weights) -> "BM25Index":
        """The index of these postings, with dense rows for the tokens in at least
        ``DENSE_SHARE`` of the passages."""
        df = np.diff(indptr)
        hot = np.flatnonzero(df >= max(1, DENSE_SHARE * count))
        dense_row = np.full(df.size, -1, dtype=np.int64)
        dense_row[hot] = np.arange(hot.size)
        dense = np.zeros((hot.size, count), dtype=np.float32)
        for row, token in enumerate(hot.tolist()):
            start, stop = indptr[token], indptr[token + 1]
            dense[row, documents[start:stop]] = weights[start:stop]
        return cls(count, vocabulary, indptr, documents, weights, dense_row, dense)

    def save(self, handle: BinaryIO, key: str = "") -> None:
        """The index as one uncompressed NumPy ``.npz`` (``load`` reads it back): the postings,
        their weights, the stems in id order (UTF-8, one after another, separated by newlines,
        which no token holds) and ``key``, what the index is of; the dense rows are rebuilt from
        the postings when loaded."""
        stems = sorted(self.vocabulary, key=self.vocabulary.__getitem__)
        np.savez(
            handle,
            format=np.array([INDEX_FORMAT]),
            key=np.frombuffer(key.encode(), dtype=np.uint8),
            count=np.array([self.count]),
            indptr=self.indptr,
            indices=self.indices,
            weights=self.weights,
            stems=np.frombuffer("\n".join(stems).encode(), dtype=np.uint8),
        )

    @classmethod
    def load(cls, handle: BinaryIO, key: str = "") -> "BM25Index":
        """An index written by ``save`` with this ``key``; ``ValueError`` when the file is not
        one (another format or key, or arrays that do not fit together)."""
        with np.load(handle, allow_pickle=False) as arrays:
            found = int(arrays["format"][0]) if arrays["format"].size else None
            if found != INDEX_FORMAT:
                raise ValueError(f"BM25 index format {found}, not {INDEX_FORMAT}")
            if arrays["key"].tobytes().decode() != key:
                raise ValueError("BM25 index of other passages or settings")
            count = int(arrays["count"][0])
            indptr, indices, weights = arrays["indptr"], arrays["indices"], arrays["weights"]
            text = arrays["stems"].tobytes().decode()
        stems = text.split("\n") if indptr.size > 1 else []
        if not (
            indptr.size == len(stems) + 1
            and indptr[0] == 0
            and bool((np.diff(indptr) >= 0).all())
            and indptr[-1] == indices.size == weights.size
            and (indices.size == 0 or (indices.min() >= 0 and indices.max() < count))
        ):
            raise ValueError("BM25 index arrays do not fit together")
        vocabulary = {stem: position for position, stem in enumerate(stems)}
        return cls._of(count, vocabulary, indptr, indices, weights)

    def scores(self, token_lists: Sequence[Sequence[int]]) -> np.ndarray:
        """Float32 scores (questions x passages) of a block of questions given as token ids.

        Tokens are added position by position, so every passage's score is the float32 sum of
        its weights in the question's token order, as bm25s adds them."""
        block = np.zeros((len(token_lists), self.count), dtype=np.float32)
        flat = block.reshape(-1)
        longest = max((len(tokens) for tokens in token_lists), default=0)
        for position in range(longest):
            sparse_rows, sparse_tokens = [], []
            for row, tokens in enumerate(token_lists):
                if position >= len(tokens):
                    continue
                token = tokens[position]
                dense = self.dense_row[token]
                if dense >= 0:
                    block[row] += self.dense[dense]
                else:
                    sparse_rows.append(row)
                    sparse_tokens.append(token)
            if not sparse_rows:
                continue
            tokens = np.asarray(sparse_tokens, dtype=np.int64)
            starts, stops = self.indptr[tokens], self.indptr[tokens + 1]
            sizes = stops - starts
            before = np.concatenate(([0], np.cumsum(sizes)[:-1]))
            gather = np.repeat(starts - before, sizes) + np.arange(int(sizes.sum()))
            rows = np.repeat(np.asarray(sparse_rows, dtype=np.int64) * self.count, sizes)
            flat[rows + self.indices[gather]] += self.weights[gather]
        return block

    def search(
        self, token_lists: Sequence[Sequence[str]], k: int, threads: int = 1
    ) -> list[list[tuple[int, float]]]:
        """The top ``k`` ``(passage index, score rounded to 6 decimals)`` of every question
        (module docstring), in blocks of questions, on ``threads`` threads."""
        ids = [
            [self.vocabulary[token] for token in tokens if token in self.vocabulary]
            for tokens in token_lists
        ]
        results: list[list[tuple[int, float]]] = [[] for _ in ids]
        if not self.count or k < 1:
            return results
        depth = min(self.count, k + DEPTH_MARGIN)
        size = max(1, min(256, BLOCK_FLOATS // self.count))
        blocks = [range(start, min(start + size, len(ids))) for start in range(0, len(ids), size)]

        def run(rows: range) -> None:
            scores = self.scores([ids[row] for row in rows])
            for position, candidates in enumerate(_top(scores, depth)):
                if not candidates.size:
                    continue
                line = scores[position]
                rounded = np.round(line[candidates].astype(np.float64), 6)
                order = np.lexsort((-candidates, -rounded))[:k]
                results[rows[position]] = [
                    (int(candidates[i]), round(float(line[candidates[i]]), 6)) for i in order
                ]

        if threads > 1 and len(blocks) > 1:
            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(run, blocks))
        else:
            for rows in blocks:
                run(rows)
        return results
