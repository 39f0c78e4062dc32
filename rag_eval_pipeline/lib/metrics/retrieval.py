"""Retrieval measures against graded gold passages, named as ir_measures names them.

Each measure has three layers (the ranx shape): a per-query kernel, a batch over queries, and
aggregation as a separate step (``aggregate``), so per-query scores stay available for paired
comparisons. The kernel is one pass for every measure and cut-off: NumPy and Polars rank each
query's rows (below, "Speed"), and the measures themselves are computed in DuckDB SQL from those
ranks and the qrels (``measures`` in ``sql/retrieval_per_query.sql``, their only definition).

Registry (conventions: trec_eval; relevance threshold ``rel_level``, default grade >= 2, so a
superseded version at grade 1 is not a hit; only a judged passage can be relevant, so at
``rel_level <= 0`` a passage missing from the qrels still is not):

- ``Success@k``: 1 if a relevant passage is in the top k (hit rate). Proportion -> Wilson interval.
- ``R@k``: relevant in top k / all relevant in the qrels. Mean -> bootstrap interval.
- ``P@k``: relevant in top k / k (k even when fewer were retrieved). Mean -> bootstrap.
- ``RR@k``: 1 / rank of the first relevant passage if it is within k, else 0; its mean is MRR@k.
  ``RR`` without a cut-off is trec_eval's ``recip_rank``.
- ``AP``: sum over relevant retrieved of precision at its rank, / all relevant (trec_eval ``map``).
- ``nDCG@k``: DCG = sum gain / log2(1 + rank) over the top k, gain = grade (trec_eval, linear),
  divided by the DCG of every judged passage in grade order. ``nDCG_exp@k`` uses the exponential
  gain 2^grade - 1 (Burges; the Stanford IR book), labelled as such.

Order: a scored run (a TREC run file, ``per_query``) is ranked as trec_eval ranks it, by score
descending, then passage id descending, its rank column ignored. A system's retrieved lists
(``retrieval_tables``) are ranked by the ranks the system gave, distinct within an item: its
scores are recorded but do not reorder them (a reranker may return its first stage's scores).
Queries with no relevant passage are excluded from every mean and reported as ``excluded``.

Speed: the run is read once as a whole, to find the row numbers of each query's max(k) + 1
highest scores: by NumPy (``argpartition`` over blocks of queries with the same number of rows)
when the run lists each query's rows together, as a TREC run does, else by ``top_rows`` (a
numeric top-n aggregate in SQL, grouped by query id); a query listed by rank, as a run file
lists it, takes its first rows without a partition. Polars gathers those rows and orders score
ties by doc id exactly (only for the few queries that have one; a tie across the last listed row
fetches every row at that score), and ``measures`` joins that short list with the qrels. For
AP or RR without a cut-off the relevant rows below max(k) are added to the list, each ranked
among its query's rows in NumPy (``_ranked_below``); the run itself is handed to DuckDB only for
``top_rows``. ``bench/bench_retrieval_metrics.py`` measures it against ranx and pytrec_eval on
100,000 queries x 100 results.
"""

import os
import re
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

import duckdb
import polars as pl

from rag_eval_pipeline.lib.store.sql import ArrowStream, load_sql, query_frame, sql_query

PROPORTION = "proportion"
MEAN = "mean"


@dataclass(frozen=True)
class MeasureSpec:
    name: str
    kind: str
    needs_cutoff: bool
    description: str


REGISTRY: dict[str, MeasureSpec] = {
    spec.name: spec
    for spec in (
        MeasureSpec("Success", PROPORTION, True, "a relevant passage in the top k (hit rate)"),
        MeasureSpec("R", MEAN, True, "recall at k"),
        MeasureSpec("P", MEAN, True, "precision at k"),
        MeasureSpec("RR", MEAN, False, "reciprocal rank of the first relevant passage"),
        MeasureSpec("AP", MEAN, False, "average precision over the whole ranking"),
        MeasureSpec("nDCG", MEAN, True, "nDCG, gain = grade (trec_eval)"),
        MeasureSpec("nDCG_exp", MEAN, True, "nDCG, gain = 2^grade - 1 (exponential)"),
    )
}
# Measures computed by the pipeline from version metadata rather than from qrels and a run.
PIPELINE_MEASURES: dict[str, MeasureSpec] = {
    "Stale": MeasureSpec(
        "Stale", PROPORTION, True, "a superseded passage ranked above every current gold passage"
    )
}
MEASURE_NAME = re.compile(r"^(?P<name>[A-Za-z_]+)(?:@(?P<k>[0-9]+))?$")
DEFAULT_MEASURES = ("Success@5", "R@5", "P@5", "RR@5", "nDCG@5", "nDCG@10", "nDCG_exp@5", "AP")

RUN_SCHEMA = {"query_id": pl.String, "doc_id": pl.String, "score": pl.Float64}
QRELS_SCHEMA = {"query_id": pl.String, "doc_id": pl.String, "grade": pl.Int64}
VALUES_SCHEMA = {"query_id": pl.String, "measure": pl.String, "k": pl.Int32, "value": pl.Float64}


def parse_measure(measure: str) -> tuple[str, int | None]:
    """``"nDCG@10"`` -> ``("nDCG", 10)``; raises ``ValueError`` for unknown names."""
    match = MEASURE_NAME.match(measure.strip())
    if not match or match["name"] not in REGISTRY:
        known = ", ".join(f"{n}@k" if s.needs_cutoff else n for n, s in REGISTRY.items())
        raise ValueError(f"unknown measure {measure!r}; known: {known}")
    spec = REGISTRY[match["name"]]
    k = int(match["k"]) if match["k"] else None
    if spec.needs_cutoff and k is None:
        raise ValueError(f"measure {spec.name} needs a cut-off, e.g. {spec.name}@10")
    if k is not None and k < 1:
        raise ValueError(f"cut-off of {measure!r} must be at least 1")
    return spec.name, k


def measure_label(name: str, k: int | None) -> str:
    return name if k is None else f"{name}@{k}"


BLOCK_SCORES = 1 << 16
# Threads for the NumPy top-n: on 100,000 queries x 100 rows, 0.053 s on two against 0.085 s on
# one (both cores of the machine it was measured on).
TOP_N_THREADS = min(4, os.cpu_count() or 1)


def _stretches(query_id: pl.Series) -> pl.Series | None:
    """The length of each stretch of rows of one query, in run order, when every query's rows are
    contiguous (a TREC run is written query by query); ``None`` when some query's rows are
    split (checked exactly: each stretch's query id must be unique)."""
    runs = query_id.rle()
    if runs.struct.field("value").n_unique() != runs.len():
        return None
    return runs.struct.field("len")


def _same_length_blocks(lengths, chosen):
    """The stretches numbered ``chosen`` (NumPy ints) as ``(part, length)`` blocks: the stretch
    numbers of one length, by length, at most ``BLOCK_SCORES`` scores a block (one stretch at
    least)."""
    import numpy as np

    chosen = chosen[np.argsort(lengths[chosen], kind="stable")]
    for bucket in np.split(chosen, np.flatnonzero(np.diff(lengths[chosen])) + 1):
        if not bucket.size:
            continue
        length = int(lengths[bucket[0]])
        block = max(1, BLOCK_SCORES // length)
        for first in range(0, bucket.size, block):
            yield bucket[first : first + block], length


def _block_scores(scores, begin, length: int):
    """The scores of the stretches starting at ``begin`` (all ``length`` long), a row each: a view
    of ``scores`` when the stretches are adjacent, else a copy."""
    import numpy as np

    if begin[-1] - begin[0] == (begin.size - 1) * length:
        return scores[begin[0] : begin[0] + begin.size * length].reshape(begin.size, length)
    return scores[begin[:, None] + np.arange(length)]


def _stretch_starts(lengths):
    import numpy as np

    starts = np.zeros(lengths.size, dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    return starts


def _concatenated_ranges(starts, sizes):
    """``starts[i] .. starts[i] + sizes[i] - 1`` for every ``i``, one after the other (NumPy)."""
    import numpy as np

    before = np.repeat(np.cumsum(sizes) - sizes, sizes)
    return np.repeat(starts, sizes) + np.arange(int(sizes.sum())) - before


def _top_of_rows(values, depth: int):
    """Each row's ``depth`` highest columns, by descending value (ties in any order)."""
    import numpy as np

    length = values.shape[1]
    top = np.argpartition(values, length - depth, axis=1)[:, length - depth :]
    order = np.argsort(-np.take_along_axis(values, top, axis=1), axis=1)
    return np.take_along_axis(top, order, axis=1)


def _listed_in_stretches(scores, lengths, depth: int) -> pl.DataFrame:
    """``group, rows, rank``: for each stretch of ``scores`` (NumPy; ``lengths`` its stretches in
    order; a stretch's number is its group), the row numbers of its ``depth`` highest scores, by
    descending score (ties in any order), or all its rows when it has no more than ``depth``.

    NumPy, one block of same-length stretches at a time (``_same_length_blocks``, a view of the
    run when the stretches are adjacent): a stretch listed by rank (as a run file is) has its
    ``depth`` highest first, which a check of its first ``depth`` scores and the maximum of
    the rest proves; in the others ``argpartition`` finds them, then only those are sorted. The
    order is only a head start: the caller checks it and sorts exactly wherever scores do not
    strictly decrease. On 100,000 queries x 100 rows this takes about a third of the time of
    DuckDB's grouped top-n (``top_rows``), which needs no contiguity and is used otherwise."""
    import numpy as np

    starts = _stretch_starts(lengths)
    groups, rows, ranks = [], [], []
    short = np.flatnonzero(lengths <= depth)
    if short.size:
        sizes = lengths[short]
        short_rows = _concatenated_ranges(starts[short], sizes)
        short_groups = np.repeat(short, sizes)
        order = np.lexsort((-scores[short_rows], short_groups))
        groups.append(short_groups[order])
        rows.append(short_rows[order])
        ranks.append(_concatenated_ranges(np.ones_like(sizes), sizes))

    def block_top(block):
        part, length = block
        begin = starts[part]
        values = _block_scores(scores, begin, length)
        # A run file lists each query's rows by rank: where a stretch's first ``depth`` scores
        # never increase and none after them is higher, they are its highest, in order; only
        # the other stretches are partitioned.
        head = values[:, :depth]
        listed = (head[:, 1:] <= head[:, :-1]).all(axis=1)
        if listed.any():
            maybe = np.flatnonzero(listed)
            listed[maybe] = values[maybe, depth:].max(axis=1) <= head[maybe, -1]
        if not listed.any():
            picked = _top_of_rows(values, depth)
        else:
            picked = np.broadcast_to(np.arange(depth), (part.size, depth)).copy()
            if not listed.all():
                picked[~listed] = _top_of_rows(values[~listed], depth)
        return np.repeat(part, depth), (begin[:, None] + picked).reshape(-1)

    # NumPy's partition and sort release the GIL: the blocks are shared by the cores.
    with ThreadPoolExecutor(TOP_N_THREADS) as pool:
        for block_groups, block_rows in pool.map(
            block_top, _same_length_blocks(lengths, np.flatnonzero(lengths > depth))
        ):
            groups.append(block_groups)
            rows.append(block_rows)
            ranks.append(np.tile(np.arange(1, depth + 1), block_groups.size // depth))
    empty = [np.zeros(0, dtype=np.int64)]
    return pl.DataFrame(
        {
            name: np.concatenate(parts or empty).astype(np.int64, copy=False)
            for name, parts in (("group", groups), ("rows", rows), ("rank", ranks))
        }
    )


def _count_below(ordered, local, target, *, inclusive: bool):
    """For each ``local`` row of ``ordered`` (ascending rows), how many of its values are below
    ``target`` (or at most ``target`` when ``inclusive``): a binary search over all rows at once."""
    import numpy as np

    width = ordered.shape[1]
    low = np.zeros(local.size, dtype=np.int64)
    high = np.full(local.size, width, dtype=np.int64)
    while (low < high).any():
        active = low < high
        middle = (low + high) // 2
        value = ordered[local, np.minimum(middle, width - 1)]
        right = active & ((value <= target) if inclusive else (value < target))
        low = np.where(right, middle + 1, low)
        high = np.where(active & ~right, middle, high)
    return low


def _above_in_stretches(scores, lengths, positions):
    """For the rows at ``positions`` of ``scores`` (NumPy; ``lengths`` its stretches in order):
    ``above``, how many rows of the row's stretch score higher, and the ties the positions are
    in (another row of the stretch has the same score) as ``members`` and ``member_tie``: the
    positions of every row of each such tie, once each, and the tie's number.

    One block of same-length stretches at a time (``_same_length_blocks``, only the stretches
    holding a position): each stretch is sorted (``argsort``), then each position's score is
    found in its sorted stretch by binary search (``_count_below``), so the work is the sort's
    whatever the number of positions. Scores compare as numbers (-0.0 ties with 0.0)."""
    import numpy as np

    starts = _stretch_starts(lengths)
    stretch = np.searchsorted(starts, positions, side="right") - 1
    above = np.zeros(positions.size, dtype=np.int64)
    members, member_tie, ties = [], [], 0
    blocks = list(_same_length_blocks(lengths, np.unique(stretch)))
    block_of = np.zeros(lengths.size, dtype=np.int64)
    local_of = np.zeros(lengths.size, dtype=np.int64)
    for number, (part, _) in enumerate(blocks):
        block_of[part] = number
        local_of[part] = np.arange(part.size)
    by_block = np.argsort(block_of[stretch], kind="stable")
    bounds = np.searchsorted(block_of[stretch][by_block], np.arange(len(blocks) + 1))
    for number, (part, length) in enumerate(blocks):
        mine = by_block[bounds[number] : bounds[number + 1]]
        begin = starts[part]
        values = _block_scores(scores, begin, length)
        order = np.argsort(values, axis=1)
        ordered = np.take_along_axis(values, order, axis=1)
        local, target = local_of[stretch[mine]], scores[positions[mine]]
        below = _count_below(ordered, local, target, inclusive=False)
        upto = _count_below(ordered, local, target, inclusive=True)
        above[mine] = length - upto
        tied = np.flatnonzero(upto - below > 1)
        if not tied.size:
            continue
        keys, first = np.unique(local[tied] * length + below[tied], return_index=True)
        sizes = (upto - below)[tied][first]
        rows = np.repeat(keys // length, sizes)
        members.append(begin[rows] + order[rows, _concatenated_ranges(keys % length, sizes)])
        member_tie.append(ties + np.repeat(np.arange(keys.size), sizes))
        ties += keys.size
    empty = [np.zeros(0, dtype=np.int64)]
    return above, np.concatenate(members or empty), np.concatenate(member_tie or empty)


def _exact_ranks(rows: pl.DataFrame) -> pl.DataFrame:
    """``rows`` (``group, query_id, doc_id, score``) ranked in trec_eval's order within each group:
    score descending, then doc id descending (``score + 0.0`` makes -0.0 tie with 0.0, as the
    comparison of trec_eval does)."""
    return rows.sort(
        [pl.col("group"), pl.col("score") + 0.0, pl.col("doc_id")],
        descending=[False, True, True],
    ).with_columns(rank=pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over("group"))


def _ranked_top(
    connection: duckdb.DuckDBPyConnection | None, run: pl.DataFrame, scores, lengths, cutoff: int
) -> pl.DataFrame:
    """Each query's first ``cutoff`` rows in trec_eval's order: ``query_id, doc_id, rank``.

    ``listed`` holds the row numbers of each query's ``cutoff + 1`` highest scores, in descending
    score order: from NumPy when each query's rows are contiguous (``_listed_in_stretches``), else
    from ``top_rows`` (SQL, grouped by query id). Where a query's listed scores strictly
    decrease, the list order is trec_eval's order. A query with a tie among them has those rows
    sorted by score and doc id; when the tie reaches the last listed row it may hold rows that
    did not fit, so every row of that query at that score is fetched and ranked too."""
    depth = cutoff + 1
    if lengths is not None:
        listed = _listed_in_stretches(scores, lengths, depth)
    else:
        connection.register(
            "run",
            ArrowStream(
                run.select("query_id", "score", row=pl.int_range(pl.len(), dtype=pl.Int64))
            ),
        )
        top = pl.DataFrame(
            connection.sql(sql_query("retrieval_per_query", "top_rows"), params={"depth": depth}),
            schema={"rows": pl.List(pl.Int64)},
        )
        listed = (
            top.with_row_index("group")
            .select(
                pl.col("group").cast(pl.Int64),
                "rows",
                pl.int_ranges(1, pl.col("rows").list.len() + 1, dtype=pl.Int64).alias("rank"),
            )
            .explode("rows", "rank")
            .drop_nulls("rows")
        )
    group, score, rank = pl.col("group"), pl.col("score"), pl.col("rank")
    listed = listed.with_columns(score=run["score"].gather(listed["rows"]))
    unsettled = listed.filter((group == group.shift()) & (score >= score.shift()))["group"]
    settled = listed.filter(rank <= cutoff)
    if unsettled.len():
        unsettled = unsettled.unique().implode()
        settled = settled.filter(~group.is_in(unsettled))
    # Only the rows that are kept have their ids gathered.
    columns = run.select("query_id", "doc_id")
    ranked = pl.concat([columns.gather(settled["rows"]), settled.select("rank")], how="horizontal")
    if not unsettled.len():
        return ranked
    tied = listed.filter(group.is_in(unsettled))
    exact = _exact_ranks(
        pl.concat(
            [tied.select("group"), columns.gather(tied["rows"]), tied.select("score")],
            how="horizontal",
        )
    )
    boundary = exact.filter((rank == depth) & (score == score.shift())).select(
        "group", "query_id", threshold="score"
    )
    if boundary.height:
        at_threshold = (
            _rows_of_queries(run.select("query_id", "doc_id", "score"), boundary, lengths)
            .join(boundary, on="query_id")
            .filter(score == pl.col("threshold"))
        )
        above = exact.join(boundary.select("group", "threshold"), on="group").filter(
            score > pl.col("threshold")
        )
        widened = _exact_ranks(
            pl.concat(
                [
                    frame.select("group", "query_id", "doc_id", "score")
                    for frame in (above, at_threshold)
                ]
            )
        )
        exact = pl.concat(
            [exact.filter(~group.is_in(boundary["group"].implode())), widened], how="diagonal"
        )
    return pl.concat([ranked, exact.filter(rank <= cutoff).select(ranked.columns)])


def _rows_of_queries(columns: pl.DataFrame, queries: pl.DataFrame, lengths) -> pl.DataFrame:
    """The run's rows of ``queries`` (``group, query_id``): gathered from their stretches when
    each query's rows are contiguous (``lengths``; a group is a stretch's number), else found
    by query id."""
    if lengths is None:
        return columns.filter(pl.col("query_id").is_in(queries["query_id"].implode()))
    chosen = queries["group"].to_numpy()
    return columns.gather(_concatenated_ranges(_stretch_starts(lengths)[chosen], lengths[chosen]))


def _ranked_below(
    run: pl.DataFrame, qrels: pl.DataFrame, scores, lengths, rel_level: int, cutoff: int
) -> pl.DataFrame:
    """``query_id, doc_id, rank``: every relevant row of the run (judged at or above
    ``rel_level``) ranked below ``cutoff``, with its rank in trec_eval's order among all of its
    query's rows (1 + the rows with a higher score + the rows with its score and a higher doc id).

    The run's rows whose doc id is relevant to some query are the candidates (one string test a
    row, nothing the size of the run is built), then their (query, doc) pairs are matched
    exactly. Ranks come from ``_above_in_stretches`` over the run's
    ``scores`` (NumPy) in stretches of ``lengths``; when the run does not list its queries
    together (``lengths`` None) it does so over the rows ordered by query id. Within a tie the doc
    ids are ranked in Polars."""
    import numpy as np

    relevant = qrels.filter(pl.col("grade") >= rel_level).select("query_id", "doc_id")
    maybe = run["doc_id"].is_in(relevant["doc_id"].unique().implode()).arg_true().cast(pl.Int64)
    found = (
        run.select("query_id", "doc_id")
        .gather(maybe)
        .with_columns(row=maybe)
        .join(relevant, on=["query_id", "doc_id"], how="semi")
    )
    rows = found["row"].to_numpy()
    order = None
    if lengths is None:
        order = run["query_id"].arg_sort().cast(pl.Int64).to_numpy()
        scores = scores[order]
        lengths = run.group_by("query_id").len().sort("query_id")["len"].cast(pl.Int64).to_numpy()
        position = np.empty_like(order)
        position[order] = np.arange(order.size)
        rows = position[rows]
    above, members, member_tie = _above_in_stretches(scores, lengths, rows)
    if order is not None:
        members = order[members]
    higher = (
        pl.DataFrame({"tie": member_tie, "row": members})
        .with_columns(doc_id=run["doc_id"].gather(members))
        .select(
            "row",
            higher=pl.col("doc_id").rank("ordinal", descending=True).over("tie").cast(pl.Int64) - 1,
        )
    )
    rank = pl.col("above") + pl.col("higher").fill_null(0) + 1
    return (
        found.with_columns(above=above)
        .join(higher, on="row", how="left")
        .select("query_id", "doc_id", rank=rank)
        .filter(pl.col("rank") > cutoff)
    )


def _ranked(
    run: pl.DataFrame, qrels: pl.DataFrame, cutoff: int, rel_level: int | None
) -> pl.DataFrame:
    """``ranked`` for ``measures``: each query's first ``cutoff`` rows (``_ranked_top``) and, when
    ``rel_level`` is given (AP or RR without a cut-off), its relevant rows below them
    (``_ranked_below``). The run's scores as NumPy (a copy when the run has several chunks) live
    only while this runs. A private DuckDB database is opened only for a run whose queries are
    interleaved (``top_rows``)."""
    lengths = _stretches(run["query_id"])
    if lengths is not None:
        lengths = lengths.cast(pl.Int64).to_numpy()
    scores = run["score"].to_numpy() if lengths is not None or rel_level is not None else None
    if lengths is None:
        with _kernel_database() as connection:
            ranked = _ranked_top(connection, run, scores, lengths, cutoff)
    else:
        ranked = _ranked_top(None, run, scores, lengths, cutoff)
    if rel_level is None:
        return ranked
    return pl.concat([ranked, _ranked_below(run, qrels, scores, lengths, rel_level, cutoff)])


@contextmanager
def _kernel_database() -> Iterator[duckdb.DuckDBPyConnection]:
    """The kernel's private in-memory DuckDB database, with the ``settings`` of
    ``sql/retrieval_per_query.sql`` (the build_side_probe_side optimizer off: DuckDB sees the
    frames as Arrow streams without row counts and would build a join's hash table on the whole
    run; every join there has its small side on the right). Those settings are global to a
    database, so no other connection ever sees them."""
    connection = duckdb.connect()
    try:
        connection.execute(sql_query("retrieval_per_query", "settings"))
        yield connection
    finally:
        connection.close()


def _cutoffs(wanted: Iterable[tuple[str, int | None]]) -> list[int]:
    """The cut-offs of the requested ``(measure, k)`` pairs, sorted (1 when none has one)."""
    return sorted({k for _, k in wanted if k is not None}) or [1]


@dataclass(frozen=True)
class RankedRun:
    """A run ranked for the requested measures (``rank_run``): the rows the measures need, in
    trec_eval's order, without the run itself. ``measures`` computes the values."""

    ranked: pl.DataFrame
    qrels: pl.DataFrame
    wanted: tuple[tuple[str, int | None], ...]
    rel_level: int

    def measures(self, *, complete: bool = True) -> pl.DataFrame:
        """Per-query values, ``query_id, measure, k, value``, sorted (``per_query``), against
        the qrels the rows were ranked with."""
        # The queries the run retrieved anything for: only needed without ``complete``.
        retrieved = self.ranked.filter(pl.col("rank") == 1).select("query_id")
        if complete:
            retrieved = retrieved.clear()
        with _kernel_database() as connection:
            connection.register("qrels", ArrowStream(self.qrels))
            connection.register("ranked", ArrowStream(self.ranked))
            connection.register("retrieved", ArrowStream(retrieved))
            return pl.DataFrame(
                connection.sql(
                    sql_query("retrieval_per_query", "measures"),
                    params={
                        "rel_level": self.rel_level,
                        "ks": _cutoffs(self.wanted),
                        "complete": complete,
                        "need_uncut": any(k is None for _, k in self.wanted),
                        "measures": [name for name, _ in self.wanted],
                        "measure_ks": [k for _, k in self.wanted],
                    },
                ),
                schema=VALUES_SCHEMA,
            )


def _qrels_frame(qrels: pl.DataFrame) -> pl.DataFrame:
    return qrels.select(list(QRELS_SCHEMA)).cast(QRELS_SCHEMA)


def rank_run(
    run: pl.DataFrame,
    qrels: pl.DataFrame,
    measures: Iterable[str] = DEFAULT_MEASURES,
    *,
    rel_level: int = 2,
) -> RankedRun:
    """The first half of ``per_query``: the run's rows that ``measures`` need, ranked. A caller
    that holds nothing else of the run frees it before the measures are computed (``rag-eval
    evaluate-run`` does)."""
    wanted = tuple(sorted({parse_measure(m) for m in measures}, key=lambda p: (p[0], p[1] or 0)))
    run = run.select(list(RUN_SCHEMA)).cast(RUN_SCHEMA)
    if run["score"].null_count() or run["score"].is_nan().any():
        raise ValueError("run scores must be numbers: found a null or NaN score")
    need_uncut = any(k is None for _, k in wanted)
    qrels = _qrels_frame(qrels)
    ranked = _ranked(run, qrels, max(_cutoffs(wanted)), rel_level if need_uncut else None)
    return RankedRun(ranked=ranked, qrels=qrels, wanted=wanted, rel_level=rel_level)


def per_query(
    run: pl.DataFrame,
    qrels: pl.DataFrame,
    measures: Iterable[str] = DEFAULT_MEASURES,
    *,
    rel_level: int = 2,
    complete: bool = True,
) -> pl.DataFrame:
    """Per-query values: ``query_id, measure, k, value`` for the requested measures, sorted.

    ``run`` has ``query_id, doc_id, score`` (each pair once, scores not null and not NaN);
    ``qrels`` has ``query_id, doc_id, grade``. ``complete`` scores a query that has a relevant
    passage but retrieved nothing as 0 (trec_eval ``-c``); otherwise it is left out.

    Two halves: ``rank_run`` ranks the rows the measures need (NumPy and Polars), then
    ``RankedRun.measures`` computes them in the kernel's private DuckDB database
    (``_kernel_database``).
    """
    return rank_run(run, qrels, measures, rel_level=rel_level).measures(complete=complete)


def excluded_queries(qrels: pl.DataFrame, *, rel_level: int = 2) -> list[str]:
    """Queries in the qrels with no passage at or above ``rel_level``: excluded from means."""
    return (
        qrels.group_by("query_id")
        .agg((pl.col("grade") >= rel_level).sum().alias("n_rel"))
        .filter(pl.col("n_rel") == 0)
        .sort("query_id")["query_id"]
        .to_list()
    )


def aggregate(
    values: pl.DataFrame,
    *,
    by: Sequence[str] = (),
    seed: int = 20261001,
    resamples: int = 1000,
    intervals: bool = True,
) -> pl.DataFrame:
    """Mean of each measure over queries, with ``ci_low``, ``ci_high`` and ``n``.

    Proportions (Success) get the Wilson 95% interval; means get a seeded percentile bootstrap
    (the resampled items drawn once per group size, ``bootstrap_mean_intervals``), except a mean
    that is a proportion (every query 0 or 1: R@k of queries with one relevant passage each, as
    their Success@k) or whose every query scored the same (1/3 for P@3 of one relevant passage
    found), which gets the Wilson interval of that rate over its n queries
    (``statistics.proportion_successes``); ``interval_method`` says which
    (``wilson95`` or ``bootstrap95``; null without intervals). Every interval contains its
    value (``clamp_interval``), so a perfect or a zero score never has a bound on the wrong side
    of it.
    """
    group_keys = [*by, "measure", "k"]
    summary = (
        values.group_by(group_keys, maintain_order=True)
        .agg(
            pl.col("value").mean().alias("value"),
            pl.len().alias("n"),
            pl.col("value").alias("values"),
        )
        .sort(group_keys, nulls_last=False)
    )
    if not intervals:
        return summary.drop("values").with_columns(
            pl.lit(None, dtype=pl.Float64).alias("ci_low"),
            pl.lit(None, dtype=pl.Float64).alias("ci_high"),
            pl.col("n").cast(pl.Int64),
            pl.lit(None, dtype=pl.String).alias("interval_method"),
        )
    # NumPy (through the intervals) is imported only when intervals are asked for: scoring a run
    # file without them (``rag-eval evaluate-run``) starts faster without it.
    import numpy as np

    from rag_eval_pipeline.lib.metrics.statistics import (
        bootstrap_mean_intervals,
        clamp_interval,
        mean_interval_method,
        wilson_interval,
    )

    rows = summary.select("measure", "value", "n", "values").rows()
    kinds = [(REGISTRY.get(m) or PIPELINE_MEASURES[m]).kind for m, *_ in rows]
    means = iter(
        bootstrap_mean_intervals(
            [
                np.asarray(v, dtype=np.float64)
                for (_, _, _, v), kind in zip(rows, kinds, strict=True)
                if kind == MEAN
            ],
            seed=seed,
            resamples=resamples,
        )
    )
    bounds, methods = [], []
    for (_, value, n, group), kind in zip(rows, kinds, strict=True):
        if kind == PROPORTION:
            low, high = wilson_interval(round(sum(group)), n)
            methods.append("wilson95")
        else:
            low, high = next(means)
            methods.append(mean_interval_method(np.asarray(group, dtype=np.float64)))
        bounds.append(clamp_interval(value, low, high))
    return summary.drop("values").with_columns(
        pl.Series("ci_low", [low for low, _ in bounds], dtype=pl.Float64),
        pl.Series("ci_high", [high for _, high in bounds], dtype=pl.Float64),
        pl.col("n").cast(pl.Int64),
        pl.Series("interval_method", methods, dtype=pl.String),
    )


RUN_MEASURES = ("Success", "R", "P", "RR", "nDCG", "nDCG_exp")
# The measures a run also has without a cut-off (``retrieval_tables``).
UNCUT_RUN_MEASURES = ("AP", "RR")


def is_run_measure(label: str) -> bool:
    """Whether ``label`` is a ``retrieval_metrics`` measure some run can have: a measure of
    ``RUN_MEASURES`` or ``Stale`` at a cut-off of at least 1 (the run's ``cutoffs``), or one of
    ``UNCUT_RUN_MEASURES`` without one."""
    match = MEASURE_NAME.match(label)
    if not match:
        return False
    if match["k"] is None:
        return match["name"] in UNCUT_RUN_MEASURES
    return match["name"] in (*RUN_MEASURES, *PIPELINE_MEASURES) and int(match["k"]) >= 1


def run_measure_names() -> str:
    """The measures of ``is_run_measure``, as an error message lists them."""
    cut = [f"{name}@k" for name in (*RUN_MEASURES, *PIPELINE_MEASURES)]
    return ", ".join([*cut, *UNCUT_RUN_MEASURES])


def scoped_aggregate(
    per_item: pl.DataFrame, items: pl.DataFrame, *, seed: int, resamples: int
) -> pl.DataFrame:
    """Aggregate per-item values overall, per stratum and per language (answerable items)."""
    labelled = per_item.join(
        items.select(pl.col("item_id").alias("query_id"), "stratum", "language"), on="query_id"
    )
    frames = [
        aggregate(labelled, seed=seed, resamples=resamples).with_columns(
            scope=pl.lit("overall"), scope_value=pl.lit("answerable")
        )
    ]
    for column in ("stratum", "language"):
        frames.append(
            aggregate(labelled, by=[column], seed=seed, resamples=resamples)
            .rename({column: "scope_value"})
            .with_columns(scope=pl.lit(column))
        )
    return pl.concat(frames, how="diagonal")


def stale_per_item(
    results: pl.DataFrame, items: pl.DataFrame, gold: pl.DataFrame, *, rel_level: int, ks
) -> pl.DataFrame:
    """``Stale@k`` per answerable item (``sql/retrieval_stale.sql``) over the run's rows."""
    connection = duckdb.connect()
    try:
        connection.register("retrieval_results", results.to_arrow())
        connection.register("golden_items", items.to_arrow())
        connection.register("golden_gold", gold.to_arrow())
        eval_run_id = results["eval_run_id"][0] if results.height else ""
        golden_digest = items["golden_digest"][0] if items.height else ""
        return query_frame(
            connection,
            load_sql("retrieval_stale"),
            {
                "eval_run_id": eval_run_id,
                "golden_digest": golden_digest,
                "rel_level": rel_level,
                "ks": list(ks),
            },
        ).with_columns(pl.col("k").cast(pl.Int32))
    finally:
        connection.close()


def retrieval_tables(
    results: pl.DataFrame,
    items: pl.DataFrame,
    gold: pl.DataFrame,
    *,
    cutoffs,
    rel_level: int,
    seed: int,
    resamples: int,
) -> tuple[pl.DataFrame, pl.DataFrame, list[str]]:
    """A run's ``retrieval_item_metrics`` and ``retrieval_metrics`` rows (without the run id),
    and the answerable items excluded for having no relevant gold passage.

    ``results`` are the run's ``retrieval_results``; ``items`` and ``gold`` the golden set's
    ``golden_items`` and ``golden_gold``. Every measure of ``RUN_MEASURES`` at every cut-off, AP
    and RR without a cut-off, and Stale@k, over answerable items only. Each item's passages are
    ranked by the ``rank`` the system gave them, as Stale@k ranks them, never reordered by
    ``score``.
    """
    ks = sorted(set(cutoffs))
    measures = [f"{m}@{k}" for m in RUN_MEASURES for k in ks] + list(UNCUT_RUN_MEASURES)
    answerable = items.filter(pl.col("answerable"))
    # Ranked by the system's own ranks: the kernel orders by score descending, so it is given
    # minus the rank (ranks are distinct within an item, so nothing ties).
    run = results.select(
        pl.col("item_id").alias("query_id"),
        pl.col("passage_id").alias("doc_id"),
        score=-pl.col("rank").cast(pl.Float64),
    )
    qrels = gold.join(answerable.select("item_id"), on="item_id", how="semi").select(
        pl.col("item_id").alias("query_id"), pl.col("passage_id").alias("doc_id"), "grade"
    )
    per_item = per_query(run, qrels, measures, rel_level=rel_level, complete=True)
    stale = stale_per_item(results, items, gold, rel_level=rel_level, ks=ks)
    per_item = pl.concat([per_item, stale.select(per_item.columns)])
    table = scoped_aggregate(per_item, answerable, seed=seed, resamples=resamples).with_columns(
        metric=pl.col("measure"),
        measure=pl.when(pl.col("k").is_null())
        .then(pl.col("measure"))
        .otherwise(pl.format("{}@{}", "measure", "k")),
    )
    item_metrics = per_item.rename({"query_id": "item_id"})
    return item_metrics, table, excluded_queries(qrels, rel_level=rel_level)
