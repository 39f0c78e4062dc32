-- The evaluation-run record (eval_run_records) and what a run is measured against
-- (run_baselines). Written only by lib/runs/registry.py.

-- name: complete
UPDATE eval_run_records
SET status = 'complete', status_reason = NULL, completed_at = $completed_at, headline = $headline,
    report_path = $report_path
WHERE eval_run_id = $eval_run_id

-- name: fail
-- A run that did not finish: never shown as finished, never a baseline.
UPDATE eval_run_records
SET status = 'failed', status_reason = $reason, completed_at = NULL
WHERE eval_run_id = $eval_run_id AND status <> 'complete'

-- name: run
SELECT * FROM eval_runs WHERE eval_run_id = $eval_run_id

-- name: latest_complete
-- The completed run of the latest night (of the suite, if given): a backfilled older night that
-- completes later does not take its place; of one night, its own run before a re-baseline run.
-- A run of no night (a warehouse's earliest runs, 'adhoc') comes after every night's.
SELECT eval_run_id FROM eval_runs
WHERE complete AND ($suite IS NULL OR suite = $suite)
ORDER BY regexp_full_match(partition_date, '[0-9]{4}-[0-9]{2}-[0-9]{2}') DESC,
         partition_date DESC, rebaseline_for IS NULL DESC, completed_at DESC
LIMIT 1

-- name: newer_unfinished
-- Runs that did not complete (of the suite, if given), of a later night than a completed run or
-- begun after it, whose night has not completed since (another attempt, other settings), newest
-- first: what a summary of the latest completed run mentions, so a failed night is not read
-- past, nor hidden by a backfilled older night completing after it.
WITH shown AS (SELECT partition_date, started_at FROM eval_runs WHERE eval_run_id = $eval_run_id)
SELECT unfinished.eval_run_id, unfinished.partition_date, unfinished.status,
       unfinished.status_reason, unfinished.started_at > shown.started_at AS begun_after
FROM eval_runs AS unfinished, shown
WHERE NOT unfinished.complete AND ($suite IS NULL OR unfinished.suite = $suite)
  AND ((unfinished.partition_date > shown.partition_date
        AND regexp_full_match(shown.partition_date, '[0-9]{4}-[0-9]{2}-[0-9]{2}'))
       OR unfinished.started_at > shown.started_at)
  AND NOT EXISTS (
      SELECT 1 FROM eval_runs AS since
      WHERE since.complete AND since.suite = unfinished.suite
        AND since.partition_date = unfinished.partition_date
        AND since.started_at > unfinished.started_at)
ORDER BY unfinished.started_at DESC

-- name: latest_complete_of_partition
-- The run a comparison of one night's partition is about (re-baseline runs excluded).
SELECT eval_run_id FROM eval_runs
WHERE partition_date = $night AND suite = $suite AND complete AND rebaseline_for IS NULL
ORDER BY completed_at DESC
LIMIT 1

-- name: set_baseline_for
INSERT OR REPLACE INTO run_baselines
VALUES ($eval_run_id, $baseline_run_id, $comparable, $reason, $decided_at)

-- name: comparison_rows
-- Every column but the candidate's id (regression_alpha only in a warehouse that has it).
SELECT * EXCLUDE (candidate_run_id)
FROM run_comparisons
WHERE candidate_run_id = $run
ORDER BY metric

-- name: record_starts
-- What the warehouse knows of each run's start, to sync records from the run store.
SELECT eval_run_id, started_at, trace_file, status FROM eval_run_records

-- name: rebaseline_offsets
-- What a re-baseline measured: each metric of the old baseline and of the baseline's system on
-- the new snapshot, and the offset (the corpus change alone).
SELECT old_baseline_run_id, metric, old_value, new_value, offset_value, ci_low, ci_high
FROM rebaseline_offsets WHERE rebaseline_run_id = $eval_run_id ORDER BY metric

-- name: drifted_items
-- The golden items of a run whose answering passage is not current on the run's corpus state
-- (superseded, withdrawn or edited since they were labelled), in id order.
SELECT d.item_id FROM golden_drift d JOIN eval_runs r
  ON d.golden_digest = r.golden_digest AND d.corpus_digest = r.corpus_digest
WHERE r.eval_run_id = $eval_run_id AND d.drifted ORDER BY d.item_id

-- name: completed_by_or_since
-- Whether a failed Dagster run ($run, of $suite's night $night, ended at $ended) is settled in
-- the warehouse: it completed its evaluation run itself (then failed a gate), or a run of the
-- same night completed after it ended (rag-eval summary names the failed runs that are not).
SELECT count(*) FROM eval_runs
WHERE complete AND (dagster_run_id = $run
    OR (suite = $suite AND partition_date = $night AND completed_at > $ended))
