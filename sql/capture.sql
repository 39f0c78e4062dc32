-- The capture of a live run (lib/systems/capture.py) on its record. Written only by
-- lib/runs/registry.py.

-- name: record_capture
UPDATE eval_run_records SET trace_file = $trace_file, trace_digest = $trace_digest
WHERE eval_run_id = $eval_run_id
