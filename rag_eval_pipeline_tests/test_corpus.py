"""Snapshot parsing and the content digest."""

import datetime as dt
import json
import shutil
from pathlib import Path

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
    # A frozen file is a read-only hard link to its stored copy: edit a new file in its place.
    text = document.read_text().replace("status: current", "status: withdrawn")
    document.unlink()
    document.write_text(text)
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
    with pytest.raises(CorpusError) as refused:
        choose_snapshot(tmp_path, dt.date(2026, 9, 30))
    # It names what is there: a later snapshot, or folders none of which is dated.
    assert str(refused.value) == (
        f"{tmp_path}: no snapshot dated on or before 2026-09-30; the earliest is 2026-10-01"
    )
    undated = tmp_path / "undated"
    for name in ("2026-9-15", "notes", ".snapshot_store"):
        (undated / name).mkdir(parents=True)
    with pytest.raises(CorpusError) as refused:
        choose_snapshot(undated, dt.date(2026, 9, 30))
    assert str(refused.value) == (
        f"{undated}: no snapshot dated on or before 2026-09-30; no folder is named YYYY-MM-DD "
        "(folders: 2026-9-15, notes)"
    )


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


# -- bad input: one clear error naming the file, before anything is written --------------------


def test_a_document_that_is_not_utf8_names_the_file_and_the_byte(library):
    folder = library / "2026-10-01"
    document = folder / "documents" / "CLEAN-LOG-001@v1.md"
    data = document.read_bytes()
    offset = data.index(b"Cleaning")
    document.write_bytes(data[:offset] + b"\xff\xfe" + data[offset:])
    manifest_before = (folder / "manifest.json").read_bytes()
    with pytest.raises(CorpusError) as raised:
        freeze_snapshot(folder)
    assert str(raised.value) == (
        f"{document}: not UTF-8 text (invalid start byte at byte offset {offset})"
    )
    with pytest.raises(CorpusError, match=r"CLEAN-LOG-001@v1\.md: not UTF-8 text"):
        load_snapshot(folder)
    # Nothing was written: the manifest is untouched and no store was created.
    assert (folder / "manifest.json").read_bytes() == manifest_before
    assert not (library / ".snapshot_store").exists()


def test_rag_eval_freeze_warns_when_a_frozen_folder_gets_another_digest(library, capsys):
    """Freezing a folder again after its content changed replaces its digest: the runs measured
    on the old one no longer match the folder, so the freeze says so (a new dated folder is the
    way to change a library); freezing it again unchanged says nothing."""
    from rag_eval_pipeline.cli import main

    folder = library / "2026-10-01"
    before = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))["corpus_digest"]
    assert main(["freeze", str(folder)]) == 0
    assert "warning" not in capsys.readouterr().err
    document = folder / "documents" / "STORE-FRIDGE-001@v1.md"
    text = document.read_text(encoding="utf-8")
    document.unlink()
    document.write_text(text.replace("STR-04", "STR-05"), encoding="utf-8")
    assert main(["freeze", str(folder)]) == 0
    after = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))["corpus_digest"]
    assert after != before
    assert (
        f"warning: 2026-10-01 was frozen before with corpus digest {before[:12]}; it is now "
        f"{after[:12]}: runs measured on {before[:12]} no longer match this folder"
    ) in capsys.readouterr().err


def test_rag_eval_freeze_of_a_copied_folder_does_not_warn_of_a_changed_digest(library, capsys):
    """A new dated folder begun as a copy of the last one carries that one's manifest.json: the
    new folder was never frozen, so its freeze notes the copied manifest it replaced and does
    not warn that runs measured on it moved."""
    import shutil

    from rag_eval_pipeline.cli import main

    copy = library / "2026-12-01"
    shutil.copytree(library / "2026-10-01", copy)
    for path in (copy / "documents").iterdir():
        path.chmod(0o644)
    document = copy / "documents" / "STORE-FRIDGE-001@v1.md"
    text = document.read_text(encoding="utf-8")
    document.unlink()
    document.write_text(text.replace("STR-04", "STR-05"), encoding="utf-8")
    assert main(["freeze", str(copy)]) == 0
    err = capsys.readouterr().err
    assert "was frozen before" not in err
    assert "note: the manifest.json copied from 2026-10-01 was replaced by this folder's own" in err
    manifest = json.loads((copy / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["snapshot_id"] == "2026-12-01"


def test_rag_eval_freeze_reports_a_bad_document_in_one_line(library, capsys):
    from rag_eval_pipeline.cli import main

    document = library / "2026-10-01" / "documents" / "XFER-FAX-001@v1.md"
    document.write_bytes(document.read_bytes() + b"\n\x80 stray byte\n")
    assert main(["freeze", str(library / "2026-10-01")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"error: {document}: not UTF-8 text (invalid start byte")
    assert "Traceback" not in captured.err


def test_a_symbolic_link_outside_the_snapshot_is_refused(library, tmp_path):
    folder = library / "2026-10-01"
    outside = tmp_path / "elsewhere.md"
    shutil.copyfile(folder / "documents" / "CLEAN-LOG-001@v1.md", outside)
    (folder / "documents" / "CLEAN-LOG-001@v1.md").unlink()
    link = folder / "documents" / "CLEAN-LOG-001@v1.md"
    link.symlink_to(outside)
    with pytest.raises(CorpusError) as raised:
        freeze_snapshot(folder)
    message = str(raised.value)
    assert message.startswith(f"{link}: symbolic link to {outside.resolve()}, outside the snapshot")
    with pytest.raises(CorpusError, match="outside the snapshot"):
        load_snapshot(folder)
    assert not (library / ".snapshot_store").exists()


def test_a_symbolic_link_inside_the_snapshot_is_read_through(library):
    folder = library / "2026-10-01"
    kept = folder / "originals"
    kept.mkdir()
    document = folder / "documents" / "CLEAN-LOG-001@v1.md"
    shutil.move(document, kept / document.name)
    document.symlink_to(kept / document.name)
    manifest = freeze_snapshot(folder)
    assert document.is_symlink()
    assert load_snapshot(folder).corpus_digest == manifest["corpus_digest"]


@pytest.mark.parametrize(
    ("documents", "message"),
    [
        ([], "manifest key 'documents' must map each document version to its digests, got a list"),
        (
            "all",
            "manifest key 'documents' must map each document version to its digests, got a str",
        ),
        ({"X@v1": "abc"}, "manifest key 'documents.X@v1' must be an object with a 'digest'"),
    ],
)
def test_a_manifest_with_malformed_documents_names_the_manifest_and_key(
    library, documents, message
):
    path = library / "2026-10-01" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["documents"] = documents
    path.write_text(json.dumps(manifest))
    with pytest.raises(CorpusError) as raised:
        load_snapshot(library / "2026-10-01")
    assert str(raised.value) == f"{path}: {message}"


def test_a_manifest_that_is_not_an_object_names_the_manifest(library):
    path = library / "2026-10-01" / "manifest.json"
    path.write_text("[1, 2]")
    with pytest.raises(
        CorpusError, match=r"manifest\.json: a manifest is a JSON object, got a list"
    ):
        load_snapshot(library / "2026-10-01")


def test_a_dated_folder_without_a_manifest_says_whether_it_is_a_snapshot_at_all(library):
    """Documents not frozen yet: freeze them. A dated folder holding neither: not a snapshot,
    and freezing it would not help until documents/ is there."""
    unfrozen = library / "2026-10-01"
    (unfrozen / "manifest.json").unlink()
    with pytest.raises(CorpusError, match=r"2026-10-01: no manifest\.json: freeze it first"):
        load_snapshot(unfrozen)
    hollow = library / "2026-12-24"
    hollow.mkdir()
    with pytest.raises(CorpusError) as raised:
        load_snapshot(choose_snapshot(library, dt.date(2026, 12, 25)))
    assert str(raised.value) == (
        f"{hollow}: neither manifest.json nor documents/: not a snapshot (put its markdown files "
        "in documents/, then 'rag-eval freeze' it)"
    )


def test_a_renamed_frozen_snapshot_is_refused_until_frozen_again(library):
    """A night takes a snapshot by its folder's name (its date); a folder renamed after its
    freeze would report another snapshot on that night. Refused, saying how to fix it."""
    renamed = library / "2026-10-03"
    (library / "2026-10-01").rename(renamed)
    with pytest.raises(CorpusError) as raised:
        load_snapshot(renamed)
    assert str(raised.value) == (
        f"{renamed / 'manifest.json'}: frozen as snapshot '2026-10-01', but the folder is "
        f"'2026-10-03': a snapshot copied or renamed from another is frozen under its own "
        f"name before a night uses it (rag-eval freeze {renamed})"
    )
    freeze_snapshot(renamed)
    assert load_snapshot(renamed).snapshot_id == "2026-10-03"


def test_a_byte_order_mark_at_the_start_of_a_document_is_ignored(library):
    folder = library / "2026-10-01"
    digest = load_snapshot(folder).corpus_digest
    document = folder / "documents" / "CLEAN-LOG-001@v1.md"
    document.write_bytes(b"\xef\xbb\xbf" + document.read_bytes())
    assert load_snapshot(folder).corpus_digest == digest


def test_a_file_read_in_short_pieces_is_read_whole(library, monkeypatch):
    from rag_eval_pipeline.lib.inputs import corpus

    document = library / "2026-10-01" / "documents" / "CLEAN-LOG-001@v1.md"
    expected = document.read_bytes()
    read = corpus.os.read
    monkeypatch.setattr(corpus.os, "read", lambda descriptor, size: read(descriptor, min(size, 7)))
    data, status = corpus._read_whole(document)
    assert data == expected and status.st_size == len(expected)
    (library / "empty.md").write_bytes(b"")
    assert corpus._read_whole(library / "empty.md")[0] == b""


def test_the_documents_table_is_each_files_front_matter_whatever_its_first_section_says(tmp_path):
    """The documents table is decoded from the head of each document's first canonical line (the
    fields before its text): a first section titled with quotes, backslashes, ``,"text":`` and
    non-ASCII, and a document of one section, still give every field as the front matter says."""
    folder = tmp_path / "2026-10-01"
    (folder / "documents").mkdir(parents=True)
    (folder / "documents" / "Q-1@v2.md").write_text(
        '---\ndoc_id: Q-1\ntitle: Ünïcode "quoted" title\nversion: 2\neffective_date: '
        "2026-03-04\nstatus: superseded\nsuperseded_by: Q-1@v3\nlanguage: de\nowner: Ops\n---\n"
        '## A "tricky",\\"text\\":"x" ,"text": title — ü\nbody one\n\n## Two\nbody two\n',
        encoding="utf-8",
    )
    (folder / "documents" / "Q-1@v3.md").write_text(
        "---\ndoc_id: Q-1\ntitle: Plain\nversion: 3\neffective_date: 2026-05-06\n"
        "status: current\nlanguage: en\n---\n## Only\nthe one section\n",
        encoding="utf-8",
    )
    documents = load_snapshot(folder, verify=False).document_table.sort("doc_version_id")
    assert documents.select(
        "doc_version_id",
        "doc_id",
        "version",
        "title",
        "status",
        "superseded_by",
        "effective_date",
        "language",
        "owner",
    ).rows() == [
        (
            "Q-1@v2",
            "Q-1",
            2,
            'Ünïcode "quoted" title',
            "superseded",
            "Q-1@v3",
            dt.date(2026, 3, 4),
            "de",
            "Ops",
        ),
        ("Q-1@v3", "Q-1", 3, "Plain", "current", None, dt.date(2026, 5, 6), "en", None),
    ]


def test_a_version_too_large_for_the_tables_names_the_file(tmp_path):
    folder = tmp_path / "2026-10-01"
    (folder / "documents").mkdir(parents=True)
    version = 2**63
    (folder / "documents" / f"H-1@v{version}.md").write_text(
        f"---\ndoc_id: H-1\ntitle: T\nversion: {version}\neffective_date: 2026-01-02\n"
        "status: current\nlanguage: en\n---\n## S\ntext\n",
        encoding="utf-8",
    )
    with pytest.raises(CorpusError, match=rf"H-1@v{version}\.md:4: version {version} is too large"):
        load_snapshot(folder, verify=False)


def test_rag_eval_freeze_reports_an_impossible_date_naming_the_file_and_line(library, capsys):
    """A date YAML reads as a timestamp that no calendar has (month 13) is an error naming the
    file, the line and the value, not a traceback; nothing is written."""
    from rag_eval_pipeline.cli import main

    document = library / "2026-10-01" / "documents" / "XFER-FAX-001@v1.md"
    text = document.read_text(encoding="utf-8")
    lines = text.split("\n")
    number = next(i for i, line in enumerate(lines, 1) if line.startswith("effective_date:"))
    document.write_text(
        text.replace(lines[number - 1], "effective_date: 2026-13-45"), encoding="utf-8"
    )
    manifest = (library / "2026-10-01" / "manifest.json").read_bytes()
    assert main(["freeze", str(library / "2026-10-01")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"error: {document}:{number}: front matter has an invalid value "
        "(effective_date: 2026-13-45): month must be in 1..12"
    )
    assert "Traceback" not in err
    assert (library / "2026-10-01" / "manifest.json").read_bytes() == manifest


ONE_DOCUMENT = (
    "---\ndoc_id: H-1\ntitle: T\nversion: 1\neffective_date: 2026-01-02\n"
    "status: current\nlanguage: en\n---\n## S\ntext\n"
)


def one_document_folder(tmp_path: Path, old: str, new: str) -> Path:
    """A snapshot folder holding ``ONE_DOCUMENT`` with ``old`` replaced by ``new``."""
    folder = tmp_path / "2026-10-01"
    (folder / "documents").mkdir(parents=True)
    (folder / "documents" / "H-1@v1.md").write_text(
        ONE_DOCUMENT.replace(old, new), encoding="utf-8"
    )
    return folder


@pytest.mark.parametrize(
    ("old", "new", "line", "message"),
    [
        ("status: current", "status: active", 6, "status 'active' is not one of"),
        ("version: 1", "version: one", 4, "version must be a positive integer, got 'one'"),
        ("effective_date: 2026-01-02", "effective_date: '2026-1-2'", 5, "is not YYYY-MM-DD"),
        ("doc_id: H-1", "doc_id: H 1", 2, "has characters outside"),
        ("language: en\n", "", 1, "missing 'language' in front matter"),
    ],
)
def test_a_bad_front_matter_value_names_the_line_of_its_key(tmp_path, old, new, line, message):
    folder = one_document_folder(tmp_path, old, new)
    with pytest.raises(CorpusError, match=rf"H-1@v1\.md:{line}: .*{message}"):
        load_snapshot(folder, verify=False)


@pytest.mark.parametrize(
    ("old", "new", "line", "message"),
    [
        (
            "title: T",
            "title: Ward: fridge: temp",
            3,
            r"mapping values are not allowed here \(line 3, column 12\)$",
        ),
        (
            "status: current",
            "status: [current",
            6,
            r"while parsing a flow sequence \(line 6, column 9\): expected ',' or '\]', "
            r"but got ':' \(line 7, column 9\)$",
        ),
        (
            "title: T\nversion: 1",
            'title: "T\u2028x"\nversion: [1',
            4,
            r"while parsing a flow sequence \(line 4, column 10\): expected ',' or '\]', "
            r"but got ':' \(line 5, column 15\)$",
        ),
        (
            "title: T",
            'title: "T',
            3,
            r"while scanning a quoted scalar \(line 3, column 8\): found unexpected end of "
            r"stream \(line 7, column 13\)$",
        ),
    ],
)
def test_front_matter_that_is_not_yaml_names_the_files_line(tmp_path, old, new, line, message):
    """The YAML parser's places are the file's (the front matter starts on line 2), and the
    line named is where the construct it was reading began."""
    folder = one_document_folder(tmp_path, old, new)
    with pytest.raises(CorpusError, match=rf"H-1@v1\.md:{line}: front matter is not valid YAML: "):
        load_snapshot(folder, verify=False)
    with pytest.raises(CorpusError, match=message):
        load_snapshot(folder, verify=False)


def test_superseded_by_on_itself_or_on_a_current_version_and_an_undated_folder_warn(tmp_path):
    """A version superseded by itself, a current version naming a successor, and a folder a
    suite with snapshot: auto never takes (its name is no date): frozen, a warning each."""
    folder = tmp_path / "december"
    (folder / "documents").mkdir(parents=True)
    head = "---\ntitle: T\neffective_date: 2026-01-02\nlanguage: en\nversion: 1\n"
    (folder / "documents" / "S-1@v1.md").write_text(
        head + "doc_id: S-1\nstatus: superseded\nsuperseded_by: S-1@v1\n---\n## S\nx\n"
    )
    (folder / "documents" / "C-1@v1.md").write_text(
        head + "doc_id: C-1\nstatus: current\nsuperseded_by: S-1@v1\n---\n## S\ny\n"
    )
    with pytest.warns(UserWarning) as caught:
        freeze_snapshot(folder)
    assert {str(w.message) for w in caught} == {
        "1 document version(s) are current yet name a superseded_by: C-1@v1 -> S-1@v1",
        "1 document version(s) name themselves as superseded_by: S-1@v1 -> S-1@v1",
        f"{folder}: the folder's name is no date (YYYY-MM-DD): a suite with snapshot: auto "
        "never takes it; name it for the day it stands for, or name it in the suite's snapshot:",
    }


def test_a_version_not_yet_in_force_and_a_language_name_are_warnings_of_the_freeze(tmp_path):
    """Front matter that parses but is likely a slip: a current version whose effective_date
    is after the snapshot's date, and a language written as a name, not a tag. Frozen, with a
    warning each naming the versions; the right values say nothing."""
    folder = tmp_path / "2026-10-01"
    (folder / "documents").mkdir(parents=True)

    def document(name: str, effective: str, language: str, status: str = "current") -> None:
        doc_id, version = name.split("@v")
        (folder / "documents" / f"{name}.md").write_text(
            f"---\ndoc_id: {doc_id}\ntitle: T\nversion: {version}\neffective_date: {effective}"
            f"\nstatus: {status}\nlanguage: {language}\n---\n## S\ntext\n",
            encoding="utf-8",
        )

    document("A-1@v1", "2026-10-01", "en")
    document("B-1@v1", "2026-10-02", "de-CH")
    document("C-1@v1", "2027-01-01", "en", status="withdrawn")
    document("D-1@v1", "2026-01-01", "english")
    with pytest.warns(UserWarning) as caught:
        freeze_snapshot(folder)
    messages = sorted(str(w.message) for w in caught)
    assert messages == [
        "1 current document version(s) take effect after the snapshot's date 2026-10-01: "
        "B-1@v1 (2026-10-02)",
        "1 document version(s) have a language that is no language tag (en, de-CH): "
        "D-1@v1 ('english')",
    ]


def test_a_superseded_by_naming_no_version_of_the_snapshot_is_a_warning_of_the_freeze(tmp_path):
    """A version superseded by one the snapshot does not hold (a typo, a successor not yet
    added) is frozen, with a warning naming both; a successor that exists says nothing."""
    folder = tmp_path / "2026-10-01"
    (folder / "documents").mkdir(parents=True)
    head = "---\ndoc_id: H-1\ntitle: T\neffective_date: 2026-01-02\nlanguage: en\n"
    (folder / "documents" / "H-1@v1.md").write_text(
        head + "version: 1\nstatus: superseded\nsuperseded_by: H-1@v2\n---\n## S\nold\n",
        encoding="utf-8",
    )
    (folder / "documents" / "H-1@v2.md").write_text(
        head + "version: 2\nstatus: superseded\nsuperseded_by: H-1@v7\n---\n## S\nnew\n",
        encoding="utf-8",
    )
    with pytest.warns(UserWarning) as caught:
        freeze_snapshot(folder)
    [message] = [str(w.message) for w in caught if "superseded_by" in str(w.message)]
    assert message == (
        "1 document version(s) name a superseded_by that is no document version of this "
        "snapshot: H-1@v2 -> H-1@v7"
    )
