"""Bad input fails with the file, the line or document and the problem, and writes nothing."""

import json
import shutil
from pathlib import Path

import duckdb
import pytest

from rag_eval_pipeline.lib.inputs.corpus import CorpusError, freeze_snapshot, load_snapshot
from rag_eval_pipeline.lib.inputs.golden import GoldenSetError, load_golden_set

from .conftest import materialize_night


def failure_message(result) -> str:
    failures = [event for event in result.all_events if event.is_step_failure]
    assert failures, "the run was expected to fail"
    error = failures[0].event_specific_data.error
    return "".join(part.message for part in (error, error.cause) if part is not None)


def table_count(path: Path, table: str) -> int:
    if not path.exists():
        return 0
    with duckdb.connect(str(path), read_only=True) as connection:
        return connection.sql(f"SELECT count(*) FROM {table}").fetchall()[0][0]


def replace_line(path: Path, number: int, text: str) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    lines[number - 1] = text
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_malformed_golden_line_names_file_and_line(library, tmp_path):
    golden = library / "golden.jsonl"
    replace_line(golden, 3, '{"id": "q3", "question": "broken"')
    with pytest.raises(GoldenSetError, match=r"golden\.jsonl:3: malformed JSON"):
        load_golden_set(golden)
    warehouse = tmp_path / "w.duckdb"
    result = materialize_night(library, warehouse)
    assert not result.success
    assert "golden.jsonl:3: malformed JSON" in failure_message(result)
    assert table_count(warehouse, "golden_items") == 0
    assert table_count(warehouse, "eval_runs") == 0


def test_golden_item_with_bad_grade_names_line(library):
    golden = library / "golden.jsonl"
    item = json.loads(golden.read_text().splitlines()[1])
    item["gold"][0]["grade"] = "high"
    replace_line(golden, 2, json.dumps(item))
    with pytest.raises(GoldenSetError, match=r"golden\.jsonl:2: item 'q2' gold .* grade 'high'"):
        load_golden_set(golden)


def test_a_no_answer_item_with_an_answering_gold_passage_names_the_line(library):
    """A no-answer item whose gold holds a passage of grade 2 or 3 contradicts itself (it would
    be scored as refused-correctly while the library answers it): refused, naming the line."""
    golden = library / "golden.jsonl"
    lines = golden.read_text().splitlines()
    number, item = next(
        (n, json.loads(line))
        for n, line in enumerate(lines, 1)
        if json.loads(line)["stratum"] == "out_of_scope"
    )
    item["gold"] = [{"passage_id": "STORE-FRIDGE-001@v1#s1", "grade": 3}]
    replace_line(golden, number, json.dumps(item))
    with pytest.raises(
        GoldenSetError,
        match=rf"golden\.jsonl:{number}: no-answer item '{item['id']}' \(stratum out_of_scope\) "
        r"has gold passage 'STORE-FRIDGE-001@v1#s1' at grade 3",
    ):
        load_golden_set(golden)


def test_unknown_gold_passage_id_names_line_and_id(library, tmp_path):
    golden = library / "golden.jsonl"
    item = json.loads(golden.read_text().splitlines()[1])
    item["gold"][0]["passage_id"] = "STORE-FRIDGE-001@v9#s1"
    replace_line(golden, 2, json.dumps(item))
    warehouse = tmp_path / "w.duckdb"
    result = materialize_night(library, warehouse)
    assert not result.success
    message = failure_message(result)
    assert "golden.jsonl:2: item 'q2' names gold passage 'STORE-FRIDGE-001@v9#s1'" in message
    assert "not in snapshot 2026-10-01" in message
    assert table_count(warehouse, "golden_items") == 0
    assert table_count(warehouse, "golden_gold") == 0


@pytest.mark.parametrize("label", ["2026-12-02", "yesterday"])
def test_an_item_labelled_against_no_snapshot_names_line_and_label(library, tmp_path, label):
    """A ``labelled_against`` naming no snapshot folder (nor a frozen digest) would leave the
    item's gold ids checked against nothing, so a typo in one (here a section that does not
    exist) would pass as a retrieval miss: the night fails naming the line and the label."""
    golden = library / "golden.jsonl"
    item = json.loads(golden.read_text().splitlines()[1])
    item["gold"][0]["passage_id"] = "STORE-FRIDGE-001@v2#s9"
    item["labelled_against"] = label
    replace_line(golden, 2, json.dumps(item))
    warehouse = tmp_path / "w.duckdb"
    result = materialize_night(library, warehouse)
    assert not result.success
    message = failure_message(result)
    assert f"golden.jsonl:2: item 'q2' is labelled against '{label}', which names no snapshot" in (
        message
    )
    assert "snapshot folders: 2026-10-01;" in message
    assert table_count(warehouse, "golden_items") == 0


def test_an_item_labelled_against_an_earlier_snapshot_or_its_digest_is_accepted(library, tmp_path):
    """The labels a golden set may carry: a snapshot folder's name, or a frozen corpus digest
    (here of an earlier snapshot, a copy with one section edited)."""
    earlier = library / "2026-09-01"
    shutil.copytree(library / "2026-10-01" / "documents", earlier / "documents")
    edited = earlier / "documents" / "STORE-FRIDGE-001@v1.md"
    edited.write_text(edited.read_text(encoding="utf-8") + "\nOne more line.\n", encoding="utf-8")
    digest = freeze_snapshot(earlier)["corpus_digest"]
    golden = library / "golden.jsonl"
    lines = golden.read_text().splitlines()
    for number, label in ((2, "2026-09-01"), (3, digest)):
        item = json.loads(lines[number - 1])
        item["labelled_against"] = label
        replace_line(golden, number, json.dumps(item))
    assert materialize_night(library, tmp_path / "w.duckdb").success


def test_snapshot_that_no_longer_matches_its_manifest(library, tmp_path):
    document = library / "2026-10-01" / "documents" / "STORE-FRIDGE-001@v1.md"
    document.write_text(document.read_text().replace("8 °C", "10 °C"), encoding="utf-8")
    with pytest.raises(CorpusError) as raised:
        load_snapshot(library / "2026-10-01")
    message = str(raised.value)
    assert "manifest.json" in message
    assert "no longer match the manifest digest" in message
    assert "changed: STORE-FRIDGE-001@v1" in message
    warehouse = tmp_path / "w.duckdb"
    result = materialize_night(library, warehouse)
    assert not result.success
    assert "changed: STORE-FRIDGE-001@v1" in failure_message(result)
    assert table_count(warehouse, "corpus_passages") == 0
    assert table_count(warehouse, "corpus_snapshots") == 0


def test_document_without_a_version_names_the_file(library, tmp_path):
    document = library / "2026-10-01" / "documents" / "CLEAN-LOG-001@v1.md"
    document.write_text(document.read_text().replace("version: 1\n", ""), encoding="utf-8")
    with pytest.raises(CorpusError, match=r"CLEAN-LOG-001@v1\.md:1: document without a version"):
        load_snapshot(library / "2026-10-01", verify=False)
    warehouse = tmp_path / "w.duckdb"
    result = materialize_night(library, warehouse)
    assert not result.success
    assert "document without a version" in failure_message(result)
    assert table_count(warehouse, "corpus_passages") == 0


def test_text_before_first_section_names_the_line(library):
    document = library / "2026-10-01" / "documents" / "CLEAN-LOG-001@v1.md"
    text = document.read_text().replace("---\n## Cleaning", "---\nstray words\n## Cleaning")
    document.write_text(text, encoding="utf-8")
    with pytest.raises(CorpusError, match=r"CLEAN-LOG-001@v1\.md:10: text before the first"):
        load_snapshot(library / "2026-10-01", verify=False)
