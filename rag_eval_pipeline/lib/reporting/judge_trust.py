"""Trusting the judge, as the summary and the report show it.

Read from ``judge_calibration``, ``judge_rate_estimates``, ``judge_repeat_verdicts``,
``judge_usage`` and ``diagnostic_metrics`` (``sql/judge_trust.sql``): the judge's agreement with
people, every judge-based rate by the judge alone beside its prediction-powered estimate with the
labels it rests on, the judge's stability over repeats with the claims that flipped, what the
judge spent (and whether a budget stopped it), and the claim-level diagnostics per source.
"""

import duckdb

from rag_eval_pipeline.lib.judges.estimates import RATES
from rag_eval_pipeline.lib.judges.stability import UNSTABLE_RATE
from rag_eval_pipeline.lib.store.sql import sql_query

SCOPES = (("overall", "answerable"), ("source", "golden"), ("source", "production"))
DIAGNOSTICS = (
    ("claim_recall", "missed", "claim_missed_ans_contradicted", "claim_missed_ans_unsupported"),
    (
        "context_claim_recall",
        "missed",
        "context_claim_missed_ctx_contradicted",
        "context_claim_missed_ctx_unsupported",
    ),
    ("context_precision", "", "", ""),
    (
        "context_utilisation",
        "unused",
        "context_unused_ans_contradicted",
        "context_unused_ans_unsupported",
    ),
    (
        "noise_sensitivity_in_relevant",
        "of which",
        "noise_sensitivity_in_relevant_ref_contradicted",
        "noise_sensitivity_in_relevant_ref_unsupported",
    ),
    (
        "noise_sensitivity_in_irrelevant",
        "of which",
        "noise_sensitivity_in_irrelevant_ref_contradicted",
        "noise_sensitivity_in_irrelevant_ref_unsupported",
    ),
    (
        "hallucination",
        "context",
        "hallucination_ctx_contradicted",
        "hallucination_ctx_unsupported",
    ),
    (
        "self_knowledge",
        "context",
        "self_knowledge_ctx_contradicted",
        "self_knowledge_ctx_unsupported",
    ),
    ("faithfulness", "unfaithful", "unfaithful_ctx_contradicted", "unfaithful_ctx_unsupported"),
    ("precision", "incorrect", "incorrect_ref_contradicted", "incorrect_ref_unsupported"),
)
"""The diagnostics shown, each with the CONTRADICTED and UNSUPPORTED parts that go with it."""
MAX_UNSTABLE_LISTED = 10


def judge_trust_from_tables(connection: duckdb.DuckDBPyConnection, eval_run_id: str) -> dict:
    """Everything of the module docstring for one run, as plain data (lists of rows)."""
    scope = {"run": eval_run_id}

    def rows(query: str) -> list[dict]:
        return connection.sql(sql_query("judge_trust", query), params=scope).pl().to_dicts()

    return {
        "calibration": rows("calibration"),
        "rates": rows("rates"),
        "unstable_claims": rows("unstable_claims"),
        "usage": rows("usage"),
        "diagnostics": rows("diagnostics"),
    }


def _interval(row: dict) -> str:
    if row.get("ci_low") is None or row.get("ci_high") is None:
        return "no interval"
    return f"[{row['ci_low']:.3f}, {row['ci_high']:.3f}]"


def _value(row: dict | None) -> str:
    if row is None or row.get("value") is None:
        return "not measured"
    return f"{row['value']:.4f} {_interval(row)}"


def _labelled(row: dict) -> str:
    unit = "items" if row["unit"] == "item" else "claims"
    return f"{row['n_labelled']}/{row['n_judged']} {unit}"


def rate_lines(rates: list[dict]) -> list[str]:
    """Every judge-based rate per scope: the judge alone, and prediction-powered (PPI++), with
    the labels the latter rests on and the weight it gave the judge (lambda)."""
    found = {(r["scope"], r["scope_value"], r["metric"], r["method"][:3]): r for r in rates}
    lines = []
    for scope, value in SCOPES:
        names = [m for m in RATES if (scope, value, m, "jud") in found]
        if not names:
            continue
        if not lines:
            lines.append(
                f"    {'':<26}{'judge alone':<22}{'n':>5}   {'PPI++ (judge + labels)':<22}"
                f"   {'labelled':<18}lambda"
            )
        lines.append(f"    {scope}={value}")
        for metric in names:
            judge, ppi = (
                found[(scope, value, metric, "jud")],
                found.get((scope, value, metric, "ppi")),
            )
            line = f"      {metric:<24}{_value(judge):<22}{judge['n_judged']:>5}   "
            if ppi is None or ppi.get("value") is None:
                reason = f" ({ppi['reason']})" if ppi is not None and ppi.get("reason") else ""
                line += f"not measured{reason}"
            else:
                weight = "" if ppi.get("ppi_lambda") is None else f"{ppi['ppi_lambda']:.2f}"
                line += f"{_value(ppi):<22}   {_labelled(ppi):<18}{weight}"
                if ppi.get("ci_low") is None and ppi.get("reason"):
                    line += f"  - {ppi['reason'].split(':')[0]}"
            lines.append(line.rstrip())
    return lines


def stability_lines(trust: dict) -> list[str]:
    """The unstable-claim rate (or why it was not measured) and the claims that flipped."""
    rows = [r for r in trust["rates"] if r["metric"] == UNSTABLE_RATE]
    overall = next((r for r in rows if r["scope"] == "overall"), None)
    if overall is None:
        return []
    if overall.get("value") is None:
        return [f"  stability          not measured ({overall.get('reason')})"]
    lines = [
        f"  stability          {UNSTABLE_RATE} {overall['value']:.4f}  95% CI "
        f"{overall['ci_low']:.3f} to {overall['ci_high']:.3f}  (n={overall['n_judged']} claims; "
        f"{overall['reason']})"
    ]
    unstable = trust["unstable_claims"]
    for claim in unstable[:MAX_UNSTABLE_LISTED]:
        text = claim["claim"] if len(claim["claim"]) <= 70 else claim["claim"][:67] + "..."
        lines.append(
            f"    {claim['source']} {claim['item_id']}#{claim['claim_index']}: "
            f"{' -> '.join(claim['verdicts'])}  {text!r}"
        )
    if len(unstable) > MAX_UNSTABLE_LISTED:
        lines.append(
            f"    ... and {len(unstable) - MAX_UNSTABLE_LISTED} more (table judge_repeat_verdicts)"
        )
    return lines


def usage_lines(usage: list[dict]) -> list[str]:
    """What the judge spent per step, and a line per step a budget stopped."""
    if not usage:
        return []
    if not any(row["requests"] or row["replayed"] for row in usage):
        return ["  judge calls        none (the judge makes no model calls)"]
    lines = []
    for row in usage:
        cost = (
            f", cost {row['cost']:.4g} (one price per 1k tokens)" if row["cost"] is not None else ""
        )
        lines.append(
            f"  judge calls        {row['step']}: {row['requests']:,} requests, "
            f"{row['replayed']:,} replayed from the cache, {row['tokens']:,} tokens{cost}"
        )
    for row in usage:
        if row["budget_exhausted"]:
            lines.append(
                f"  BUDGET STOPPED     {row['step']}: {row['reason']}; {row['not_sent']:,} "
                "requests not sent, their claims are JUDGE_ERROR (what was judged is kept)"
            )
    return lines


def diagnostic_lines(diagnostics: list[dict]) -> list[str]:
    """The claim diagnostics per source, each metric with its CONTRADICTED / UNSUPPORTED parts."""
    if not diagnostics:
        return []
    by_source: dict[str, dict[str, dict]] = {}
    for row in diagnostics:
        by_source.setdefault(row["source"], {})[row["metric"]] = row
    lines = [
        "",
        "Claim diagnostics against reference answers (RAGChecker's definitions, mean over items;",
        "C / U: the CONTRADICTED / UNSUPPORTED parts named, kept apart):",
    ]
    for source, found in by_source.items():
        errors = found.get("items_with_judge_errors")
        considered = errors["n_items"] if errors else 0
        count = int(errors["value"]) if errors else 0
        left_out = (
            f", {count} left out for a judge error" if count else ", none left out (no judge error)"
        )
        lines.append(f"  {source}: {considered} items{left_out}")
        for metric, part, contradicted, unsupported in DIAGNOSTICS:
            row = found.get(metric)
            if row is None:
                continue
            if row["value"] is None:
                lines.append(f"    {metric:<32} not measured")
                continue
            split = ""
            if part and contradicted in found and found[contradicted]["value"] is not None:
                split = (
                    f"  {part}: C {found[contradicted]['value']:.3f}"
                    f" U {found[unsupported]['value']:.3f}"
                )
            lines.append(
                f"    {metric:<32} {row['value']:.4f} {_interval(row)}  (n={row['n_items']})"
                + split
            )
    return lines


def judge_trust_lines(trust: dict | None) -> list[str]:
    """The summary's section on the judge (empty for a run without these tables)."""
    if not trust:
        return []
    lines = []
    for row in trust["calibration"]:
        lines += ["", f"Judge calibration: {row['reason']}"]
        if row["n"]:
            kappa = "undefined" if row["kappa"] is None else f"{row['kappa']:.3f}"
            lines.append(
                f"  agreement {row['agreement']:.4f}  95% CI {row['ci_low']:.3f} to "
                f"{row['ci_high']:.3f}, Cohen's kappa {kappa}  (n={row['n']} labelled claims)"
            )
    rates = rate_lines(trust["rates"])
    if rates:
        lines += [
            "  judge-based rates, by the judge alone and prediction-powered (95% intervals):",
            *rates,
        ]
    lines += stability_lines(trust)
    lines += usage_lines(trust["usage"])
    lines += diagnostic_lines(trust["diagnostics"])
    return lines


def judge_trust_tables(trust: dict | None) -> list[tuple[str, list[str], list[list]]]:
    """The same as tables for the HTML report: ``(heading, header, rows)`` each."""
    if not trust:
        return []
    tables = []
    rates = [r for r in trust["rates"] if r["metric"] != UNSTABLE_RATE]
    if rates:
        tables.append(
            (
                "Judge-based rates: the judge alone and prediction-powered (PPI++)",
                [
                    "scope",
                    "metric",
                    "method",
                    "value",
                    "95% interval",
                    "judged",
                    "labelled",
                    "lambda",
                    "note",
                ],
                [
                    [
                        f"{r['scope']}={r['scope_value']}",
                        r["metric"],
                        r["method"],
                        r["value"],
                        _interval(r),
                        r["n_judged"],
                        r["n_labelled"],
                        r["ppi_lambda"],
                        r["reason"],
                    ]
                    for r in rates
                ],
            )
        )
    stability = [r for r in trust["rates"] if r["metric"] == UNSTABLE_RATE]
    if stability:
        tables.append(
            (
                "Judge stability over repeats",
                ["scope", "unstable claim rate", "95% interval", "claims", "note"],
                [
                    [
                        f"{r['scope']}={r['scope_value']}",
                        r["value"],
                        _interval(r),
                        r["n_judged"],
                        r["reason"],
                    ]
                    for r in stability
                ],
            )
        )
    if trust["unstable_claims"]:
        tables.append(
            (
                "Claims whose verdict changed between repeats",
                ["source", "item", "claim", "verdicts by repeat", "text"],
                [
                    [
                        c["source"],
                        c["item_id"],
                        c["claim_index"],
                        " -> ".join(c["verdicts"]),
                        c["claim"],
                    ]
                    for c in trust["unstable_claims"]
                ],
            )
        )
    if trust["usage"]:
        tables.append(
            (
                "What the judge spent",
                ["step", "requests", "replayed", "tokens", "cost", "budget exhausted", "reason"],
                [
                    [
                        u["step"],
                        u["requests"],
                        u["replayed"],
                        u["tokens"],
                        u["cost"],
                        u["budget_exhausted"],
                        u["reason"],
                    ]
                    for u in trust["usage"]
                ],
            )
        )
    if trust["diagnostics"]:
        tables.append(
            (
                "Claim diagnostics against reference answers (mean over items)",
                ["source", "metric", "value", "95% interval", "items", "left out"],
                [
                    [
                        d["source"],
                        d["metric"],
                        d["value"],
                        _interval(d),
                        d["n_items"],
                        d["n_items_left_out"],
                    ]
                    for d in trust["diagnostics"]
                ],
            )
        )
    return tables
