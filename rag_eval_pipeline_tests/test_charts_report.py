"""Charts and the per-run HTML report, on two real nights in a temporary warehouse.

The bundled nightly runs twice through the ``rag-eval`` command: 2026-10-15 (snapshot
2026-10-01) and 2026-11-02 (snapshot 2026-11-01, another corpus digest), so the history of the
golden set has exactly one corpus change.
"""

import base64
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import matplotlib.image
import polars as pl
import pytest
from matplotlib.text import Text
from PIL import Image

from rag_eval_pipeline.lib import files
from rag_eval_pipeline.lib.inputs.golden import NO_ANSWER_STRATA
from rag_eval_pipeline.lib.metrics import MEASURES_VERSION
from rag_eval_pipeline.lib.reporting import charts, report
from rag_eval_pipeline.lib.reporting.summary import recommended_value

PROJECT_ROOT = Path(__file__).resolve().parents[1]
RAG_EVAL = Path(sys.executable).parent / "rag-eval"
NIGHTS = ("2026-10-15", "2026-11-02")
TONIGHT = NIGHTS[-1]
IMAGE = '<img src="data:image/png;base64,'


@pytest.fixture(scope="module")
def warehouse_path(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("dagster_home")
    shutil.copy(PROJECT_ROOT / "dagster.yaml", home / "dagster.yaml")
    path = tmp_path_factory.mktemp("warehouse") / "rag_eval.duckdb"
    environment = {**os.environ, "DAGSTER_HOME": str(home), "RAG_EVAL_WAREHOUSE": str(path)}
    for night in NIGHTS:
        done = subprocess.run(
            [str(RAG_EVAL), "nightly", "--partition", night, "--no-summary"],
            env=environment,
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, f"nightly {night} failed:\n{done.stderr}"
    return path


@pytest.fixture(scope="module")
def runs(warehouse_path) -> dict[str, dict]:
    """The ``eval_runs`` row of each night."""
    with duckdb.connect(str(warehouse_path), read_only=True) as connection:
        rows = connection.sql(
            "SELECT partition_date, eval_run_id, dagster_run_id, corpus_digest FROM eval_runs"
        ).pl()
    assert sorted(rows["partition_date"]) == list(NIGHTS)
    return {row["partition_date"]: row for row in rows.to_dicts()}


@pytest.fixture(scope="module")
def report_data(warehouse_path, runs) -> dict:
    with duckdb.connect(str(warehouse_path), read_only=True) as connection:
        return report.load_report_data(connection, runs[TONIGHT]["eval_run_id"])


@pytest.fixture(scope="module")
def rendered(report_data) -> dict[str, bytes]:
    return report.render_charts(report_data)


def texts(figure) -> list[str]:
    """Every piece of text drawn on a figure: titles, labels, annotations."""
    return [artist.get_text() for artist in figure.findobj(Text)]


def dashed_vertical_lines(figure) -> list:
    axes = figure.axes[0]
    return [
        line
        for line in axes.get_lines()
        if line.get_linestyle() == "--" and len(set(line.get_xdata())) == 1
    ]


def trend_history(report_data) -> pl.DataFrame:
    return pl.DataFrame(report_data["history"]).filter(pl.col("metric") == "Success@5")


def test_each_chart_is_a_png_of_the_stated_size(rendered):
    assert set(rendered) == set(report.CHART_NAMES)
    for name, png in rendered.items():
        assert png.startswith(charts.PNG_SIGNATURE), name
        with Image.open(io.BytesIO(png)) as image:
            assert image.format == "PNG"
            assert image.size == (charts.WIDTH_PX, charts.HEIGHT_PX)
            # More than background, text and one colour: something was drawn.
            assert len(image.convert("RGB").getcolors(maxcolors=1 << 16)) > 16
        pixels = matplotlib.image.imread(io.BytesIO(png), format="png")
        assert pixels.shape[:2] == (charts.HEIGHT_PX, charts.WIDTH_PX)


def test_the_same_data_gives_the_same_bytes(report_data, rendered, tmp_path):
    assert report.render_charts(report_data) == rendered
    # Another interpreter with another hash seed: nothing may depend on set or dict order.
    data_file = tmp_path / "report_data.json"
    data_file.write_text(json.dumps(report_data), encoding="utf-8")
    script = (
        "import hashlib, json, sys\n"
        "from rag_eval_pipeline.lib.reporting import report\n"
        "data = json.load(open(sys.argv[1], encoding='utf-8'))\n"
        "charts = report.render_charts(data)\n"
        "print(json.dumps({k: hashlib.sha256(v).hexdigest() for k, v in charts.items()}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(data_file)],
        env={**os.environ, "PYTHONHASHSEED": "12345"},
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        name: hashlib.sha256(png).hexdigest() for name, png in rendered.items()
    }


def test_history_holds_both_nights_in_order(report_data, runs):
    history = trend_history(report_data)
    assert history["partition_date"].to_list() == list(NIGHTS)
    assert history["eval_run_id"].to_list() == [runs[night]["eval_run_id"] for night in NIGHTS]
    assert history["corpus_digest"].to_list() == [runs[night]["corpus_digest"] for night in NIGHTS]
    assert history["corpus_digest"].n_unique() == 2
    assert set(pl.DataFrame(report_data["history"])["metric"]) == set(report.HISTORY_MEASURES)


def test_history_keeps_to_completed_runs_of_the_same_golden_set_and_system(
    warehouse_path, runs, tmp_path
):
    copy = tmp_path / "copy.duckdb"
    shutil.copy(warehouse_path, copy)
    first, tonight = (runs[night]["eval_run_id"] for night in NIGHTS)
    with duckdb.connect(str(copy)) as connection:
        assert report.load_history(connection, tonight)["eval_run_id"].unique().len() == 2
        connection.execute(
            "UPDATE eval_run_records SET status = 'started', completed_at = NULL "
            "WHERE eval_run_id = $run",
            {"run": first},
        )
        # An unfinished run is left out of others' history but is in its own.
        assert set(report.load_history(connection, tonight)["eval_run_id"]) == {tonight}
        assert set(report.load_history(connection, first)["eval_run_id"]) == {first, tonight}
        connection.execute(
            "UPDATE eval_run_records SET status = 'complete', completed_at = now(), "
            "system_config_digest = 'other' WHERE eval_run_id = $run",
            {"run": first},
        )
        assert set(report.load_history(connection, tonight)["eval_run_id"]) == {tonight}
        with pytest.raises(KeyError, match="no-such-run"):
            report.load_history(connection, "no-such-run")


def test_the_report_lives_beside_the_warehouse(warehouse_path):
    assert report.report_path_for(warehouse_path, "2026-11-02-abc") == (
        warehouse_path.parent / "reports" / "2026-11-02-abc.html"
    )


def test_the_trend_marks_exactly_the_one_corpus_change(report_data, runs):
    history = trend_history(report_data)
    assert charts.corpus_changes(history) == [1]
    figure = charts.metric_trend_figure(history, "Success@5")
    lines = dashed_vertical_lines(figure)
    assert len(lines) == 1
    assert set(lines[0].get_xdata()) == {0.5}  # between the two nights
    new_digest = runs[TONIGHT]["corpus_digest"][:8]
    old_digest = runs[NIGHTS[0]]["corpus_digest"][:8]
    labels = texts(figure)
    assert sum(new_digest in label for label in labels) == 1
    assert not any(old_digest in label for label in labels)


@pytest.mark.parametrize(
    ("digests", "changes"),
    [
        (["a", "a", "b", "b", "a"], [2, 4]),
        (["a", "a", "a"], []),
        (["a"], []),
        ([], []),
    ],
)
def test_corpus_changes_finds_every_change_of_digest(digests, changes):
    history = pl.DataFrame(
        {
            "partition_date": [f"2026-10-{day + 1:02d}" for day in range(len(digests))],
            "corpus_digest": digests,
        },
        schema={"partition_date": pl.String, "corpus_digest": pl.String},
    )
    assert charts.corpus_changes(history) == changes


def test_comparison_breaks_name_corpus_and_definition_changes():
    history = pl.DataFrame(
        {
            "partition_date": ["2026-10-01", "2026-10-02", "2026-10-03", "2026-10-04"],
            "corpus_digest": ["a" * 64, "a" * 64, "b" * 64, "c" * 64],
            "measures_version": [None, "v1", "v1", "v2"],
        }
    )
    assert charts.comparison_breaks(history) == {
        1: ["definitions changed to v1"],
        2: ["corpus changed to bbbbbbbb"],
        3: ["corpus changed to cccccccc", "definitions changed to v2"],
    }
    # Without the column (a caller that has none), only the corpus breaks the line.
    assert list(charts.comparison_breaks(history.drop("measures_version"))) == [2, 3]


def test_a_change_of_golden_set_breaks_the_trend_and_is_named():
    """Runs on another golden set do not compare (rag-eval compare refuses them): with a
    ``golden_digest`` column the line breaks there too, labelled with the new digest."""
    history = pl.DataFrame(
        {
            "partition_date": ["2026-10-01", "2026-10-02", "2026-10-03", "2026-10-04"],
            "eval_run_id": ["r1", "r2", "r3", "r4"],
            "corpus_digest": ["a" * 64, "a" * 64, "a" * 64, "b" * 64],
            "golden_digest": ["1" * 64, "2" * 64, "2" * 64, "3" * 64],
            "value": [0.8, 0.7, 0.72, 0.9],
            "ci_low": [0.7, 0.6, 0.62, 0.8],
            "ci_high": [0.9, 0.8, 0.82, 0.95],
        }
    )
    assert charts.comparison_breaks(history) == {
        1: ["golden set changed to 22222222"],
        3: ["corpus changed to bbbbbbbb", "golden set changed to 33333333"],
    }
    figure = charts.metric_trend_figure(history, "Success@5")
    assert sorted(set(line.get_xdata()).pop() for line in dashed_vertical_lines(figure)) == [
        0.5,
        2.5,
    ]
    assert "golden set changed\nto 22222222" in texts(figure)
    # Without the column (the report's history keeps to one golden set), it breaks nothing.
    assert list(charts.comparison_breaks(history.drop("golden_digest"))) == [3]


def test_a_change_of_measure_definitions_breaks_the_trend_and_is_noted(report_data, runs):
    """The first night recorded before the definitions were versioned: the trend's one break
    (between the nights, where the corpus also changed) names both changes, and the history
    table says both keep the rows apart."""
    first = runs[NIGHTS[0]]["eval_run_id"]
    history = [
        {**row, "measures_version": None} if row["eval_run_id"] == first else row
        for row in report_data["history"]
    ]
    assert {row["measures_version"] for row in history} == {None, MEASURES_VERSION}
    figure = charts.metric_trend_figure(
        pl.DataFrame(history).filter(pl.col("metric") == "Success@5"), "Success@5"
    )
    [line] = dashed_vertical_lines(figure)
    assert set(line.get_xdata()) == {0.5}
    new_digest = runs[TONIGHT]["corpus_digest"][:8]
    [label] = [text for text in texts(figure) if "changed" in text]
    assert label == (f"corpus changed\nto {new_digest}\ndefinitions changed\nto {MEASURES_VERSION}")
    page = report.report_html({**report_data, "history": history})
    assert "corpus changed and definitions changed: not comparable with the row above" in page


def test_corpus_changes_follow_night_order_not_row_order():
    history = pl.DataFrame(
        {
            "partition_date": ["2026-10-03", "2026-10-01", "2026-10-02"],
            "corpus_digest": ["b", "a", "a"],
        }
    )
    assert charts.corpus_changes(history) == [2]


def test_the_sweep_marks_the_recommended_threshold(report_data):
    sweep = pl.DataFrame(report_data["abstention_sweep"])
    recommended = sweep.filter(pl.col("recommended")).row(0, named=True)
    assert report_data["recommended_threshold"] == recommended["threshold"]
    figure = charts.abstention_sweep_figure(sweep, recommended["threshold"])
    lines = dashed_vertical_lines(figure)
    assert [set(line.get_xdata()) for line in lines] == [{recommended["threshold"]}]
    label = next(t for t in texts(figure) if t.startswith("Recommended "))
    assert f"{recommended['threshold']:.2f}" in label
    assert f"{recommended['unanswerable_answered']} unanswerable answered" in label
    assert f"{recommended['answerable_refused']} answerable refused" in label


def test_the_stratum_bars_show_every_no_answer_stratum_with_its_n(report_data):
    rows = pl.DataFrame(report_data["headline"]["no_answer"])
    figure = charts.stratum_bars_figure(rows)
    axes = figure.axes[0]
    assert [tick.get_text() for tick in axes.get_yticklabels()] == [
        charts.STRATUM_WORDS[s] for s in (*NO_ANSWER_STRATA, "no_answer")
    ]
    assert len(axes.patches) == 2 * (len(NO_ANSWER_STRATA) + 1)
    labels = texts(figure)
    for row in rows.iter_rows(named=True):
        assert f"{row['value']:.0%}  n={row['n']}" in labels


def test_the_html_report_is_self_contained_and_complete(report_data, rendered, runs, tmp_path):
    target = tmp_path / "reports" / f"{runs[TONIGHT]['eval_run_id']}.html"
    assert report.write_html_report(report_data, target, rendered) == target
    assert [p.name for p in target.parent.iterdir()] == [target.name]
    page = target.read_text(encoding="utf-8")
    for night in NIGHTS:
        assert runs[night]["corpus_digest"] in page
    assert runs[TONIGHT]["eval_run_id"] in page
    assert runs[TONIGHT]["dagster_run_id"] in page
    assert report_data["run"]["golden_digest"] in page
    assert f'<td>Measure definitions</td><td class="wrap">{MEASURES_VERSION}</td>' in page
    assert page.count(IMAGE) == 3
    inlined = re.findall(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert sorted(base64.b64decode(b) for b in inlined) == sorted(rendered.values())
    no_answer = page.index("No-answer questions")
    for stratum in NO_ANSWER_STRATA:
        assert stratum in page[no_answer:]
    assert "answer correct" in page and "context insufficient" in page
    assert "Recommended evidence threshold" in page
    chosen = report_data["headline"]["recommended_threshold"]
    # The bundled golden set: 190 answerable items and 76 no-answer items.
    assert (chosen["unanswerable_items"], chosen["answerable_items"]) == (76, 190)
    assert f"{chosen['unanswerable_answered']} of 76 unanswerable answered" in page
    assert "Chosen on this run&#x27;s own items, so its counts are optimistic" in page


def test_the_recommended_threshold_says_what_it_cannot_be_trusted_for():
    from rag_eval_pipeline.lib.reporting.summary import sweep_lines

    row = {"threshold": 0.4, "unanswerable_answered": 3, "answerable_refused": 20}
    lines = sweep_lines({**row, "unanswerable_items": 76, "answerable_items": 190})
    assert lines[0] == (
        "Abstention sweep: recommended evidence threshold 0.400 "
        "(3 of 76 unanswerable answered, 20 of 190 answerable refused)"
    )
    # Wilson upper bound of 3 in 76, by hand: centre 0.06163, half-width 0.04812 -> 11.0%.
    assert lines[1] == (
        "  chosen on this run's own items, so its counts are optimistic: at it 3.9% of "
        "unanswerable questions are answered here, 95% CI up to 11.0% on 76 items; confirm it "
        "on items it was not chosen on before setting it"
    )
    assert len(lines) == 2
    # 5% of 76 allows 3; a threshold answering 4 is the least bad, not a safe one.
    over = sweep_lines(
        {**row, "unanswerable_answered": 4, "unanswerable_items": 76, "answerable_items": 190}
    )
    assert (
        "no threshold keeps unanswerable questions answered within 5% (at most 3 of 76)"
        in (over[1])
    )
    # 19 no-answer items allow none (floor(0.95)).
    assert (
        "(at most 0 of 19)"
        in sweep_lines(
            {**row, "unanswerable_answered": 1, "unanswerable_items": 19, "answerable_items": 50}
        )[1]
    )
    none = sweep_lines(
        {**row, "unanswerable_answered": 0, "unanswerable_items": 0, "answerable_items": 190}
    )
    assert none[1].startswith("  no no-answer items in this golden set: nothing bounds")
    assert sweep_lines(row) == [
        "Abstention sweep: recommended evidence threshold 0.400 "
        "(3 unanswerable answered, 20 answerable refused)"
    ]


def test_the_html_report_escapes_text(report_data, rendered, tmp_path):
    hostile = {**report_data, "run": {**report_data["run"], "rebaseline_reason": "<b>&'x'"}}
    page = report.write_html_report(hostile, tmp_path / "r.html", rendered).read_text()
    assert "<b>&'x'" not in page
    assert "&lt;b&gt;&amp;&#x27;x&#x27;" in page


def test_a_failed_write_leaves_the_previous_report(report_data, rendered, tmp_path, monkeypatch):
    target = report.write_html_report(report_data, tmp_path / "r.html", rendered)
    before = target.read_bytes()

    def rename_fails(source, destination):
        raise OSError("disk full")

    # The report is written through lib.files.replaced_atomically: its rename fails.
    monkeypatch.setattr(files.os, "replace", rename_fails)
    changed = {**report_data, "run": {**report_data["run"], "rebaseline_reason": "changed"}}
    with pytest.raises(OSError, match="disk full"):
        report.write_html_report(changed, target, rendered)
    assert target.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]


def test_report_markdown_embeds_the_three_charts(report_data, rendered, runs):
    markdown = report.report_markdown(report_data, rendered)
    inlined = re.findall(r"!\[[^\]]+\]\(data:image/png;base64,([A-Za-z0-9+/=]+)\)", markdown)
    assert sorted(base64.b64decode(b) for b in inlined) == sorted(rendered.values())
    assert runs[TONIGHT]["eval_run_id"] in markdown


def test_an_unknown_run_has_no_report(warehouse_path):
    with (
        duckdb.connect(str(warehouse_path), read_only=True) as connection,
        pytest.raises(KeyError, match="no-such-run"),
    ):
        report.load_report_data(connection, "no-such-run")


def _recommended_row(answerable: list[bool], best: list, refused: list[bool]) -> dict:
    """The ``recommended_threshold`` row of a run whose items are these, as the summary reads it
    back from the warehouse."""
    from rag_eval_pipeline.lib.metrics.generation import abstention_sweep, sweep_thresholds
    from rag_eval_pipeline.lib.store.sql import sql_query

    frame = pl.DataFrame(
        {"answerable": answerable, "best_score": best, "refused_otherwise": refused},
        schema={
            "answerable": pl.Boolean,
            "best_score": pl.Float64,
            "refused_otherwise": pl.Boolean,
        },
    )
    sweep, _ = abstention_sweep(frame, sweep_thresholds(best))
    items = pl.DataFrame(
        {"item_id": [str(i) for i in range(len(answerable))], "answerable": answerable}
    )
    with duckdb.connect() as connection:
        connection.register("sweep_rows", sweep.with_columns(eval_run_id=pl.lit("r")))
        connection.register("item_rows", items.with_columns(eval_run_id=pl.lit("r")))
        connection.execute("CREATE TABLE abstention_sweep AS SELECT * FROM sweep_rows")
        connection.execute("CREATE TABLE generation_item_metrics AS SELECT * FROM item_rows")
        query = sql_query("summary", "recommended_threshold")
        [row] = connection.sql(query, params={"run": "r"}).pl().to_dicts()
    return row


def test_a_threshold_refusing_every_answerable_item_is_not_recommended():
    from rag_eval_pipeline.lib.reporting.summary import sweep_lines

    answerable = [True] * 12 + [False] * 5
    # An assistant that refuses everything: no threshold answers anything, nothing to sweep.
    refuses = _recommended_row(answerable, [1.0] * 17, [True] * 17)
    assert (refuses["threshold"], refuses["answerable_refused"]) == (0.0, 12)
    assert sweep_lines(refuses) == [
        "Abstention sweep: recommended evidence threshold: not measured (every threshold refuses "
        "all 12 answerable items: the system refused them on its own or gave them no evidence "
        "score, so there is nothing to sweep)"
    ]
    # One that always answers with one passage of the same score: only the threshold above it
    # keeps the 5 unanswerable items unanswered (5% of 5 allows none), and it refuses all 12.
    answers = _recommended_row(answerable, [1.0] * 17, [False] * 17)
    assert (answers["threshold"], answers["answerable_refused"]) == (1.001, 12)
    assert sweep_lines(answers) == [
        "Abstention sweep: recommended evidence threshold: none: every threshold that keeps "
        "unanswerable items answered at most 0 of 5 (5%) refuses all 12 answerable items"
    ]
    # A threshold that answers some answerable items is still recommended, with its caveats.
    separates = _recommended_row(answerable, [2.0] * 12 + [1.0] * 5, [False] * 17)
    assert sweep_lines(separates)[0] == (
        "Abstention sweep: recommended evidence threshold 2.000 "
        "(0 of 5 unanswerable answered, 0 of 12 answerable refused)"
    )


@pytest.mark.parametrize("every_threshold", [False, True], ids=["pick-only", "every-threshold"])
def test_a_pick_refusing_every_answerable_item_is_marked_nowhere_in_the_report(
    warehouse_path, runs, tmp_path, every_threshold
):
    """The report's chart, table and sentence and the UI's metadata value give no threshold
    when the rule's pick refuses every answerable item; the sentence says why ("none", or "not
    measured" when every threshold refuses them all)."""
    copy = tmp_path / "rag_eval.duckdb"
    shutil.copy(warehouse_path, copy)
    run_id = runs[TONIGHT]["eval_run_id"]
    with duckdb.connect(str(copy)) as connection:
        [(answerable,)] = connection.execute(
            "SELECT count(*) FILTER (WHERE answerable) FROM generation_item_metrics "
            "WHERE eval_run_id = $run",
            {"run": run_id},
        ).fetchall()
        connection.execute(
            "UPDATE abstention_sweep SET answerable_refused = $n WHERE eval_run_id = $run"
            + ("" if every_threshold else " AND recommended"),
            {"n": answerable, "run": run_id},
        )
    with duckdb.connect(str(copy), read_only=True) as connection:
        data = report.load_report_data(connection, run_id)
    chosen = data["headline"]["recommended_threshold"]
    assert chosen["answerable_refused"] == answerable > 0
    assert data["recommended_threshold"] is None
    assert recommended_value(chosen) is None
    figure = charts.abstention_sweep_figure(
        pl.DataFrame(data["abstention_sweep"]),
        data["recommended_threshold"],
        unrecommended=report._unrecommended(data),
    )
    assert dashed_vertical_lines(figure) == []
    assert not any(re.match(r"Recommended( threshold| [0-9])", text) for text in texts(figure))
    said = "not measured (every threshold" if every_threshold else "none: every threshold"
    drawn = " ".join(" ".join(texts(figure)).split())
    assert f"Recommended evidence threshold: {said}" in drawn
    assert f"all {answerable} answerable items" in drawn
    page = report.report_html(data, report.render_charts(data))
    sweep = page.split("<h2>Abstention sweep</h2>")[1].split("<h2>")[0]
    assert f"Recommended evidence threshold: {said}" in sweep
    assert "<td>yes</td>" not in sweep.split("<details>")[1]


def test_the_metadata_threshold_is_none_when_the_pick_refuses_every_answerable_item():
    """``generation_metrics``' metadata: the pick's row as the warehouse query reads it, and no
    value when it refuses every answerable item (an assistant that always answers with one
    score: only the threshold above it keeps the unanswerable items unanswered)."""
    from rag_eval_pipeline.defs.metadata import sweep_metadata
    from rag_eval_pipeline.lib.metrics.generation import (
        GenerationTables,
        abstention_sweep,
        sweep_thresholds,
    )

    answerable = [True] * 12 + [False] * 5
    for best, expected in (([1.0] * 17, None), ([2.0] * 12 + [1.0] * 5, 2.0)):
        frame = pl.DataFrame({"answerable": answerable, "best_score": best})
        sweep, picked = abstention_sweep(frame, sweep_thresholds(best))
        tables = GenerationTables(frame, pl.DataFrame(), pl.DataFrame(), sweep, picked)
        row = tables.recommendation()
        assert row == _recommended_row(answerable, best, [False] * 17)
        assert recommended_value(row) == expected
        # What the asset page shows: no value for the degenerate pick, and the lines saying why.
        shown = sweep_metadata(row)
        assert shown["recommended_evidence_threshold"] == expected
        said = shown["abstention_sweep"].value
        if expected is None:
            assert said.startswith("```\nAbstention sweep: recommended evidence threshold: none")
        else:
            assert "recommended evidence threshold 2.000 (0 of 5 unanswerable answered" in said


PARTIAL_SWEEP_SCHEMA = {"threshold": pl.Float64, "unanswerable_answered": pl.Int64}
EMPTY_HISTORY = pl.DataFrame(
    schema={name: pl.String for name in charts.TREND_COLUMNS if name != "value"}
    | {"value": pl.Float64}
)


@pytest.mark.parametrize(
    "draw",
    [
        pytest.param(
            lambda: charts.abstention_sweep_figure(pl.DataFrame(schema=report.SWEEP_SCHEMA), None),
            id="sweep-without-rows",
        ),
        pytest.param(
            lambda: charts.abstention_sweep_figure(pl.DataFrame(schema=PARTIAL_SWEEP_SCHEMA), 1.0),
            id="sweep-missing-a-column",
        ),
        pytest.param(
            lambda: charts.abstention_sweep_figure(
                pl.DataFrame(
                    {"threshold": [None, 1.0], "unanswerable_answered": [3, None]}
                ).with_columns(answerable_refused=pl.lit(None)),
                None,
            ),
            id="sweep-only-incomplete-rows",
        ),
        pytest.param(lambda: charts.metric_trend_figure(EMPTY_HISTORY, "Success@5"), id="trend"),
        pytest.param(
            lambda: charts.metric_trend_figure(
                pl.DataFrame(
                    {
                        "partition_date": ["2026-10-15"],
                        "eval_run_id": ["r"],
                        "corpus_digest": ["d"],
                        "metric": ["nDCG@10"],
                        "value": [0.5],
                        "ci_low": [0.4],
                        "ci_high": [0.6],
                    }
                ),
                "Success@5",
            ),
            id="trend-other-metric-only",
        ),
        pytest.param(
            lambda: charts.stratum_bars_figure(pl.DataFrame(schema=report.STRATUM_SCHEMA)),
            id="strata-without-rows",
        ),
        pytest.param(
            lambda: charts.stratum_bars_figure(
                pl.DataFrame(
                    {
                        "scope_value": ["near_miss"],
                        "metric": ["faithfulness"],
                        "value": [1.0],
                        "ci_low": [None],
                        "ci_high": [None],
                        "n": [3],
                    }
                )
            ),
            id="strata-other-metrics-only",
        ),
    ],
)
def test_unusable_input_gives_a_chart_that_says_no_data(draw):
    figure = draw()
    assert charts.NO_DATA in texts(figure)
    png = charts.figure_png(figure)
    with Image.open(io.BytesIO(png)) as image:
        assert image.size == (charts.WIDTH_PX, charts.HEIGHT_PX)


def test_a_chart_with_data_does_not_say_no_data(report_data):
    figure = charts.metric_trend_figure(trend_history(report_data), "Success@5")
    assert charts.NO_DATA not in texts(figure)


def test_the_png_entry_points_survive_empty_input():
    for png in (
        charts.abstention_sweep_png(pl.DataFrame(schema=report.SWEEP_SCHEMA), None),
        charts.metric_trend_png(EMPTY_HISTORY, "nDCG@10"),
        charts.stratum_bars_png(pl.DataFrame(schema=report.STRATUM_SCHEMA)),
    ):
        assert png.startswith(charts.PNG_SIGNATURE)


def test_data_uri_and_markdown_image_round_trip(rendered):
    png = rendered["strata"]
    uri = charts.png_data_uri(png)
    assert uri.startswith("data:image/png;base64,")
    assert base64.b64decode(uri.split(",", 1)[1]) == png
    assert charts.markdown_image("a [b] c", png) == f"![a \\[b\\] c]({uri})"
    with pytest.raises(ValueError, match="PNG signature"):
        charts.png_data_uri(b"GIF89a")


def test_the_html_report_shows_the_gates_and_the_calls_as_the_summary_does(report_data, rendered):
    """The page lists every release gate checked on the run (gate_results), the calls to the
    system under test, and says where the comparison with the baseline is."""
    page = report.report_html(report_data, rendered)
    gates = report_data["headline"]["gates"]
    assert gates, "the bundled gates are checked on every night"
    passed = sum(1 for gate in gates if gate["passed"])
    assert f"Release gates (release_gates.yaml, version 1): {passed} passed" in page
    section = page[page.index("Release gates (") :]
    for gate in gates:
        assert f"<td>{gate['gate']}</td><td>{gate['status']}</td>" in section
    # A gate that was not measured (not assessed) shows no figure, not "n/a" or a number.
    unmeasured = {**gates[0], "status": "judge not calibrated", "passed": False, "observed": None}
    quiet = {**report_data, "headline": {**report_data["headline"], "gates": [unmeasured]}}
    section = report.report_html(quiet, rendered).split("Release gates (", 1)[1]
    assert f"<td>{unmeasured['gate']}</td><td>judge not calibrated</td><td>not measured</td>" in (
        section
    )
    assert "<td>system errors</td>" in page
    assert "Comparison with the baseline" in page and "rag-eval compare" in page
    assert "regression gate (no_significant_regression), which is not among the" in page
    # Without gate results recorded (an earlier warehouse), no gates section is claimed.
    without = {**report_data, "headline": {**report_data["headline"], "gates": None}}
    assert "Release gates (" not in report.report_html(without, rendered)


def test_the_summary_of_a_run_that_did_not_finish_says_so_for_every_missing_figure():
    """A failed run has no figures: each is "not measured" because the run did not finish, not
    for a reason about the golden set (no items of a stratum, no reference answers), and its
    gates were never checked."""
    from rag_eval_pipeline.lib.reporting.summary import format_summary

    headline = {
        "eval_run_id": "2026-10-15-000000000000",
        "partition_date": "2026-10-15",
        "status": "failed",
        "status_reason": "the process that ran it (pid 1 on host) is gone",
        "suite": "golden",
        "snapshot_id": "2026-10-01",
        "corpus_digest": "c" * 64,
        "golden_set": "golden",
        "golden_digest": "g" * 64,
        "system_id": "reference-bm25",
        "system_config_digest": "s" * 64,
        "judge_id": "deterministic",
        "retrieval": [],
        "generation": [],
        "no_answer": [],
        "operations": [],
        "sufficiency_correctness": [],
        "gates": [],
    }
    text = format_summary(headline)
    assert "INCOMPLETE: this run is failed: the process that ran it" in text
    assert "  Success@5                    not measured (the run did not finish)" in text
    assert "  answer_correct_rate          not measured (the run did not finish)" in text
    assert "  out_of_scope:                not measured (the run did not finish)" in text
    # Nor is a section left as a bare heading.
    assert (
        "Context sufficient x answer correct (answerable items):\n"
        "  not measured (the run did not finish)"
    ) in text
    assert "Release gates: none recorded for this run (not checked: the run did not finish)" in text
    assert "no items of this stratum" not in text and "no must_mention" not in text
    complete = format_summary({**headline, "status": "complete"})
    assert "out_of_scope:                not measured (no items of this stratum" in complete


def test_the_json_headline_lists_every_figure_the_summary_shows(warehouse_path, runs, tmp_path):
    """A figure the run could not compute is in the headline as data (``rag-eval summary
    --json``) with no value and the reason the text gives; the measured ones keep their keys."""
    from rag_eval_pipeline.lib.reporting.summary import format_summary, headline_from_tables

    copy = tmp_path / "rag_eval.duckdb"
    shutil.copy(warehouse_path, copy)
    run_id = runs[TONIGHT]["eval_run_id"]
    judged = ["faithfulness", "contradicted_claim_rate", "citation_support"]
    with duckdb.connect(str(copy)) as connection:
        connection.execute(
            "DELETE FROM generation_metrics WHERE eval_run_id = $run "
            "AND (list_contains($judged, metric) OR scope_value = 'near_miss')",
            {"run": run_id, "judged": judged},
        )
        headline = json.loads(json.dumps(headline_from_tables(connection, run_id), default=str))
    generation = {row["metric"]: row for row in headline["generation"]}
    assert generation["faithfulness"]["value"] is None
    assert generation["faithfulness"]["not_measured"] == "no judged claims"
    assert generation["citation_support"]["not_measured"] == "no judged citations"
    measured = generation["citation_validity"]
    assert {"scope", "scope_value", "metric", "value", "ci_low", "ci_high", "n"} <= set(measured)
    assert "not_measured" not in measured and measured["value"] is not None
    assert {
        "stratum": "near_miss",
        "not_measured": "no items of this stratum in the golden set",
    } in (headline["no_answer_not_measured"])
    text = format_summary(headline)
    for metric in judged:
        row = generation[metric]
        assert f"  {metric:<28} not measured ({row['not_measured']})" in text
    assert "  near_miss:                   not measured (no items of this stratum" in text


def test_each_n_says_what_it_counts(report_data, rendered):
    """A claim rate's n counts claims, the other figures' items, in the summary and the page."""
    from rag_eval_pipeline.lib.reporting.summary import format_summary

    generation = {row["metric"]: row for row in report_data["headline"]["generation"]}
    claims, items = generation["contradicted_claim_rate"]["n"], generation["faithfulness"]["n"]
    text = format_summary(report_data["headline"])
    assert re.search(rf"^  contradicted_claim_rate .*\(n={claims} claims\)$", text, re.MULTILINE)
    assert re.search(rf"^  faithfulness .*\(n={items} items\)$", text, re.MULTILINE)
    assert re.search(r"^  Success@5 .*\(n=\d+ items\)$", text, re.MULTILINE)
    section = report.report_html(report_data, rendered).split("Generation (answerable items)")[1]
    assert f"<td>{claims} claims</td>" in section and f"<td>{items} items</td>" in section


def test_the_html_report_says_what_is_not_measured_left_out_and_drifted(report_data, rendered):
    """Figures without a value and strata without items read "not measured" and why, the items
    whose call failed are named, and the drifted golden items are listed, all escaped."""
    generation = [
        row
        for row in report_data["generation"]
        if not (row["scope_value"] == "answerable" and row["metric"] == "faithfulness")
    ]
    headline = {
        **report_data["headline"],
        "no_answer": [
            row for row in report_data["headline"]["no_answer"] if row["scope_value"] != "near_miss"
        ],
        "system_error_items": [
            {"item_id": "m03", "cause": "timeout"},
            {"item_id": "m05", "cause": "timeout"},
        ],
        "golden_drift": {
            "drifted": 4,
            "first": [{"item_id": "pa-001", "drift_reason": "DOC<1>@v2#s2 is withdrawn"}],
        },
    }
    page = report.report_html(
        {**report_data, "generation": generation, "headline": headline}, rendered
    )
    generation_section = page.split("Generation (answerable items)")[1].split("<h2>")[0]
    assert '<td>faithfulness</td><td class="wrap">not measured (no judged claims)</td>' in (
        generation_section
    )
    no_answer = page.partition("<h2>No-answer questions (")[2].split("<h2>")[0]
    assert "<td>near_miss</td><td>not measured (no items of this stratum in the golden set)" in (
        no_answer
    )
    assert "left out of every figure above: m03 (timeout), m05 (timeout)" in page
    drift = page.split("<h2>Golden drift</h2>")[1].split("<h2>")[0]
    assert "4 item(s) whose answering passage is not current, or changed" in drift
    assert "<td>pa-001</td>" in drift and "DOC&lt;1&gt;@v2#s2 is withdrawn" in drift
    assert "and 3 more" in drift
    assert "<h2>Golden drift</h2>" not in report.report_html(
        {**report_data, "headline": {**headline, "golden_drift": None}}, rendered
    )
