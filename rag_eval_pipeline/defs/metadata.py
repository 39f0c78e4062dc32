"""What every evaluation asset shares: its decorator arguments, table metadata, run links."""

from collections.abc import Iterable, Sequence

import dagster as dg
import polars as pl

TEAM = "team:evaluation"


def evaluation_asset(
    name: str,
    *,
    partitions: dg.PartitionsDefinition,
    group: str,
    kinds: set[str],
    code_version: str,
    **extra,
):
    """``@dg.asset`` for one evaluation asset: partitioned by night and suite, owned by the team."""
    return dg.asset(
        name=name,
        partitions_def=partitions,
        group_name=group,
        owners=[TEAM],
        kinds=kinds,
        code_version=code_version,
        **extra,
    )


def table_metadata(frame: pl.DataFrame, table: str) -> dict:
    """``dagster/row_count``, ``dagster/column_schema`` and the warehouse table name."""
    schema = dg.TableSchema(
        columns=[dg.TableColumn(name, str(dtype)) for name, dtype in frame.schema.items()]
    )
    return {
        "dagster/row_count": dg.MetadataValue.int(frame.height),
        "dagster/column_schema": schema,
        "dagster/table_name": f"rag_eval.main.{table}",
        "warehouse_table": dg.MetadataValue.text(table),
    }


def run_link(dagster_run_id: str) -> dg.MetadataValue:
    """A link from an evaluation run to its Dagster run page in the UI."""
    return dg.MetadataValue.url(f"/runs/{dagster_run_id}")


def markdown_table(frame: pl.DataFrame, *, measured: str | None = None) -> str:
    """A small frame as a markdown table (floats to 4 decimals, a null as an empty cell), for
    metadata the UI renders; a null in the column ``measured`` reads "not measured"."""
    rows = frame.iter_rows(named=True)
    if measured is not None:
        rows = ({**row, measured: _or_not_measured(row[measured])} for row in rows)
    return _markdown(frame.columns, (row.values() for row in rows))


def _or_not_measured(value):
    return "not measured" if value is None else value


def _markdown(columns: Sequence[str], rows: Iterable[Iterable]) -> str:
    header = "| " + " | ".join(columns) + " |\n|" + "---|" * len(columns) + "\n"
    return header + "".join(
        "| " + " | ".join(_cell(value) for value in row) + " |\n" for row in rows
    )


def _cell(value) -> str:
    if value is None:
        return ""
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def sweep_metadata(recommendation: dict | None) -> dict:
    """``generation_metrics``' entries for the abstention sweep, from the rule's pick as the
    warehouse reads it back (``GenerationTables.recommendation``): the threshold it recommends,
    empty when the pick refuses every answerable item (``summary.recommended_value``), and the
    summary's lines for it, which say why."""
    from rag_eval_pipeline.lib.reporting.summary import recommended_value, sweep_lines

    return {
        "recommended_evidence_threshold": recommended_value(recommendation),
        "abstention_sweep": dg.MetadataValue.md(
            "```\n" + "\n".join(sweep_lines(recommendation)) + "\n```"
            if recommendation
            else "not measured (no threshold to sweep)"
        ),
    }


def markdown_headline(frame: pl.DataFrame, key: str, names: tuple[str, ...]) -> str:
    """The headline figures ``names`` of a metric table (``key``, ``value``, ``ci_low``,
    ``ci_high``, ``n``, ``interval_method``) as a markdown table in that order, as the printed
    summary shows them (``summary.in_order``): a figure without a value (or without a row)
    says "not measured" and why (``summary.not_measured``), never a number or an empty cell.
    ``n`` carries its unit as in the summary (``summary.counted``: ``186 items``, ``290
    claims``), so a claim rate's denominator is not read as a count of items."""
    from rag_eval_pipeline.lib.reporting.summary import counted, in_order, not_measured

    columns = (key, "value", "ci_low", "ci_high", "n", "interval_method")
    rows = [
        (
            row[key],
            row["value"],
            row["ci_low"],
            row["ci_high"],
            counted(row, row[key]),
            row["interval_method"],
        )
        if row["value"] is not None
        else (
            row[key],
            not_measured(row[key]),
            None,
            None,
            counted({**row, "n": row.get("n") or 0}, row[key]),
            None,
        )
        for row in in_order(frame.to_dicts(), key, names)
    ]
    return _markdown(columns, rows)


def counts(frame: pl.DataFrame, column: str) -> dict[str, int]:
    """Rows per value of ``column``, for a JSON metadata entry."""
    return {
        str(value): length for value, length in frame.group_by(column).len().sort(column).rows()
    }


def rebaseline_for(record) -> dict:
    """``rebaseline_for``: the night's evaluation run this one re-baselines, or empty. The
    ``rebaseline`` job materializes the night's partition again with the old baseline's system
    on the new snapshot, after the night itself: the partition's newest materialization is then
    that run's, not the night's, and only this entry (as on ``eval_summary``) tells them apart."""
    return {"rebaseline_for": record.request.rebaseline_for or ""}


def provenance(record) -> dict:
    """What produced a metric table, shown on its asset page: the evaluation run, the corpus
    and golden-set digests, the system and judge with their configuration digests, the run
    settings' digest, the measure definitions' version, and where the figures are published
    (until ``eval_summary`` of the same Dagster run completes, they are staged in the run store
    and are not a finished night)."""
    return {
        "eval_run_id": record.eval_run_id,
        "suite": record.suite,
        "snapshot_id": record.snapshot_id,
        "corpus_digest": record.corpus_digest,
        "golden_set": record.golden_set,
        "golden_digest": record.golden_digest,
        "system_id": record.system_id,
        "system_config_digest": record.system_config_digest,
        "judge_id": record.judge_id,
        "judge_config_digest": record.judge_config_digest,
        "settings_digest": record.settings.digest,
        "measures_version": record.measures_version,
        **rebaseline_for(record),
        "published": dg.MetadataValue.text(
            "by eval_summary after this step, in this Dagster run or a re-execution of it: until "
            "it completes, these figures are staged, "
            "not a finished night (this asset's published check says which, as does "
            "eval_runs.status)"
        ),
    }
