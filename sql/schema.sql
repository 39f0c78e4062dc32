-- The warehouse contract: stable table names, every row scoped by eval_run_id or a digest.
-- eval_runs is a view (sql/views.sql): the run record (eval_run_records, written by one module,
-- lib/runs/registry.py) with its baseline (run_baselines, baseline_decisions), so a re-run of a
-- run can never clobber the fact that it is a baseline.
CREATE TABLE IF NOT EXISTS corpus_snapshots (
    corpus_digest VARCHAR PRIMARY KEY,
    snapshot_id VARCHAR NOT NULL,
    document_count INTEGER NOT NULL,
    passage_count INTEGER NOT NULL,
    current_passage_count INTEGER NOT NULL,
    frozen_at VARCHAR,
    loaded_at TIMESTAMP NOT NULL
);
CREATE TABLE IF NOT EXISTS corpus_documents (
    corpus_digest VARCHAR NOT NULL,
    doc_version_id VARCHAR NOT NULL,
    doc_id VARCHAR NOT NULL,
    version INTEGER NOT NULL,
    title VARCHAR NOT NULL,
    status VARCHAR NOT NULL,
    superseded_by VARCHAR,
    effective_date DATE NOT NULL,
    language VARCHAR NOT NULL,
    owner VARCHAR,
    document_digest VARCHAR NOT NULL
);
CREATE TABLE IF NOT EXISTS corpus_passages (
    corpus_digest VARCHAR NOT NULL,
    passage_id VARCHAR NOT NULL,
    doc_id VARCHAR NOT NULL,
    version INTEGER NOT NULL,
    section INTEGER NOT NULL,
    title VARCHAR NOT NULL,
    section_title VARCHAR NOT NULL,
    -- Zstandard: on a 96,000-passage library (157 MB of text) the checkpoint that writes it takes
    -- 0.55 s instead of 1.4 s and the file holds 27 MB instead of 82 MB (DuckDB's default picks
    -- FSST); a scan of the column is about 20% slower. Storage only: the column reads the same.
    text VARCHAR USING COMPRESSION zstd NOT NULL,
    status VARCHAR NOT NULL,
    superseded_by VARCHAR,
    effective_date DATE NOT NULL,
    language VARCHAR NOT NULL,
    passage_digest VARCHAR NOT NULL
);
CREATE TABLE IF NOT EXISTS golden_items (
    golden_digest VARCHAR NOT NULL,
    golden_set VARCHAR NOT NULL,
    item_id VARCHAR NOT NULL,
    line INTEGER NOT NULL,
    question VARCHAR NOT NULL,
    language VARCHAR NOT NULL,
    stratum VARCHAR NOT NULL,
    answerable BOOLEAN NOT NULL,
    reference_answers VARCHAR[] NOT NULL,
    must_mention VARCHAR[] NOT NULL,
    labelled_against VARCHAR NOT NULL
);
CREATE TABLE IF NOT EXISTS golden_gold (
    golden_digest VARCHAR NOT NULL,
    item_id VARCHAR NOT NULL,
    passage_id VARCHAR NOT NULL,
    grade INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS golden_drift (
    golden_digest VARCHAR NOT NULL,
    corpus_digest VARCHAR NOT NULL,
    item_id VARCHAR NOT NULL,
    drifted BOOLEAN NOT NULL,
    drift_reason VARCHAR
);
CREATE TABLE IF NOT EXISTS eval_run_records (
    eval_run_id VARCHAR PRIMARY KEY,
    suite VARCHAR NOT NULL,
    partition_date VARCHAR NOT NULL,
    variant VARCHAR NOT NULL,
    dagster_run_id VARCHAR,
    snapshot_id VARCHAR NOT NULL,
    corpus_digest VARCHAR NOT NULL,
    golden_set VARCHAR NOT NULL,
    golden_digest VARCHAR NOT NULL,
    system_id VARCHAR NOT NULL,
    system_config_digest VARCHAR NOT NULL,
    system_config VARCHAR NOT NULL,
    judge_id VARCHAR NOT NULL,
    judge_config_digest VARCHAR NOT NULL,
    judge_config VARCHAR NOT NULL,
    settings_digest VARCHAR NOT NULL,
    settings VARCHAR NOT NULL,
    rebaseline BOOLEAN NOT NULL,
    rebaseline_reason VARCHAR,
    rebaseline_requested_by VARCHAR,
    rebaseline_for VARCHAR,
    status VARCHAR NOT NULL,
    status_reason VARCHAR,
    started_at TIMESTAMP NOT NULL,
    completed_at TIMESTAMP,
    headline VARCHAR,
    report_path VARCHAR,
    trace_file VARCHAR,
    trace_digest VARCHAR,
    measures_version VARCHAR
);
CREATE TABLE IF NOT EXISTS run_baselines (
    eval_run_id VARCHAR PRIMARY KEY,
    baseline_run_id VARCHAR,
    comparable BOOLEAN,
    reason VARCHAR NOT NULL,
    decided_at TIMESTAMP NOT NULL
);
CREATE TABLE IF NOT EXISTS retrieval_results (
    eval_run_id VARCHAR NOT NULL,
    item_id VARCHAR NOT NULL,
    rank INTEGER NOT NULL,
    passage_id VARCHAR NOT NULL,
    score DOUBLE NOT NULL,
    status VARCHAR
);
CREATE TABLE IF NOT EXISTS generation_results (
    eval_run_id VARCHAR NOT NULL,
    item_id VARCHAR NOT NULL,
    refused BOOLEAN NOT NULL,
    refusal_reason VARCHAR,
    answer VARCHAR NOT NULL,
    cited_ids VARCHAR[] NOT NULL,
    context_ids VARCHAR[] NOT NULL,
    citation_valid BOOLEAN,
    best_score DOUBLE
);
-- One row per item: what the call to the system under test came to. outcome 'ok' (a trace was
-- recorded) or 'system_error' (the call failed: cause and error say why; the item is left out of
-- every retrieval and generation rate). attempts, latency_ms, tokens and cost are null where the
-- system does not report them (the in-process systems make no calls).
CREATE TABLE IF NOT EXISTS system_calls (
    eval_run_id VARCHAR NOT NULL,
    item_id VARCHAR NOT NULL,
    outcome VARCHAR NOT NULL,
    cause VARCHAR,
    error VARCHAR,
    attempts INTEGER,
    latency_ms DOUBLE,
    prompt_tokens BIGINT,
    completion_tokens BIGINT,
    cost DOUBLE
);
CREATE TABLE IF NOT EXISTS judge_verdicts (
    eval_run_id VARCHAR NOT NULL,
    item_id VARCHAR NOT NULL,
    source VARCHAR NOT NULL,
    claim_index INTEGER NOT NULL,
    claim VARCHAR NOT NULL,
    cited_ids VARCHAR[] NOT NULL,
    verdict VARCHAR NOT NULL,
    passage_id VARCHAR,
    citation_supported BOOLEAN,
    judge_id VARCHAR NOT NULL,
    replayed BOOLEAN NOT NULL
);
CREATE TABLE IF NOT EXISTS retrieval_item_metrics (
    eval_run_id VARCHAR NOT NULL,
    item_id VARCHAR NOT NULL,
    measure VARCHAR NOT NULL,
    k INTEGER,
    value DOUBLE NOT NULL
);
CREATE TABLE IF NOT EXISTS retrieval_metrics (
    eval_run_id VARCHAR NOT NULL,
    scope VARCHAR NOT NULL,
    scope_value VARCHAR NOT NULL,
    metric VARCHAR NOT NULL,
    measure VARCHAR NOT NULL,
    k INTEGER,
    value DOUBLE,
    ci_low DOUBLE,
    ci_high DOUBLE,
    n INTEGER NOT NULL,
    interval_method VARCHAR NOT NULL
);
CREATE TABLE IF NOT EXISTS generation_item_metrics (
    eval_run_id VARCHAR NOT NULL,
    item_id VARCHAR NOT NULL,
    stratum VARCHAR NOT NULL,
    language VARCHAR NOT NULL,
    answerable BOOLEAN NOT NULL,
    refused BOOLEAN NOT NULL,
    correct BOOLEAN,
    exact_match DOUBLE,
    token_f1 DOUBLE,
    context_sufficient BOOLEAN NOT NULL,
    confident_wrong BOOLEAN NOT NULL,
    citation_valid BOOLEAN,
    best_score DOUBLE
);
CREATE TABLE IF NOT EXISTS generation_metrics (
    eval_run_id VARCHAR NOT NULL,
    scope VARCHAR NOT NULL,
    scope_value VARCHAR NOT NULL,
    metric VARCHAR NOT NULL,
    value DOUBLE,
    ci_low DOUBLE,
    ci_high DOUBLE,
    n INTEGER NOT NULL,
    interval_method VARCHAR NOT NULL
);
CREATE TABLE IF NOT EXISTS sufficiency_correctness (
    eval_run_id VARCHAR NOT NULL,
    context_sufficient BOOLEAN NOT NULL,
    answer_correct BOOLEAN NOT NULL,
    count INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS abstention_sweep (
    eval_run_id VARCHAR NOT NULL,
    threshold DOUBLE NOT NULL,
    unanswerable_answered INTEGER NOT NULL,
    answerable_refused INTEGER NOT NULL,
    recommended BOOLEAN NOT NULL
);
CREATE TABLE IF NOT EXISTS judge_calibration (
    eval_run_id VARCHAR NOT NULL,
    judge_id VARCHAR NOT NULL,
    n INTEGER NOT NULL,
    agreement DOUBLE,
    ci_low DOUBLE,
    ci_high DOUBLE,
    kappa DOUBLE,
    calibrated BOOLEAN NOT NULL,
    reason VARCHAR NOT NULL
);
-- Every repeat's verdict (1 to judge_repeats) of every sampled claim against its context
-- (lib/judges/stability.py); repeat 1 is the verdict of judge_verdicts.
CREATE TABLE IF NOT EXISTS judge_repeat_verdicts (
    eval_run_id VARCHAR NOT NULL,
    item_id VARCHAR NOT NULL,
    source VARCHAR NOT NULL,
    claim_index INTEGER NOT NULL,
    claim VARCHAR NOT NULL,
    "repeat" INTEGER NOT NULL,
    verdict VARCHAR NOT NULL,
    passage_id VARCHAR,
    replayed BOOLEAN NOT NULL
);
-- Judge-based rates two ways (lib/judges/estimates.py): method judge_only_* (the judge alone) and
-- ppi++95 (prediction-powered: the judge on n_judged units, human labels on n_labelled of them);
-- unit 'item' (faithfulness, a mean over items) or 'claim'; ppi_lambda the weight PPI++ gave the
-- judge. judge_unstable_claim_rate (method wilson95) is the judge's stability over repeats.
CREATE TABLE IF NOT EXISTS judge_rate_estimates (
    eval_run_id VARCHAR NOT NULL,
    scope VARCHAR NOT NULL,
    scope_value VARCHAR NOT NULL,
    metric VARCHAR NOT NULL,
    method VARCHAR NOT NULL,
    unit VARCHAR NOT NULL,
    value DOUBLE,
    ci_low DOUBLE,
    ci_high DOUBLE,
    n_judged INTEGER NOT NULL,
    n_labelled INTEGER NOT NULL,
    ppi_lambda DOUBLE,
    reason VARCHAR
);
-- What each judging step spent (lib/judges/budget.py): requests sent, answers replayed from the
-- cache, tokens (reported by the endpoint, else estimated), cost at the configured price, and
-- whether the budget stopped it (not_sent: requests refused, recorded as JUDGE_ERROR).
CREATE TABLE IF NOT EXISTS judge_usage (
    eval_run_id VARCHAR NOT NULL,
    step VARCHAR NOT NULL,
    judge_id VARCHAR NOT NULL,
    requests INTEGER NOT NULL,
    replayed INTEGER NOT NULL,
    estimated_tokens BIGINT NOT NULL,
    reported_tokens BIGINT NOT NULL,
    tokens BIGINT NOT NULL,
    cost DOUBLE,
    budget_tokens BIGINT,
    budget_cost DOUBLE,
    budget_exhausted BOOLEAN NOT NULL,
    not_sent INTEGER NOT NULL,
    reason VARCHAR
);
-- Claim-level diagnostics against reference answers (lib/judges/diagnostics.py): every question
-- put to the judge (subject answer_claim or reference_claim, against reference, answer or one
-- passage), the per-item metrics (lib/metrics/claim_diagnostics.py) and their means per source.
CREATE TABLE IF NOT EXISTS diagnostic_verdicts (
    eval_run_id VARCHAR NOT NULL,
    source VARCHAR NOT NULL,
    item_id VARCHAR NOT NULL,
    subject VARCHAR NOT NULL,
    claim_index INTEGER NOT NULL,
    claim VARCHAR NOT NULL,
    against VARCHAR NOT NULL,
    passage_id VARCHAR,
    verdict VARCHAR NOT NULL,
    replayed BOOLEAN NOT NULL
);
CREATE TABLE IF NOT EXISTS diagnostic_item_metrics (
    eval_run_id VARCHAR NOT NULL,
    source VARCHAR NOT NULL,
    item_id VARCHAR NOT NULL,
    golden_item_id VARCHAR NOT NULL,
    metric VARCHAR NOT NULL,
    value DOUBLE
);
CREATE TABLE IF NOT EXISTS diagnostic_metrics (
    eval_run_id VARCHAR NOT NULL,
    scope VARCHAR NOT NULL,
    scope_value VARCHAR NOT NULL,
    metric VARCHAR NOT NULL,
    value DOUBLE,
    ci_low DOUBLE,
    ci_high DOUBLE,
    n_items INTEGER NOT NULL,
    n_items_left_out INTEGER NOT NULL,
    interval_method VARCHAR NOT NULL
);
CREATE TABLE IF NOT EXISTS run_comparisons (
    candidate_run_id VARCHAR NOT NULL,
    baseline_run_id VARCHAR NOT NULL,
    metric VARCHAR NOT NULL,
    candidate_value DOUBLE,
    baseline_value DOUBLE,
    delta DOUBLE,
    ci_low DOUBLE,
    ci_high DOUBLE,
    p_value DOUBLE,
    test VARCHAR,
    n INTEGER,
    comparable BOOLEAN NOT NULL,
    reason VARCHAR NOT NULL,
    -- The level the regression gate was checked at (a metric with p below it, in its worse
    -- direction, fails it); NULL for comparisons recorded before it was kept.
    regression_alpha DOUBLE
);
CREATE TABLE IF NOT EXISTS rebaseline_offsets (
    rebaseline_run_id VARCHAR NOT NULL,
    old_baseline_run_id VARCHAR NOT NULL,
    metric VARCHAR NOT NULL,
    old_value DOUBLE,
    new_value DOUBLE,
    offset_value DOUBLE,
    ci_low DOUBLE,
    ci_high DOUBLE,
    requested_by VARCHAR,
    reason VARCHAR NOT NULL
);
CREATE TABLE IF NOT EXISTS baseline_decisions (
    suite VARCHAR NOT NULL,
    golden_set VARCHAR NOT NULL,
    eval_run_id VARCHAR NOT NULL,
    decided_at TIMESTAMP NOT NULL,
    kind VARCHAR NOT NULL,
    previous_baseline_run_id VARCHAR,
    requested_by VARCHAR,
    reason VARCHAR NOT NULL
);
-- The release gates checked on a run (eval_summary), one row per gate of the gates file, kept
-- with the run so its record says which passed: status passed, failed, "judge not calibrated"
-- or "metric missing" (the last two: not assessed).
CREATE TABLE IF NOT EXISTS gate_results (
    eval_run_id VARCHAR NOT NULL,
    gate VARCHAR NOT NULL,
    gates_file VARCHAR NOT NULL,
    gates_version INTEGER,
    status VARCHAR NOT NULL,
    passed BOOLEAN NOT NULL,
    observed DOUBLE,
    op VARCHAR NOT NULL,
    threshold DOUBLE NOT NULL,
    margin DOUBLE,
    message VARCHAR NOT NULL
);
