"""Judging a sample of answered traces: one verdict row per claim.

Each answer is split into claims (qualifiers kept) and each claim is judged against the exact
context sent; a claim that carries citations is also judged against its cited passages alone,
which gives citation support. Everything goes to the judge in batches (all claim splits, then
all verdicts), so an LLM judge keeps its bounded concurrency busy.

With ``repeats`` R > 1 every claim is judged against its context R times (``judges.stability``):
repeat 1 is the verdict of ``judge_verdicts``; the verdicts of all R repeats (repeat 1 too, so
the table is complete whatever R is) go to ``judge_repeat_verdicts``. Citation support is judged
once.

An answer whose claim split failed gives one ``JUDGE_ERROR`` row (claim index 0, empty claim) for
its item and nothing else fails; a verdict that failed is ``JUDGE_ERROR`` too (never supported).
"""

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import NamedTuple

import polars as pl

from rag_eval_pipeline.lib.inputs.suites import Suite, check_suite_files
from rag_eval_pipeline.lib.inputs.traces import load_traces, refuse_other_corpus_states
from rag_eval_pipeline.lib.judges.calibration import load_human_labels
from rag_eval_pipeline.lib.judges.protocol import ENTAILED, JUDGE_ERROR, Claim, Context, Judge
from rag_eval_pipeline.lib.judges.sampling import stratified_sample
from rag_eval_pipeline.lib.judges.stability import verdicts_of_repeat
from rag_eval_pipeline.lib.store.tables import row_schema

GOLDEN = "golden"
PRODUCTION = "production"


def answered_golden(
    generation: pl.DataFrame, items: pl.DataFrame, corpus_digest: str
) -> pl.DataFrame:
    """Tonight's answered golden items (``generation_results`` not refused) as judge candidates:
    ``item_id, answer, context_ids, stratum, corpus_digest, source``."""
    return (
        generation.filter(~pl.col("refused"))
        .join(items.select("item_id", "stratum"), on="item_id")
        .select(
            "item_id",
            "answer",
            "context_ids",
            "stratum",
            corpus_digest=pl.lit(corpus_digest),
            source=pl.lit(GOLDEN),
        )
    )


def check_trace_store(production: pl.DataFrame, path: Path, known_digests: set[str]) -> None:
    """Every production trace was recorded on a corpus state the night can read
    (``known_digests``: the suite's frozen snapshots and the states already staged), as each is
    judged against its own context's passages: else a ``TraceError`` naming the first other
    trace's line, its digest and how many there are."""
    refuse_other_corpus_states(
        production,
        path,
        ~pl.col("corpus_digest").is_in(sorted(known_digests)),
        "which is no snapshot of the suite's corpus root: its context cannot be judged",
        "freeze that state under the corpus root, or leave the trace out of the trace store; "
        "{count} such trace(s) in all",
    )


def check_judge_inputs(suite: Suite, is_known: Callable[[str], bool]) -> None:
    """Read and check, whole, the files a suite's judging reads (``check_suite_files``, the
    human labels, the trace store and its corpus states, ``is_known`` telling whether a
    corpus digest can be read), so a night refuses them before its system is asked anything."""
    check_suite_files(suite)
    if suite.human_labels is not None:
        load_human_labels(suite.human_labels)
    if suite.trace_store is not None:
        production = load_traces(suite.trace_store)
        digests = set(production["corpus_digest"].unique().to_list())
        check_trace_store(production, suite.trace_store, {d for d in digests if is_known(d)})


def judge_candidates(
    answered: pl.DataFrame, production: pl.DataFrame | None, known_digests: set[str]
) -> tuple[pl.DataFrame, int]:
    """Tonight's answered golden items and the answered production traces whose corpus state is
    known, as one frame ``item_id, answer, context_ids, stratum, corpus_digest, source``; with the
    number of production traces left out because their corpus state is not available."""
    if production is None or not production.height:
        return answered, 0
    traces = production.filter(~pl.col("refused")).select(
        pl.col("trace_id").alias("item_id"),
        "answer",
        "context_ids",
        pl.lit(PRODUCTION).alias("stratum"),
        "corpus_digest",
        pl.lit(PRODUCTION).alias("source"),
    )
    known = traces.filter(pl.col("corpus_digest").is_in(sorted(known_digests)))
    return pl.concat([answered, known], how="vertical_relaxed"), traces.height - known.height


def sample_for_judging(candidates: pl.DataFrame, size: int, seed: int) -> pl.DataFrame:
    """A seeded sample stratified by stratum (production traces are one stratum)."""
    return stratified_sample(candidates, size, by="stratum", seed=seed)


class PassageTexts(Mapping[tuple[str, str], str]):
    """Passage texts keyed by ``(corpus_digest, passage_id)``: a document edited in place keeps
    its passage ids, so the text of an id depends on the corpus state. A key given twice keeps
    its last row's text.

    Only the keys become Python objects when it is built; a text is taken from the frame when
    it is first looked up: the judge and the diagnostics look up only the sampled traces'
    passages. At 20,000 documents (80,000 passages) it is built in 0.05-0.09 s, against
    0.24-0.33 s for a dict of every text."""

    def __init__(self, passages: pl.DataFrame) -> None:
        frame = passages.select("corpus_digest", "passage_id", "text")
        keys = zip(frame["corpus_digest"].to_list(), frame["passage_id"].to_list(), strict=True)
        self._row = {key: row for row, key in enumerate(keys)}
        self._texts = frame["text"]
        self._taken: dict[tuple[str, str], str] = {}

    def __getitem__(self, key: tuple[str, str]) -> str:
        if key not in self._taken:
            self._taken[key] = self._texts[self._row[key]]
        return self._taken[key]

    def __contains__(self, key: object) -> bool:
        return key in self._row

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self._row)

    def __len__(self) -> int:
        return len(self._row)


def passage_texts(passages: pl.DataFrame) -> PassageTexts:
    """The texts of ``passages`` (``corpus_digest, passage_id, text``) by ``(corpus_digest,
    passage_id)`` (``PassageTexts``)."""
    return PassageTexts(passages)


class ClaimToJudge(NamedTuple):
    """One claim of a sampled trace with what it is judged against."""

    item_id: str
    source: str
    index: int
    claim: Claim
    context: list[tuple[str, str]]
    cited: list[tuple[str, str]]


class JudgedSample(NamedTuple):
    """``judge_verdicts`` rows and ``judge_repeat_verdicts`` rows (repeats 1 to R)."""

    verdicts: pl.DataFrame
    repeats: pl.DataFrame


def claims_to_judge(
    sample: pl.DataFrame,
    splits: list[list[Claim] | None],
    texts: Mapping[tuple[str, str], str],
) -> tuple[list[ClaimToJudge], list[tuple[str, str]]]:
    """The claims of every sampled trace whose split succeeded, each with its context and its
    cited passages (texts of the trace's own corpus state, ids the state lacks left out); and the
    ``(item_id, source)`` of the traces whose split failed."""
    traces = sample.select("item_id", "context_ids", "corpus_digest", "source").rows()
    claimed: list[ClaimToJudge] = []
    failed: list[tuple[str, str]] = []
    for (item_id, context_ids, digest, source), claims in zip(traces, splits, strict=True):
        if claims is None:
            failed.append((item_id, source))
            continue

        def passages_of(ids, digest=digest) -> list[tuple[str, str]]:
            return [(pid, texts[(digest, pid)]) for pid in ids if (digest, pid) in texts]

        context = passages_of(context_ids)
        for index, claim in enumerate(claims, start=1):
            claimed.append(
                ClaimToJudge(item_id, source, index, claim, context, passages_of(claim.cited_ids))
            )
    return claimed, failed


def verdict_pairs(
    claimed: list[ClaimToJudge],
) -> tuple[list[tuple[str, Context]], list[tuple[str, Context]]]:
    """The ``(claim, context)`` pairs asked: every claim against its context, and every claim
    that cites a passage of the corpus state against its cited passages alone."""
    context_pairs = [(c.claim.text, c.context) for c in claimed]
    citation_pairs = [(c.claim.text, c.cited) for c in claimed if c.cited]
    return context_pairs, citation_pairs


def judge_traces(
    judge: Judge, sample: pl.DataFrame, texts: Mapping[tuple[str, str], str], *, repeats: int = 1
) -> JudgedSample:
    """Verdict rows (``judge_verdicts`` without ``eval_run_id``) for every claim of every sampled
    trace (``item_id, answer, context_ids, corpus_digest, source``), each judged against the
    passage texts of the trace's own corpus state; and the rows of every repeat, 1 to
    ``repeats`` (``judge_repeat_verdicts`` without ``eval_run_id``)."""
    splits = judge.claims_batch(sample["answer"].to_list())
    claimed, failed = claims_to_judge(sample, splits, texts)
    context_pairs, citation_pairs = verdict_pairs(claimed)
    pairs = context_pairs + citation_pairs
    verdicts = judge.verdicts(pairs) if pairs else []
    against_context = verdicts[: len(claimed)]
    against_citations = iter(verdicts[len(claimed) :])
    repeated = [against_context] + [
        verdicts_of_repeat(judge, context_pairs, repeat) if context_pairs else []
        for repeat in range(2, repeats + 1)
    ]
    rows = []
    for (item_id, source, index, claim, _, cited), verdict in zip(
        claimed, against_context, strict=True
    ):
        supported = None
        if claim.cited_ids:
            if cited:
                cited_verdict = next(against_citations).verdict
                supported = None if cited_verdict == JUDGE_ERROR else cited_verdict == ENTAILED
            else:
                supported = False
        rows.append(
            {
                "item_id": item_id,
                "source": source,
                "claim_index": index,
                "claim": claim.text,
                "cited_ids": list(claim.cited_ids),
                "verdict": verdict.verdict,
                "passage_id": verdict.passage_id,
                "citation_supported": supported,
                "judge_id": judge.judge_id,
                "replayed": verdict.replayed,
            }
        )
    for item_id, source in failed:
        rows.append(
            {
                "item_id": item_id,
                "source": source,
                "claim_index": 0,
                "claim": "",
                "cited_ids": [],
                "verdict": JUDGE_ERROR,
                "passage_id": None,
                "citation_supported": None,
                "judge_id": judge.judge_id,
                "replayed": False,
            }
        )
    repeat_rows = [
        {
            "item_id": c.item_id,
            "source": c.source,
            "claim_index": c.index,
            "claim": c.claim.text,
            "repeat": repeat,
            "verdict": verdict.verdict,
            "passage_id": verdict.passage_id,
            "replayed": verdict.replayed,
        }
        for repeat, verdicts_of in enumerate(repeated, start=1)
        for c, verdict in zip(claimed, verdicts_of, strict=True)
    ]
    return JudgedSample(
        pl.DataFrame(rows, schema=row_schema("judge_verdicts")),
        pl.DataFrame(repeat_rows, schema=row_schema("judge_repeat_verdicts")),
    )
