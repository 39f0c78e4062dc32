"""Snapshot parsing and the content digest."""

import datetime as dt
import shutil

import polars as pl
import pytest

from rag_eval_pipeline.lib.inputs.corpus import (
    CorpusError,
    choose_snapshot,
    freeze_snapshot,
    load_snapshot,
    passage_id,
)
from rag_eval_pipeline.lib.inputs.golden import load_golden_set, validate_against_snapshot


def test_passages_carry_stable_versioned_ids(library):
    snapshot = load_snapshot(library / "2026-10-01")
    ids = snapshot.passages["passage_id"].to_list()
    assert ids == sorted(ids)
    assert "LAB-LABEL-001@v1#s2" in ids and "LAB-LABEL-001@v2#s2" in ids
    assert passage_id("SPEC-LABEL-004", 3, 2) == "SPEC-LABEL-004@v3#s2"
    status = dict(zip(snapshot.passages["passage_id"], snapshot.passages["status"], strict=True))
    assert status["LAB-LABEL-001@v1#s2"] == "superseded"
    assert status["XFER-FAX-001@v1#s1"] == "withdrawn"
    assert snapshot.document_count == 5 and snapshot.passages.height == 9


def test_digest_ignores_line_endings_file_order_and_mtime(library, tmp_path):
    original = load_snapshot(library / "2026-10-01").corpus_digest
    copy = tmp_path / "copy" / "2026-10-01"
    shutil.copytree(library / "2026-10-01", copy)
    for document in (copy / "documents").glob("*.md"):
        document.write_bytes(document.read_bytes().replace(b"\n", b"\r\n"))
    assert load_snapshot(copy).corpus_digest == original


def test_digest_changes_with_content_and_metadata(library):
    folder = library / "2026-10-01"
    before = freeze_snapshot(folder)
    document = folder / "documents" / "CLEAN-LOG-001@v1.md"
    document.write_text(document.read_text().replace("status: current", "status: withdrawn"))
    after = freeze_snapshot(folder)
    assert after["corpus_digest"] != before["corpus_digest"]
    changed = {
        key for key in before["documents"] if before["documents"][key] != after["documents"][key]
    }
    assert changed == {"CLEAN-LOG-001@v1"}


def test_choose_snapshot_takes_the_newest_on_or_before_the_night(tmp_path):
    for name in ("2026-10-01", "2026-11-01", "notes"):
        (tmp_path / name).mkdir()
    assert choose_snapshot(tmp_path, dt.date(2026, 10, 31)).name == "2026-10-01"
    assert choose_snapshot(tmp_path, dt.date(2026, 11, 1)).name == "2026-11-01"
    assert choose_snapshot(tmp_path, dt.date(2026, 11, 1), "2026-10-01").name == "2026-10-01"
    with pytest.raises(CorpusError, match="no snapshot dated on or before 2026-09-30"):
        choose_snapshot(tmp_path, dt.date(2026, 9, 30))


def test_drifted_items_are_flagged_on_a_later_snapshot(library):
    folder = library / "2026-10-01"
    later = library / "2026-11-01"
    shutil.copytree(folder, later)
    (later / "documents" / "STORE-FRIDGE-001@v1.md").write_text(
        (folder / "documents" / "STORE-FRIDGE-001@v1.md")
        .read_text()
        .replace("status: current", "status: superseded")
    )
    freeze_snapshot(later)
    snapshot = load_snapshot(later)
    golden = load_golden_set(library / "golden.jsonl")
    drift = validate_against_snapshot(
        golden,
        snapshot.passages,
        snapshot_id="2026-11-01",
        corpus_digest=snapshot.corpus_digest,
        source="golden.jsonl",
    )
    flagged = drift.filter(pl.col("drifted"))
    assert flagged["item_id"].to_list() == ["q2"]
    assert flagged["drift_reason"][0] == "STORE-FRIDGE-001@v1#s1 is superseded"
