"""The evaluation run summary: headline figures read back from the warehouse, and their text."""

import duckdb

HEADLINE_RETRIEVAL = ("Success@5", "R@5", "RR@5", "nDCG@10", "Stale@5")
HEADLINE_GENERATION = (
    "faithfulness",
    "contradicted_claim_rate",
    "unsupported_claim_rate",
    "citation_validity",
    "citation_support",
    "answer_correct_rate",
    "token_f1",
    "confident_wrong_rate",
    "false_refusal_rate",
)
NO_ANSWER = ("correct_refusal_rate", "confident_wrong_rate")


def _rows(connection: duckdb.DuckDBPyConnection, query: str, parameters: dict) -> list[dict]:
    return connection.sql(query, params=parameters).pl().to_dicts()


def headline_from_tables(connection: duckdb.DuckDBPyConnection, eval_run_id: str) -> dict:
    """Identity, digests and the headline metrics of one run, as plain data."""
    run = _rows(
        connection, "SELECT * FROM eval_runs WHERE eval_run_id = $run", {"run": eval_run_id}
    )
    if not run:
        raise KeyError(f"no evaluation run {eval_run_id!r} in the warehouse")
    identity = run[0]
    retrieval = _rows(
        connection,
        "SELECT measure, value, ci_low, ci_high, n FROM retrieval_metrics "
        "WHERE eval_run_id = $run AND scope = 'overall' AND list_contains($names, measure)",
        {"run": eval_run_id, "names": list(HEADLINE_RETRIEVAL)},
    )
    generation = _rows(
        connection,
        "SELECT scope, scope_value, metric, value, ci_low, ci_high, n FROM generation_metrics "
        "WHERE eval_run_id = $run",
        {"run": eval_run_id},
    )
    two_by_two = _rows(
        connection,
        "SELECT context_sufficient, answer_correct, count FROM sufficiency_correctness "
        "WHERE eval_run_id = $run ORDER BY context_sufficient DESC, answer_correct DESC",
        {"run": eval_run_id},
    )
    sweep = _rows(
        connection,
        "SELECT threshold, unanswerable_answered, answerable_refused FROM abstention_sweep "
        "WHERE eval_run_id = $run AND recommended",
        {"run": eval_run_id},
    )
    calibration = _rows(
        connection,
        "SELECT judge_id, n, agreement, kappa, calibrated, reason FROM judge_calibration "
        "WHERE eval_run_id = $run",
        {"run": eval_run_id},
    )
    order = {name: i for i, name in enumerate(HEADLINE_RETRIEVAL)}
    return {
        "eval_run_id": eval_run_id,
        "partition_date": identity["partition_date"],
        "dagster_run_id": identity["dagster_run_id"],
        "snapshot_id": identity["snapshot_id"],
        "corpus_digest": identity["corpus_digest"],
        "golden_set": identity["golden_set"],
        "golden_digest": identity["golden_digest"],
        "system_id": identity["system_id"],
        "system_config_digest": identity["system_config_digest"],
        "judge_id": identity["judge_id"],
        "retrieval": sorted(retrieval, key=lambda r: order[r["measure"]]),
        "generation": [
            r
            for r in generation
            if r["scope"] == "overall"
            and r["scope_value"] == "answerable"
            and r["metric"] in HEADLINE_GENERATION
        ],
        "no_answer": [
            r
            for r in generation
            if r["metric"] in NO_ANSWER
            and (
                (r["scope"] == "stratum" and r["scope_value"] != "answerable")
                or (r["scope"] == "overall" and r["scope_value"] == "no_answer")
            )
        ],
        "sufficiency_correctness": two_by_two,
        "recommended_threshold": sweep[0] if sweep else None,
        "judge_calibration": calibration[0] if calibration else None,
    }


def _figure(row: dict, key: str) -> str:
    value = row["value"]
    if value is None:
        return f"  {row[key]:<28} n/a (n={row['n']})"
    interval = ""
    if row.get("ci_low") is not None:
        interval = f"  95% CI {row['ci_low']:.3f} to {row['ci_high']:.3f}"
    return f"  {row[key]:<28} {value:.4f}{interval}  (n={row['n']})"


def format_summary(headline: dict) -> str:
    """The readable summary ``make nightly`` prints."""
    lines = [
        f"Evaluation run {headline['eval_run_id']} (night {headline['partition_date']})",
        f"  corpus snapshot   {headline['snapshot_id']}  digest {headline['corpus_digest']}",
        f"  golden set        {headline['golden_set']}  digest {headline['golden_digest']}",
        f"  system            {headline['system_id']}  config {headline['system_config_digest'][:12]}",
        f"  judge             {headline['judge_id']}",
        "",
        "Retrieval (answerable items, relevant = grade >= 2):",
        *(_figure(r, "measure") for r in headline["retrieval"]),
        "",
        "Generation (answerable items):",
        *(_figure(r, "metric") for r in headline["generation"]),
        "",
        "No-answer items (reported apart, never in the headline):",
        *(
            _figure({**r, "label": f"{r['scope_value']}: {r['metric']}"}, "label")
            for r in headline["no_answer"]
        ),
        "",
        "Context sufficient x answer correct (answerable items):",
        *(
            f"  sufficient={c['context_sufficient']!s:<5}  correct={c['answer_correct']!s:<5}  {c['count']}"
            for c in headline["sufficiency_correctness"]
        ),
    ]
    threshold = headline.get("recommended_threshold")
    if threshold:
        lines += [
            "",
            f"Abstention sweep: recommended evidence threshold {threshold['threshold']:.3f} "
            f"({threshold['unanswerable_answered']} unanswerable answered, "
            f"{threshold['answerable_refused']} answerable refused)",
        ]
    calibration = headline.get("judge_calibration")
    if calibration:
        lines += ["", f"Judge calibration: {calibration['reason']}"]
    return "\n".join(lines)


def summary_markdown(headline: dict) -> str:
    """The same summary as markdown for the asset page in the UI."""
    return "```\n" + format_summary(headline) + "\n```"
