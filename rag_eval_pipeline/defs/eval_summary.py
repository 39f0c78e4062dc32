"""The evaluation summary asset: loads the finished run, settles its baseline, checks release gates.

It is the only step that writes a run's tables into the warehouse (``lib.runs.lifecycle``). The
release gates are checked here and recorded in ``gate_results`` in the same publish as the
tables; the step after it (``defs.release_checks``) reports them as blocking asset checks on
``eval_summary``, beside the ``published`` check of every metric table.
"""

import os
import threading
import uuid
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import dagster as dg
import polars as pl

from rag_eval_pipeline.defs.metadata import evaluation_asset, run_link, table_metadata
from rag_eval_pipeline.defs.resources import WarehouseResource
from rag_eval_pipeline.defs.retrieval_run import record_of
from rag_eval_pipeline.lib.reporting.charts import import_drawing_modules
from rag_eval_pipeline.lib.reporting.report import (
    load_report_data,
    render_charts,
    report_html,
    report_markdown,
)
from rag_eval_pipeline.lib.reporting.summary import summary_markdown
from rag_eval_pipeline.lib.runs.gates import GateSet, evaluate_gates
from rag_eval_pipeline.lib.runs.lifecycle import Finished, finish_run
from rag_eval_pipeline.lib.runs.record import EVAL_RUN_TAG, measures_of
from rag_eval_pipeline.lib.store.sql import sql_query
from rag_eval_pipeline.lib.store.warehouse import read_frame


def guard_facts(finished: Finished) -> dict:
    """What the comparison guard decides on (``lib.runs.guard``), as metadata values."""
    run, baseline, settled = finished.run, finished.settled.baseline, finished.settled
    return {
        "eval_run_id": run["eval_run_id"],
        "suite": run["suite"],
        "partition": run["partition_date"],
        "is_baseline": settled.is_baseline,
        "baseline_run_id": baseline["eval_run_id"] if baseline else "",
        "baseline_corpus_digest": baseline["corpus_digest"] if baseline else "",
        "baseline_golden_digest": baseline["golden_digest"] if baseline else "",
        "baseline_measures_version": measures_of(baseline) if baseline else "",
        "baseline_system_id": baseline["system_id"] if baseline else "",
        "baseline_system_config": baseline["system_config"] if baseline else "{}",
        "baseline_settings": (baseline.get("settings") or "{}") if baseline else "{}",
        "comparable_with_baseline": settled.comparable,
        "comparability": settled.reason,
        "rebaseline_requested": bool(run["rebaseline"]),
        "rebaseline_reason": run["rebaseline_reason"] or "",
        "requested_by": run["rebaseline_requested_by"] or "",
        "rebaseline_for": run["rebaseline_for"] or "",
        "rebaseline_offset_rows": settled.offset_rows,
    }


def build_eval_summary(
    partitions: dg.PartitionsDefinition,
    gates: GateSet,
    writer_tags: Mapping[str, str] | None = None,
) -> dg.AssetsDefinition:
    @evaluation_asset(
        "eval_summary",
        partitions=partitions,
        group="metrics",
        kinds={"duckdb"},
        code_version="eval-summary-v3",
        op_tags=dict(writer_tags or {}),
    )
    def eval_summary(
        context: dg.AssetExecutionContext,
        retrieval_metrics: dict,
        generation_metrics: dict,
        judge_calibration: dict,
        claim_diagnostics: dict,
        warehouse_db: WarehouseResource,
    ):
        """The finished run loaded into the warehouse in one publish: every table, its
        ``eval_runs`` record completed with the headline figures (the no-answer strata apart),
        its baseline settled; the release gates checked and recorded; the HTML report written."""
        record = record_of(retrieval_metrics)
        # A run that materializes the summary alone has no retrieval step to tag it; the
        # failure alert finds the evaluation run by this tag (``defs.alerts``).
        context.instance.add_run_tags(context.run.run_id, {EVAL_RUN_TAG: record.eval_run_id})
        report_file = warehouse_db.report_path(record.eval_run_id)
        # The charts' imports run while DuckDB (which releases the GIL) loads the warehouse,
        # and the charts are drawn and the report written to a temporary name while it writes
        # the warehouse out (its checkpoint: 0.5 s at 96,000 passages). The warehouse is
        # published only once the report is written, and the report renamed into place just
        # after: a run the warehouse holds complete has its report, and a report that fails
        # leaves the run unpublished.
        drawing = threading.Thread(target=import_drawing_modules, daemon=True)
        drawing.start()
        report: list[Future] = []
        report_file.parent.mkdir(parents=True, exist_ok=True)
        draft = report_file.with_name(f".{report_file.name}.{uuid.uuid4().hex}.tmp")
        try:
            # Exited in reverse: the publish (the report awaited before it, renamed into place
            # just after, under its lock), then the painter joined, then the draft removed if
            # it is still there (the publish failed), so no partial page is ever left.
            with (
                ThreadPoolExecutor(1) as painter,
                warehouse_db.publishing(
                    before_publish=lambda: report[0].result(),
                    after_publish=lambda: os.replace(draft, report_file),
                ) as connection,
            ):
                finished = finish_run(
                    connection,
                    warehouse_db.run_store(),
                    record,
                    report_path=str(report_file),
                    seed=record.settings.seed,
                    max_judge_error_share=gates.max_judge_error_share,
                )
                results = gate_results(connection, record.eval_run_id, finished.headline, gates)
                record_gate_results(connection, record.eval_run_id, results, gates)
                report_data = load_report_data(connection, record.eval_run_id)
                drawing.join()
                report.append(painter.submit(write_report, report_data, draft))
        finally:
            draft.unlink(missing_ok=True)
        rendered = report[0].result()
        if finished.replaced:
            context.log.warning(finished.replaced)
        metadata = summary_metadata(
            finished, report_data["headline"], gates, report_markdown(report_data, rendered)
        )
        dagster_run = finished.run["dagster_run_id"] or context.run_id
        return dg.Output(
            {**retrieval_metrics, "headline": finished.headline},
            metadata={
                **metadata,
                "dagster_run": run_link(dagster_run),
                "report": dg.MetadataValue.path(str(report_file)),
            },
        )

    return eval_summary


def write_report(report_data: dict, path: Path) -> dict[str, bytes]:
    """Draw the report's charts and write its page to ``path``; the charts drawn."""
    rendered = render_charts(report_data)
    path.write_text(report_html(report_data, rendered), encoding="utf-8")
    return rendered


def gate_results(connection, eval_run_id: str, headline: dict, gates: GateSet) -> list:
    """The release gates on the run's metric rows and prediction-powered bounds; judge gates
    respect the calibration and the judge error bound."""
    params = {"run": eval_run_id}
    calibration = headline.get("judge_calibration") or {}
    return evaluate_gates(
        gates.metric_gates,
        read_frame(connection, sql_query("gates", "metric_rows"), params),
        judge_calibrated=bool(calibration.get("calibrated")),
        judge_reason=calibration.get("reason", "no calibration"),
        max_judge_error_share=gates.max_judge_error_share,
        ppi=read_frame(connection, sql_query("gates", "ppi_rows"), params),
        min_labels_for_ppi=gates.min_labels_for_ppi,
    )


def record_gate_results(connection, eval_run_id: str, results: list, gates: GateSet) -> None:
    """The gates' results kept with the run (``gate_results``), in the same publish as its
    tables: the run's own record says which gates passed, failed or were not assessed."""
    connection.execute(sql_query("gates", "forget_results"), {"run": eval_run_id})
    for result in results:
        connection.execute(
            sql_query("gates", "record_result"),
            {
                "run": eval_run_id,
                "gate": result.gate.name,
                "gates_file": gates.path.name,
                "gates_version": gates.version,
                "status": result.status,
                "passed": result.passed,
                "observed": result.observed,
                "op": result.gate.op,
                "threshold": float(result.gate.threshold),
                "margin": result.margin,
                "message": result.message,
            },
        )


def summary_metadata(finished, headline: dict, gates: GateSet, charts: str) -> dict:
    """What the UI shows of the finished run: its record, digests, the summary and the charts.

    ``headline`` is the run's as published (``headline_from_tables`` once the run is complete
    and its gates recorded), the one ``rag-eval summary`` prints: ``finished.headline`` is taken
    before the run is marked complete, so its summary would read INCOMPLETE, without gates."""
    markdown = summary_markdown(headline)
    run = finished.run
    return {
        **table_metadata(pl.DataFrame([run]), "eval_runs"),
        **guard_facts(finished),
        "snapshot_id": run["snapshot_id"],
        "corpus_digest": run["corpus_digest"],
        "golden_set": run["golden_set"],
        "golden_digest": run["golden_digest"],
        # What answered and what judged, as on every metric table (``provenance``): the
        # summary's lines name the judge without its configuration digest.
        "system_id": run["system_id"],
        "system_config_digest": run["system_config_digest"],
        "judge_id": run["judge_id"],
        "judge_config_digest": run["judge_config_digest"],
        "settings_digest": run["settings_digest"],
        "measures_version": measures_of(run),
        "gates_file": f"{gates.path.name} (version {gates.version})",
        "replaced_figures": finished.replaced,
        "summary": dg.MetadataValue.md(markdown),
        "charts": dg.MetadataValue.md(charts),
    }
