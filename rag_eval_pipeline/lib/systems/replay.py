"""Replay of recorded traces as the system under test (format in ``inputs.traces``,
``docs/TRACES.md``): what the recorded assistant did, measured by the same graph and tables.

Its configuration is the trace file's name and SHA-256 digest, so replaying two different trace
files gives two different evaluation runs, and replaying the same file twice gives the same run.
"""

from collections.abc import Sequence
from pathlib import Path

import polars as pl

from rag_eval_pipeline.lib.inputs.traces import (
    TraceError,
    check_scored_trace,
    load_traces,
    refuse_other_corpus_states,
    trace_file_digest,
    trace_location,
)
from rag_eval_pipeline.lib.systems.protocol import Hit, Query, Response


class ReplaySystem:
    """Replay of recorded traces (format in ``inputs.traces`` and ``docs/TRACES.md``).

    ``retrieve_batch`` returns each trace's retrieved passages (rank order, first ``k``);
    ``respond_batch`` returns the trace's answer, citations, refusal and the context *as sent*, whatever hits and
    ``context_k`` it is given, so a replay measures what the recorded system did. The best score
    is the highest retrieved score of the trace.

    A question is found by ``item_id`` when the caller passes one and the trace file has it,
    otherwise by its exact text. The pipeline asks in golden-set line order, so when several
    traces share a question text they are served in file order, one per request, separately
    for retrieval and for answers (and round again on a second pass). A question without a
    trace is an error naming the trace file. With ``passages`` given, every passage id a trace
    mentions must be in them, and every trace's ``corpus_digest`` must be theirs (a trace
    recorded on another corpus state fails naming its line) unless ``allow_corpus_mismatch``
    (a capture of a live run that was allowed to serve another corpus state).
    ``check_golden`` holds the file against the golden set being evaluated.
    """

    system_id = "replay"

    def __init__(
        self,
        path: Path | str,
        passages: pl.DataFrame | None = None,
        *,
        allow_corpus_mismatch: bool = False,
    ):
        self.path = Path(path)
        self.traces = load_traces(self.path)
        self._rows = self.traces.to_dicts()
        for row in self._rows:
            check_scored_trace(row, trace_location(self.path, row["line"]))
        self.trace_digest = trace_file_digest(self.path)
        if passages is not None:
            self._check_passages(set(passages["passage_id"].to_list()))
            if "corpus_digest" in passages.columns and not allow_corpus_mismatch:
                for corpus_digest in passages["corpus_digest"].unique().to_list():
                    self.check_corpus(corpus_digest)
        self._by_item = {row["item_id"]: row for row in self._rows if row["item_id"]}
        self._by_question: dict[str, list[dict]] = {}
        for row in self._rows:
            self._by_question.setdefault(row["question"], []).append(row)
        self._served: dict[tuple[str, str], int] = {}

    @staticmethod
    def config_of(path: Path | str) -> dict:
        """The configuration that identifies a replay: the trace file's name and digest (a file
        that is not there is a ``TraceError``)."""
        if not Path(path).is_file():
            raise TraceError(f"{path}: trace file does not exist (the replayed trace file)")
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

    def check_corpus(self, corpus_digest: str) -> None:
        """Every trace was recorded on the corpus state ``corpus_digest`` (else a ``TraceError``
        naming the first other trace's line, its digest and how many there are)."""
        refuse_other_corpus_states(
            self.traces,
            self.path,
            pl.col("corpus_digest") != corpus_digest,
            "not on the snapshot being evaluated",
            corpus_digest + "; {count} trace(s) from another corpus state in all",
        )

    def check_golden(self, golden_items: pl.DataFrame, source: str) -> None:
        """Every trace naming an ``item_id`` answers an item of the golden set (``golden_items``:
        ``item_id``, ``question``, ``line``; ``source`` names its file) and asks that item's
        question (spacing aside); else a ``TraceError`` naming the trace's line."""
        golden = {
            row["item_id"]: row
            for row in golden_items.select("item_id", "question", "line").iter_rows(named=True)
        }
        for row in self._rows:  # in file order
            if row["item_id"] is None:
                continue
            where = trace_location(self.path, row["line"])
            item = golden.get(row["item_id"])
            if item is None:
                raise TraceError(
                    f"{where}: item_id {row['item_id']!r} is not an item of the golden set "
                    f"{source} (a trace file recorded on another golden set?)"
                )
            if " ".join(row["question"].split()) != " ".join(item["question"].split()):
                raise TraceError(
                    f"{where}: item {row['item_id']!r} asks {row['question']!r}, but the golden "
                    f"item asks {item['question']!r} ({source}:{item['line']})"
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

    def retrieve_batch(self, queries: Sequence[Query], k: int) -> list[list[Hit]]:
        """The first ``k`` recorded hits of each query's trace, in rank order."""
        hits = []
        for query in queries:
            trace = self._trace(query.question, query.item_id, "retrieve")
            hits.append(
                [Hit(h["passage_id"], h["score"], h["rank"]) for h in trace["retrieved"][:k]]
            )
        return hits

    def respond_batch(
        self, queries: Sequence[Query], hits: Sequence[Sequence[Hit]], context_k: int
    ) -> list[Response]:
        """The recorded answer or refusal of each query, with the context ids as sent (the hits
        and ``context_k`` the pipeline passes are not used: a replay measures what was done)."""
        responses = []
        for query in queries:
            trace = self._trace(query.question, query.item_id, "respond")
            responses.append(
                Response(
                    refused=trace["refused"],
                    refusal_reason=trace["refusal_reason"],
                    answer=trace["answer"],
                    cited_ids=tuple(trace["cited_ids"]),
                    context_ids=tuple(trace["context_ids"]),
                    best_score=max((h["score"] for h in trace["retrieved"]), default=None),
                )
            )
        return responses
