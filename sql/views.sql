-- Views of the warehouse contract, created after the tables (sql/schema.sql).
-- eval_runs: one row per evaluation run, its record joined with what was decided about its baseline.
--   is_baseline: the run was accepted as its suite's baseline at some point (baseline_decisions);
--   is_current_baseline: it is the suite's latest accepted baseline;
--   complete: the run finished (status 'complete'); 'started' or 'failed' runs are incomplete and
--   their figures, where any were loaded, are not to be read as a finished night.
CREATE OR REPLACE VIEW eval_runs AS
SELECT
    r.*,
    b.baseline_run_id,
    b.comparable AS comparable_with_baseline,
    r.eval_run_id IN (SELECT d.eval_run_id FROM baseline_decisions AS d) AS is_baseline,
    r.eval_run_id IN (
        SELECT eval_run_id FROM baseline_decisions
        QUALIFY row_number() OVER (PARTITION BY suite ORDER BY decided_at DESC) = 1
    ) AS is_current_baseline,
    r.status = 'complete' AS complete
FROM eval_run_records AS r
LEFT JOIN run_baselines AS b USING (eval_run_id)
