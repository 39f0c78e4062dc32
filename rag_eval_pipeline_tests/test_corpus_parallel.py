"""Parsing many documents on several cores gives what parsing them one by one gives.

``parse_rows`` and ``read_and_parse`` hand chunks of files to worker processes and do the rest
themselves. Here the chunks are made tiny and a worker is always started (``_parse_workers``), so
the bundled 50-document snapshot goes through the workers: the rows, the manifest and the digest
are the serial ones (also with Windows line endings, a byte order mark and non-ASCII text), a bad
document parsed in a worker fails naming its file and line, every bad file is reported in file
order, a worker that dies leaves its chunks to the calling process, and one that cannot be
started is done without.
"""

import json
import shutil
import subprocess
import sys
from collections import deque
from pathlib import Path

import polars as pl
import pytest

from rag_eval_pipeline.lib.inputs import corpus
from rag_eval_pipeline.lib.inputs.corpus import CorpusError, freeze, parse_rows, read_files
from rag_eval_pipeline.lib.paths import project_path

BUNDLED = project_path("corpus_snapshots") / "2026-10-01"


@pytest.fixture
def snapshot(tmp_path: Path) -> Path:
    """A writable copy of the bundled 2026-10-01 snapshot (50 documents), without its manifest,
    some files with Windows line endings, one with a byte order mark and non-ASCII text."""
    folder = tmp_path / "corpus" / "2026-10-01"
    (folder / "documents").mkdir(parents=True)
    for number, path in enumerate(sorted((BUNDLED / "documents").glob("*.md"))):
        data = path.read_bytes()
        if number % 3 == 0:
            data = data.replace(b"\n", b"\r\n")
        (folder / "documents" / path.name).write_bytes(data)
    first = sorted((folder / "documents").glob("*.md"))[0]
    text = first.read_text(encoding="utf-8")
    first.write_text("\ufeff" + text.replace("## ", "## Kühlkette – ", 1), encoding="utf-8")
    return folder


@pytest.fixture
def in_workers(monkeypatch):
    """Chunks of 2 files, and one worker process however few files there are."""
    monkeypatch.setattr(corpus, "PARSE_CHUNK", 2)
    monkeypatch.setattr(corpus, "PARALLEL_PARSE_MIN", 1)
    monkeypatch.setattr(corpus, "_parse_workers", lambda count: 1)


def serial_rows(folder: Path) -> pl.DataFrame:
    return corpus._rows_of([corpus._parsed_chunk(read_files(folder))])


def test_a_worker_process_gives_the_rows_of_the_serial_parse(snapshot, tmp_path):
    files = read_files(snapshot)
    chunks = [files[start : start + 5] for start in range(0, len(files), 5)]
    replies = [None] * len(chunks)
    worker = subprocess.Popen(
        corpus._PARSE_WORKER_COMMAND, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        corpus._feed_worker(
            worker, corpus._parsed_chunk, chunks, deque(range(len(chunks))), replies, tmp_path
        )
    finally:
        worker.stdin.close()
        worker.wait()
    assert worker.returncode == 0
    assert corpus._rows_of(replies).equals(serial_rows(snapshot))


def test_parse_rows_with_workers_is_the_serial_parse(snapshot, in_workers):
    assert parse_rows(read_files(snapshot)).equals(serial_rows(snapshot))


def test_a_freeze_with_workers_writes_the_serial_manifest(snapshot, in_workers, monkeypatch):
    serial_copy = snapshot.parent.parent / "serial" / snapshot.name
    shutil.copytree(snapshot, serial_copy)
    parallel = freeze(snapshot, "2026-10-01T00:00:00+00:00").manifest
    monkeypatch.setattr(corpus, "_parse_workers", lambda count: 0)
    serial = freeze(serial_copy, "2026-10-01T00:00:00+00:00").manifest
    assert parallel["corpus_digest"] == serial["corpus_digest"]
    assert parallel["documents"] == serial["documents"]
    assert parallel["passage_count"] == serial["passage_count"]


def break_document(path: Path, line: int) -> None:
    """Put text before the first section heading at ``line`` (front matter lines before it)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    lines.insert(line - 1, "stray text before the first section")
    path.unlink()
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def heading_line(path: Path) -> int:
    return next(
        number
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if line.startswith("## ")
    )


def test_a_bad_document_parsed_in_a_worker_names_its_file_and_line(snapshot, in_workers):
    # In the first chunk: the worker takes chunks from the front, this process from the back.
    document = sorted((snapshot / "documents").glob("*.md"))[1]
    line = heading_line(document)
    break_document(document, line)
    with pytest.raises(CorpusError) as raised:
        freeze(snapshot)
    assert str(raised.value) == f"{document}:{line}: text before the first '## ' section heading"
    assert not (snapshot / "manifest.json").exists()
    assert not (snapshot.parent / ".snapshot_store").exists()


@pytest.mark.parametrize("how", ["parse_rows", "freeze", "rag-eval freeze"])
def test_every_bad_document_is_reported_in_file_order(snapshot, in_workers, how, capsys):
    """Three broken documents in three chunks (the worker's and this process's): all three
    are reported, first in file order first, whichever process parsed them; ``rag-eval
    freeze`` prints each on a line of its own and writes nothing."""
    from rag_eval_pipeline.cli import main

    documents = sorted((snapshot / "documents").glob("*.md"))
    expected = []
    for document in (documents[3], documents[20], documents[-1]):
        line = heading_line(document)
        break_document(document, line)
        expected.append(f"{document}:{line}: text before the first '## ' section heading")
    if how == "rag-eval freeze":
        assert main(["freeze", str(snapshot)]) == 2
        assert capsys.readouterr().err.splitlines() == [f"error: {e}" for e in expected]
        assert not (snapshot / "manifest.json").exists()
        return
    with pytest.raises(CorpusError) as raised:
        parse_rows(read_files(snapshot)) if how == "parse_rows" else freeze(snapshot)
    assert raised.value.problems == expected
    assert str(raised.value) == f"{expected[0]} (and 2 more bad documents: {expected[1]}; " + (
        f"{expected[2]})"
    )


def test_files_that_cannot_be_read_and_that_do_not_parse_are_reported_in_file_order(
    snapshot, monkeypatch, tmp_path
):
    """In one chunk, a file refused when read (a link out of the folder, a colon in its name)
    and documents that do not parse: every one reported in the folder's order, each once."""
    monkeypatch.setattr(corpus, "PARSE_CHUNK", 1000)
    documents = sorted((snapshot / "documents").glob("*.md"))
    outside = tmp_path / "outside.md"
    outside.write_text("---\n")
    link = snapshot / "documents" / "AAA:LINK-001@v1.md"
    link.symlink_to(outside)
    expected = [f"{link}: symbolic link to {outside}, outside"]
    for document in (documents[3], documents[-1]):
        line = heading_line(document)
        break_document(document, line)
        expected.append(f"{document}:{line}: text before the first '## ' section heading")
    with pytest.raises(CorpusError) as raised:
        freeze(snapshot)
    assert len(raised.value.problems) == 3
    for problem, start in zip(raised.value.problems, expected, strict=True):
        assert problem.startswith(start), (problem, start)
    assert not (snapshot / "manifest.json").exists()


def test_a_worker_that_dies_leaves_its_chunks_to_this_process(snapshot, in_workers, monkeypatch):
    monkeypatch.setattr(corpus, "_PARSE_WORKER_COMMAND", [sys.executable, "-c", "pass"])
    assert parse_rows(read_files(snapshot)).equals(serial_rows(snapshot))


def test_reading_and_parsing_in_one_pass_is_read_files_then_parse_rows(snapshot, in_workers):
    files, rows = corpus.read_and_parse(snapshot)
    assert rows.equals(serial_rows(snapshot))
    read = read_files(snapshot)
    assert [f.path for f in files] == [f.path for f in read]
    assert [(f.file_digest, f.inode, f.size, f.links) for f in files] == [
        (f.file_digest, f.inode, f.size, f.links) for f in read
    ]
    assert [f.content() for f in files] == [f.data for f in read]


def test_a_file_read_in_a_worker_that_is_refused_names_the_file(snapshot, in_workers, tmp_path):
    outside = tmp_path / "outside.md"
    outside.write_text("---\n")
    link = snapshot / "documents" / "AAA-LINK-001@v1.md"
    link.symlink_to(outside)
    with pytest.raises(CorpusError, match=rf"^{link}: symbolic link to {outside}, outside"):
        freeze(snapshot)
    assert not (snapshot / "manifest.json").exists()


def test_a_worker_that_cannot_be_started_is_done_without(snapshot, in_workers, monkeypatch):
    monkeypatch.setattr(corpus, "_PARSE_WORKER_COMMAND", [str(snapshot / "no-such-python")])
    assert parse_rows(read_files(snapshot)).equals(serial_rows(snapshot))


@pytest.mark.parametrize("snapshot_id", ["2026-10-01", "2026-11-01"])
def test_bundled_snapshots_frozen_with_workers_keep_their_digests(
    snapshot_id, in_workers, tmp_path
):
    bundled = project_path("corpus_snapshots") / snapshot_id
    folder = tmp_path / "corpus" / snapshot_id
    (folder / "documents").mkdir(parents=True)
    for path in (bundled / "documents").glob("*.md"):
        shutil.copyfile(path, folder / "documents" / path.name)
    frozen = json.loads((bundled / "manifest.json").read_text())
    assert freeze(folder).manifest["corpus_digest"] == frozen["corpus_digest"]
