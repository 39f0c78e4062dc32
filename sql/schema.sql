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
    text VARCHAR NOT NULL,
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
    report_path VARCHAR
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
    reason VARCHAR NOT NULL
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
)
