-- Per-query retrieval measures, long format: one row per (query_id, measure, k).
-- Relations: run(query_id, score, row) (row: its row number; only for top_rows), qrels(query_id,
-- doc_id, grade), and for measures ranked(query_id, doc_id, rank): each query's first max(k)
-- rows in trec_eval's order and, when $need_uncut, its relevant rows ranked below them, each
-- with its rank among all of the query's rows; retrieved(query_id): the queries with a row at
-- rank 1 (only read without $complete; the caller passes none with it).
-- Parameters: $rel_level (grade counted relevant), $ks (cut-offs, at least one), $complete (score
-- queries that have relevant passages but no retrieved row as 0, like trec_eval -c),
-- $need_uncut (compute AP and RR without a cut-off; ranked then holds every relevant row),
-- $depth (max(k) + 1, for top_rows), $measures and $measure_ks (the requested (measure, k)
-- pairs, sorted; k NULL for AP and RR, the output's order within a query).
-- Conventions (trec_eval): rank by score descending, ties by doc id descending; a passage is
-- relevant only when the qrels judge it at or above $rel_level (an unjudged passage never is, even
-- at $rel_level <= 0); P@k divides by k even when fewer were retrieved; R@k and AP divide by every
-- relevant passage in the qrels; RR with no cut-off is trec_eval's recip_rank; nDCG gain is the
-- grade (negative grades count 0), the ideal order ranks every judged passage by grade; nDCG_exp
-- uses the gain 2^grade - 1.
-- Queries with no passage at or above $rel_level are not scored here (the caller counts them).
-- Sums over a query's rows (DCG, AP) are taken in rank order, as trec_eval adds them, and the
-- ideal DCG term by term the same way: the same inputs give the same bits whatever order
-- DuckDB's threads meet the rows in, and a perfect ranking has nDCG exactly 1.
--
-- Speed and memory: the run is never sorted, exploded or held at once, and no string is compared
-- per run row beyond grouping by query. The caller (retrieval.rank_run) finds, per query, the
-- positions (the run's row numbers) of its max(k) + 1 highest scores: with NumPy when the run
-- lists each query's rows together (as a TREC run does), else with top_rows, a numeric top-n
-- aggregate grouped by query id (it costs about what max(score, n) does, where ordering by the
-- (score, doc_id) struct cost four times as much). The caller gathers those rows and settles the
-- order within a score tie by doc id, exactly, on the few queries that have one (the
-- (max(k) + 1)-th row tells whether a tie crosses the boundary; then every row at that score is
-- fetched). AP and RR without a cut-off also need the rank of every relevant retrieved row below
-- max(k): the caller finds those rows and ranks each among its query's rows in NumPy (its
-- query's rows sorted by score; ties by doc id in Polars), so the whole run is never handed to
-- DuckDB for them. The caller registers both as `ranked`; measures then joins `ranked` with the
-- qrels: only judged passages can add gain or relevance, so no other row is needed.
-- Where the time goes (100,000 queries x 100 rows, cut-off 10, both cores): the top-n about
-- 0.1 s with NumPy (top_rows about 0.3 s grouping 10,000,000 rows by query id; a BIGINT `row` is
-- aggregated faster than a UINTEGER one), the gather and tie step about 0.07 s, measures about
-- 0.2 s (the qrels aggregate and the join of 1,000,000 listed rows with the qrels are the
-- largest parts). The kernel's private database runs with the build_side_probe_side optimizer
-- disabled (`settings`): DuckDB sees the frames as Arrow streams without row counts, and every
-- join below is written with its small side on the right (the build side).

-- name: settings
SET disabled_optimizers = 'build_side_probe_side'

-- name: top_rows
SELECT max_by(row, score, $depth) AS rows
FROM run
GROUP BY query_id

-- name: measures
-- Per query: its relevant passages, and its max(k) highest positive grades (the ideal order); a
-- row judged neither relevant nor with a positive grade adds to neither, so it is not read.
WITH judged AS (
    SELECT
        query_id,
        count(*) FILTER (WHERE grade >= $rel_level) AS n_rel,
        max(grade, list_max($ks)) FILTER (WHERE grade > 0) AS ideal_gains
    FROM qrels
    WHERE grade > 0 OR grade >= $rel_level
    GROUP BY query_id
),
-- Every query of the run has a row at rank 1 (retrieved). qn numbers the scored queries in id
-- order.
scored AS (
    SELECT query_id, n_rel, ideal_gains, row_number() OVER (ORDER BY query_id) AS qn
    FROM judged
    WHERE n_rel > 0
      AND ($complete OR query_id IN (SELECT query_id FROM retrieved))
),
-- Only a judged passage can add gain or relevance; one judged below every threshold adds neither.
judged_top AS (
    SELECT t.query_id, t.rank, q.grade
    FROM ranked AS t
    JOIN qrels AS q ON q.query_id = t.query_id AND q.doc_id = t.doc_id
    WHERE q.grade > 0 OR q.grade >= $rel_level
),
judged_rows AS (
    SELECT query_id, rank, greatest(grade, 0) AS gain, grade >= $rel_level AS relevant
    FROM judged_top
),
cutoffs AS (
    SELECT unnest($ks) AS k
),
at_k AS (
    SELECT
        r.query_id,
        c.k,
        count(*) FILTER (WHERE r.relevant) AS rel_ret,
        min(r.rank) FILTER (WHERE r.relevant) AS first_rel,
        -- The query's judged rows in rank order, for DCG summed in rank order below.
        list_sort(list({'rank': r.rank, 'gain': r.gain})) AS by_rank
    FROM judged_rows AS r
    JOIN cutoffs AS c ON r.rank <= c.k
    GROUP BY r.query_id, c.k
),
ideal_at_k AS (
    SELECT
        s.query_id,
        s.qn,
        c.k,
        s.n_rel,
        list_sum(
            list_transform(list_slice(s.ideal_gains, 1, c.k), lambda g, i: g / log2(i + 1))
        ) AS idcg,
        list_sum(
            list_transform(
                list_slice(s.ideal_gains, 1, c.k), lambda g, i: (pow(2, g) - 1) / log2(i + 1)
            )
        ) AS idcg_exp
    FROM scored AS s
    CROSS JOIN cutoffs AS c
),
cut_measures AS (
    SELECT
        i.query_id,
        i.qn,
        i.k,
        (coalesce(a.rel_ret, 0) > 0)::DOUBLE AS "Success",
        coalesce(a.rel_ret, 0) / i.n_rel AS "R",
        coalesce(a.rel_ret, 0) / i.k AS "P",
        coalesce(1.0 / a.first_rel, 0.0) AS "RR",
        CASE
            WHEN i.idcg > 0
            THEN coalesce(
                list_sum(list_transform(a.by_rank, lambda r: r.gain / log2(r.rank + 1))), 0
            ) / i.idcg
            ELSE 0.0
        END AS "nDCG",
        CASE
            WHEN i.idcg_exp > 0
            THEN coalesce(
                list_sum(
                    list_transform(a.by_rank, lambda r: (pow(2, r.gain) - 1) / log2(r.rank + 1))
                ),
                0
            ) / i.idcg_exp
            ELSE 0.0
        END AS "nDCG_exp"
    FROM ideal_at_k AS i
    LEFT JOIN at_k AS a ON a.query_id = i.query_id AND a.k = i.k
),
-- AP's running count of relevant rows is taken over the relevant rows alone.
hits AS (
    SELECT
        query_id,
        rank,
        row_number() OVER (PARTITION BY query_id ORDER BY rank) AS rel_so_far
    FROM judged_rows
    WHERE relevant
),
whole_run AS (
    SELECT
        s.query_id,
        s.qn,
        s.n_rel,
        coalesce(
            list_sum(
                list_transform(
                    list_sort(list({'rank': h.rank, 'rel_so_far': h.rel_so_far})),
                    lambda r: r.rel_so_far / r.rank
                )
            ),
            0
        ) AS ap_sum,
        min(h.rank) AS first_rel
    FROM scored AS s
    LEFT JOIN hits AS h ON h.query_id = s.query_id
    WHERE $need_uncut
    GROUP BY s.query_id, s.qn, s.n_rel
),
-- The requested (measure, k) pairs, in the order of the output within a query.
wanted AS (
    SELECT
        unnest($measures) AS measure,
        unnest($measure_ks)::INTEGER AS k,
        generate_subscripts($measures, 1) AS slot
),
long AS (
    SELECT query_id, qn, measure, k, value
    FROM cut_measures
    UNPIVOT (value FOR measure IN ("Success", "R", "P", "RR", "nDCG", "nDCG_exp"))
    UNION ALL
    SELECT query_id, qn, 'AP' AS measure, NULL AS k, ap_sum / n_rel AS value
    FROM whole_run
    UNION ALL
    SELECT query_id, qn, 'RR' AS measure, NULL AS k, coalesce(1.0 / first_rel, 0.0) AS value
    FROM whole_run
)
SELECT l.query_id, l.measure, l.k::INTEGER AS k, l.value::DOUBLE AS value
FROM long AS l
JOIN wanted AS w ON w.measure = l.measure AND w.k IS NOT DISTINCT FROM l.k
ORDER BY l.qn, w.slot
