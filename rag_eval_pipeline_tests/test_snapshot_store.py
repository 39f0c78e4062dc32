"""The content-addressed snapshot store, incremental freezing and loading, and the digest kept.

Freezing stores each document version's bytes once and lists a later snapshot as the changes
from the one before it; loading and freezing parse only the documents whose bytes are new; the
bundled snapshots keep their digests; a file edited after freezing fails loudly; the fast paths
(front matter, canonical lines, staged snapshots) give exactly what the slow ones give.
"""

import datetime as dt
import hashlib
import json
import os
import re
import shutil
import stat
import time
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from rag_eval_pipeline.lib.errors import RagEvalError
from rag_eval_pipeline.lib.inputs import corpus
from rag_eval_pipeline.lib.inputs.corpus import (
    CorpusError,
    freeze,
    freeze_snapshot,
    load_snapshot,
    read_snapshot,
)
from rag_eval_pipeline.lib.inputs.snapshot_store import STORE_NAME, SnapshotStore
from rag_eval_pipeline.lib.paths import project_path
from rag_eval_pipeline.lib.store.run_store import RunStore
from rag_eval_pipeline.lib.store.staging import stage_snapshot

BUNDLED = {
    "2026-10-01": "4dc27623b0aee9dbd8bcf9ee84d0013aa9d7681c344aa0cc7ab92ebc68a42e5c",
    "2026-11-01": "4b978a8e47bf565fca00ecee458a8a05b0ba98941a4c19df444175616c517bac",
}


def writable_copy(source: Path, target: Path) -> Path:
    """A copy of a snapshot folder whose files can be edited (frozen files are read-only)."""
    shutil.copytree(source, target, copy_function=shutil.copyfile)
    return target


def edit(path: Path, old: str, new: str) -> None:
    """Replace a document file with an edited copy (a new file, as an editor that writes a
    temporary file and renames it does)."""
    text = path.read_text(encoding="utf-8")
    path.unlink()
    path.write_text(text.replace(old, new), encoding="utf-8")


def edit_in_place(path: Path, old: str, new: str) -> None:
    """Edit a document file through its own inode (as an editor that writes in place does,
    or root writing to a read-only hard link)."""
    os.chmod(path, 0o644)
    with open(path, "r+", encoding="utf-8") as handle:
        text = handle.read().replace(old, new)
        handle.seek(0)
        handle.write(text)
        handle.truncate()


def disk_bytes(root: Path) -> int:
    """Bytes allocated under ``root``, each inode counted once (what ``du`` reports)."""
    seen, total = set(), 0
    for folder, _, names in os.walk(root):
        for name in names:
            status = os.lstat(Path(folder) / name)
            if (status.st_dev, status.st_ino) not in seen:
                seen.add((status.st_dev, status.st_ino))
                total += status.st_blocks * 512
    return total


@pytest.mark.parametrize("snapshot_id", sorted(BUNDLED))
def test_bundled_snapshots_keep_their_digests(snapshot_id):
    folder = project_path("corpus_snapshots") / snapshot_id
    assert (
        json.loads((folder / "manifest.json").read_text())["corpus_digest"] == BUNDLED[snapshot_id]
    )
    snapshot = load_snapshot(folder)
    assert snapshot.corpus_digest == BUNDLED[snapshot_id]


def test_bundled_snapshots_refrozen_into_a_store_keep_their_digests(tmp_path):
    for snapshot_id, digest in BUNDLED.items():
        copy = writable_copy(project_path("corpus_snapshots") / snapshot_id, tmp_path / snapshot_id)
        assert freeze_snapshot(copy)["corpus_digest"] == digest
        assert load_snapshot(copy).corpus_digest == digest
        assert (tmp_path / STORE_NAME / "objects").is_dir()


def test_a_new_snapshot_adds_only_the_changed_documents(library):
    first = library / "2026-10-01"
    first_report = freeze(first)
    assert first_report.parsed == 5 and first_report.manifest.get("base") is None
    before = disk_bytes(library)
    second = writable_copy(first, library / "2026-11-01")
    edit(second / "documents" / "STORE-FRIDGE-001@v1.md", "8 °C", "6 °C")
    report = freeze(second)
    # Only the edited document was parsed, and only its bytes were stored.
    assert report.parsed == 1
    edited = (second / "documents" / "STORE-FRIDGE-001@v1.md").stat().st_size
    assert report.stored_bytes == edited
    manifest = json.loads((second / "manifest.json").read_text())
    assert manifest["base"]["snapshot_id"] == "2026-10-01"
    assert list(manifest["documents"]) == ["STORE-FRIDGE-001@v1"]
    assert manifest["removed"] == []
    # Every unchanged file is the same inode as the first snapshot's copy.
    for path in (second / "documents").iterdir():
        twin = first / "documents" / path.name
        assert os.path.samefile(path, twin) == (path.name != "STORE-FRIDGE-001@v1.md")
        assert not path.stat().st_mode & stat.S_IWUSR
    # The copy, once frozen, adds about the edited file and the small manifest to the disk.
    assert disk_bytes(library) - before < 4 * 4096 + edited
    loaded = load_snapshot(second)
    assert loaded.corpus_digest == manifest["corpus_digest"] == report.manifest["corpus_digest"]
    assert loaded.parsed == 0
    assert set(loaded.document_digests) == set(report.manifest["documents"])


def test_a_delta_manifest_resolves_to_every_document(library):
    first = library / "2026-10-01"
    freeze(first)
    second = writable_copy(first, library / "2026-11-01")
    (second / "documents" / "XFER-FAX-001@v1.md").unlink()
    report = freeze(second)
    manifest = json.loads((second / "manifest.json").read_text())
    assert manifest["removed"] == ["XFER-FAX-001@v1"] and manifest["documents"] == {}
    assert sorted(read_snapshot(second).entries) == sorted(report.manifest["documents"])
    assert "XFER-FAX-001@v1" not in read_snapshot(second).entries
    assert load_snapshot(second).document_count == 4


def test_refreezing_unchanged_files_parses_nothing(library):
    folder = library / "2026-10-01"
    first = freeze(folder)
    again = freeze(folder)
    assert again.parsed == 0 and again.stored_bytes == 0
    assert again.manifest["corpus_digest"] == first.manifest["corpus_digest"]
    assert load_snapshot(folder).parsed == 0


@pytest.mark.parametrize(
    "name", ["STORE-FRIDGE-001@v1 (copy).md", "fridge.md", "STORE-FRIDGE-001@v01.md"]
)
def test_a_cached_files_copy_under_another_name_fails_for_its_name(library, name):
    # The copy's bytes are in the parse cache under the original's name: it is still parsed,
    # so freezing and loading fail as they would without a cache, naming the copy.
    folder = library / "2026-10-01"
    freeze(folder)
    original = folder / "documents" / "STORE-FRIDGE-001@v1.md"
    (folder / "documents" / name).write_bytes(original.read_bytes())
    manifest = (folder / "manifest.json").read_bytes()
    expected = f"{name}: file name should be STORE-FRIDGE-001@v1.md for its front matter"
    with pytest.raises(CorpusError, match=re.escape(expected)):
        freeze(folder)
    assert (folder / "manifest.json").read_bytes() == manifest
    with pytest.raises(CorpusError, match=re.escape(expected)):
        load_snapshot(folder)


def test_a_freeze_warns_of_what_documents_holds_besides_md_files(library):
    folder = library / "2026-10-01"
    documents = folder / "documents"
    (documents / "STORE-FRIDGE-001@v1.md").rename(documents / "STORE-FRIDGE-001@v1.MD")
    (documents / "notes.txt").write_text("to do", encoding="utf-8")
    (documents / "old").mkdir()
    (documents / ".DS_Store").write_bytes(b"")
    (documents / "._STORE-FRIDGE-002@v1.md").write_bytes(b"\x00\x05\x16\x07 Mac OS X")
    report = freeze(folder)
    left_out = [warning for warning in report.warnings if "left out of the snapshot" in warning]
    assert left_out == [
        f"{documents / 'STORE-FRIDGE-001@v1.MD'}: left out of the snapshot (not named *.md: "
        "rename it to STORE-FRIDGE-001@v1.md to include it)",
        f"{documents / 'notes.txt'}: left out of the snapshot (not a *.md document)",
        f"{documents / 'old'}: left out of the snapshot (a folder: documents/ is read without "
        "its subfolders)",
    ]
    assert "STORE-FRIDGE-001@v1" not in report.manifest["documents"]
    assert report.manifest["document_count"] == 4


def test_a_stored_file_edited_in_place_fails_loudly(library):
    folder = library / "2026-10-01"
    freeze(folder)
    document = folder / "documents" / "STORE-FRIDGE-001@v1.md"
    edit_in_place(document, "8 °C", "10 °C")
    with pytest.raises(CorpusError, match=r"manifest\.json: .*changed: STORE-FRIDGE-001@v1"):
        load_snapshot(folder)
    # Freezing it again keeps the new bytes, forgets the damaged stored version and says so.
    with pytest.warns(UserWarning, match="edited in place"):
        freeze_snapshot(folder)
    assert (
        load_snapshot(folder).corpus_digest
        == json.loads((folder / "manifest.json").read_text())["corpus_digest"]
    )


def test_an_edit_through_another_snapshots_link_names_the_shared_file(library):
    """A copy frozen from a frozen snapshot shares its files' bytes (hard links to the stored
    copy): an edit in place through the copy changes the first snapshot too, and the first's
    load says so, rather than only that a file it was never edited through changed."""
    first = library / "2026-10-01"
    freeze(first)
    second = writable_copy(first, library / "2026-11-01")
    freeze(second)
    document = second / "documents" / "STORE-FRIDGE-001@v1.md"
    assert document.stat().st_nlink == 3
    edit_in_place(document, "8 °C", "10 °C")
    with pytest.raises(CorpusError) as raised:
        load_snapshot(first)
    message = str(raised.value)
    assert re.search(r"manifest\.json: .*changed: STORE-FRIDGE-001@v1\. Edited in place: ", message)
    assert "STORE-FRIDGE-001@v1.md (3 links) shares its bytes with the store's copy" in message
    assert "cp -r <snapshot> <new> && chmod -R u+w <new>/documents" in message
    # A file replaced by an edited copy (links 1) changed in this folder alone: no such note.
    other = writable_copy(library / "2026-11-01", library / "elsewhere" / "2026-11-01")
    (other / "manifest.json").unlink()
    freeze(other, store=False)
    edit(other / "documents" / "STORE-FRIDGE-001@v1.md", "10 °C", "12 °C")
    with pytest.raises(CorpusError) as raised:
        load_snapshot(other)
    assert "changed: STORE-FRIDGE-001@v1" in str(raised.value)
    assert "Edited in place" not in str(raised.value)


@pytest.mark.parametrize("parse_cache", ["kept", "removed"])
@pytest.mark.parametrize("damage", ["shorter", "same size"])
def test_a_damaged_stored_object_is_stored_again_from_a_good_copy(library, damage, parse_cache):
    """Also when the parse cache is gone: the copy's documents are then parsed, as if never
    stored, yet their objects exist and are checked all the same."""
    first = library / "2026-10-01"
    digest = freeze_snapshot(first)["corpus_digest"]
    second = writable_copy(first, library / "2026-11-01")
    if parse_cache == "removed":
        shutil.rmtree(SnapshotStore.beside(first).root / "parsed")
    manifest = json.loads((first / "manifest.json").read_text())
    sha256 = manifest["documents"]["STORE-FRIDGE-001@v1"]["sha256"]
    stored = SnapshotStore.beside(first).object_path(sha256)
    good = stored.read_bytes()
    bad = good[:-5] if damage == "shorter" else good[:-5] + b"XXXXX"
    os.chmod(stored, 0o644)
    stored.write_bytes(bad)  # in place: the first snapshot's file is this inode too
    with pytest.warns(UserWarning, match="stored object was damaged; stored again"):
        freeze_snapshot(second)
    # The copy's good bytes replaced the damaged object, not the other way round.
    assert stored.read_bytes() == good
    assert (second / "documents" / "STORE-FRIDGE-001@v1.md").read_bytes() == good
    assert load_snapshot(second).corpus_digest == digest


def test_every_damaged_object_is_stored_again_and_warned_of_in_file_order(library):
    """The files are stored on two threads split by digest: every damaged object is stored
    again from its good copy, whichever thread has it, and the warnings list the files in the
    order they were read (by name), as one thread would."""
    first = library / "2026-10-01"
    digest = freeze(first).manifest["corpus_digest"]
    second = writable_copy(first, library / "2026-11-01")
    entries = json.loads((first / "manifest.json").read_text())["documents"]
    store = SnapshotStore.beside(first)
    good = {}
    for version_id in sorted(entries):
        stored = store.object_path(entries[version_id]["sha256"])
        good[stored] = stored.read_bytes()
        os.chmod(stored, 0o644)
        stored.write_bytes(good[stored][:-3] + b"XYZ")
    assert {int(entries[v]["sha256"][-1], 16) % 2 for v in entries} == {0, 1}
    report = freeze(second)
    assert report.stored_bytes == sum(len(data) for data in good.values())
    assert list(report.warnings) == [
        f"{store.object_path(entries[v]['sha256'])}: stored object was damaged; stored again"
        for v in sorted(entries)
    ]
    assert all(path.read_bytes() == data for path, data in good.items())
    assert report.manifest["corpus_digest"] == digest == load_snapshot(second).corpus_digest


def test_a_file_that_cannot_be_stored_fails_the_freeze_with_the_first_such_file(
    library, monkeypatch
):
    """Two files that cannot be linked to their stored bytes, one in each thread's half: the
    freeze fails with the first of them in name order, and leaves the manifest as it was."""
    folder = library / "2026-10-01"
    names = sorted(path.name for path in (folder / "documents").iterdir())
    digests = {
        name: corpus.read_document_file(folder / "documents" / name, folder).file_digest
        for name in names
    }
    halves = {name: int(digest[-1], 16) % 2 for name, digest in digests.items()}
    # The earlier one is in the second thread's half, the later one in the first's.
    earlier = next(n for n in names if halves[n] == 1)
    failing = [earlier, next(n for n in names if halves[n] == 0 and n > earlier)]
    link = SnapshotStore._link_to_object

    def refusing(self, digest, path, read=None):
        if os.path.basename(path) in failing:
            raise OSError(f"cannot link {os.path.basename(path)}")
        return link(self, digest, path, read)

    monkeypatch.setattr(SnapshotStore, "_link_to_object", refusing)
    monkeypatch.setattr(SnapshotStore, "_adopt", lambda self, digest, path, read=None: False)
    # The thread holding the earlier file starts late: the later file has failed by then, and
    # the earlier one must still be tried (it comes first in order).
    add_numbered = SnapshotStore._add_numbered

    def late(self, files, *rest):
        if any(f.path.name == earlier for _, f in files):
            time.sleep(0.3)
        return add_numbered(self, files, *rest)

    monkeypatch.setattr(SnapshotStore, "_add_numbered", late)
    manifest = (folder / "manifest.json").read_bytes()
    with pytest.raises(OSError, match=f"cannot link {earlier}"):
        freeze(folder)
    assert (folder / "manifest.json").read_bytes() == manifest


@pytest.mark.parametrize(
    "how",
    ["replaced", "written in place", "removed", "replaced, time kept", "resized, time kept"],
)
@pytest.mark.parametrize("step", ["_adopt", "_link_to_object"])
def test_a_file_changed_while_it_is_frozen_fails_the_freeze_and_keeps_its_new_bytes(
    library, monkeypatch, step, how
):
    """An editor saving a document between the freeze reading it and linking it: the file is
    neither stored under the digest of the bytes read before (``_adopt``, a first freeze) nor
    replaced by a link to them (``_link_to_object``, the freeze of a copy), and the freeze
    fails naming it, writing no manifest."""
    first = library / "2026-10-01"
    if step == "_link_to_object":
        freeze(first)
        folder = writable_copy(first, library / "2026-11-01")
        (folder / "manifest.json").unlink()
    else:
        folder = first
        (folder / "manifest.json").unlink()
    document = folder / "documents" / "STORE-FRIDGE-001@v1.md"
    new = "9 °C" if how != "resized, time kept" else "9.5 °C"
    saved = document.read_text(encoding="utf-8").replace("8 °C", new)
    original = getattr(SnapshotStore, step)

    def editing(self, digest, path, read=None):
        if os.path.basename(path) == document.name:
            modified = document.stat().st_mtime_ns
            if how.startswith("replaced"):  # another inode (of the same size), saved beside
                temporary = document.with_name(".saving")  # it first: never its inode again
                temporary.write_text(saved, encoding="utf-8")
                os.replace(temporary, document)
            elif how == "removed":  # as an editor that moves the file away before saving
                document.unlink()
            elif how == "resized, time kept":  # the same inode, another size
                edit_in_place(document, "8 °C", new)
            else:  # the same inode and size: told apart by its modification time
                time.sleep(0.02)  # past the clock tick file times are taken at
                with open(document, "r+", encoding="utf-8") as handle:
                    handle.write(saved)
            if how.endswith("time kept"):  # only the inode or the size tells the change
                os.utime(document, ns=(modified, modified))
        return original(self, digest, path, read)

    monkeypatch.setattr(SnapshotStore, step, editing)
    read_digest = corpus.read_document_file(document, folder).file_digest
    with pytest.raises(
        RagEvalError,
        match=rf"^{re.escape(str(document))}: changed while the snapshot was being frozen",
    ):
        freeze(folder)
    if how == "removed":
        assert not document.exists()
    else:
        assert document.read_text(encoding="utf-8") == saved
    assert not (folder / "manifest.json").exists()
    # No temporary link is left beside the documents.
    assert not [p.name for p in (folder / "documents").iterdir() if p.name.startswith(".")]
    stored = SnapshotStore.beside(folder).object_path(read_digest)
    if step == "_adopt":
        assert not stored.exists()
    else:  # the first snapshot's bytes, untouched
        assert hashlib.sha256(stored.read_bytes()).hexdigest() == read_digest


def test_a_freeze_that_fails_on_a_changed_file_forgets_no_stored_version(library, monkeypatch):
    """A file edited in place through its link (its frozen version's object gone stale) and
    saved again during the next freeze: the freeze fails before it forgets that stale version,
    so the warning that it is gone is never lost with the failure."""
    folder = library / "2026-10-01"
    freeze(folder)
    document = folder / "documents" / "STORE-FRIDGE-001@v1.md"
    frozen = json.loads((folder / "manifest.json").read_text())["documents"]
    stale = SnapshotStore.beside(folder).object_path(frozen["STORE-FRIDGE-001@v1"]["sha256"])
    edit_in_place(document, "8 °C", "10 °C")
    monkeypatch.setattr(corpus, "read_document_file", _saving_after_read(document))
    with pytest.raises(RagEvalError, match="changed while the snapshot was being frozen"):
        freeze(folder)
    assert stale.exists() and "11 °C" in document.read_text(encoding="utf-8")


def _saving_after_read(document: Path):
    """``corpus.read_document_file`` that, once ``document`` is read, saves it editor-style."""
    read = corpus.read_document_file

    def reading(path, *args, **kwargs):
        result = read(path, *args, **kwargs)
        if os.path.basename(path) == document.name:
            edit(document, "10 °C", "11 °C")
        return result

    return reading


def test_a_file_another_freeze_linked_meanwhile_is_kept(library, monkeypatch):
    """Two freezes of one folder: the other has already made the file a link to the same
    stored bytes, so it is not 'changed' (same bytes), and the freeze succeeds."""
    first = library / "2026-10-01"
    freeze(first)
    folder = writable_copy(first, library / "2026-11-01")
    (folder / "manifest.json").unlink()
    document = folder / "documents" / "STORE-FRIDGE-001@v1.md"
    link = SnapshotStore._link_to_object

    def raced(self, digest, path, read=None):
        if os.path.basename(path) == document.name:
            link(self, digest, path)  # the other freeze, unchecked
        return link(self, digest, path, read)

    monkeypatch.setattr(SnapshotStore, "_link_to_object", raced)
    freeze(folder)
    stored = SnapshotStore.beside(folder).object_path(
        corpus.read_document_file(document, folder).file_digest
    )
    assert os.path.samefile(document, stored) and load_snapshot(folder).corpus_digest


def test_a_snapshot_without_documents_loads_from_the_store(library):
    folder = library / "2026-10-01"
    digest = freeze_snapshot(folder)["corpus_digest"]
    shutil.rmtree(folder / "documents")
    snapshot = load_snapshot(folder)
    assert snapshot.corpus_digest == digest and snapshot.document_count == 5


def test_a_damaged_object_of_a_snapshot_without_documents_is_named(library, tmp_path):
    """Without ``documents/`` the stored objects are the files: one edited in place (here
    through a second hard link, so the edit-in-place note would fire) fails naming the version
    and the object, not a ``documents/`` file that is not there."""
    folder = library / "2026-10-01"
    freeze(folder)
    stored = SnapshotStore.beside(folder).object_path(
        corpus.read_document_file(
            folder / "documents" / "STORE-FRIDGE-001@v1.md", folder
        ).file_digest
    )
    shutil.rmtree(folder / "documents")
    os.link(stored, tmp_path / "another-link.md")
    edit_in_place(stored, "8 °C", "6 °C")
    with pytest.raises(CorpusError) as failed:
        load_snapshot(folder)
    message = str(failed.value)
    assert message.startswith(f"{folder / 'manifest.json'}: no documents/ folder")
    assert f"STORE-FRIDGE-001@v1 ({stored}) no longer has the bytes it is named by" in message
    assert "Edited in place" not in message


def test_a_delta_manifest_without_its_store_is_a_clear_error(library, tmp_path):
    first = library / "2026-10-01"
    freeze(first)
    second = writable_copy(first, library / "2026-11-01")
    edit(second / "documents" / "STORE-FRIDGE-001@v1.md", "8 °C", "6 °C")
    freeze(second)
    moved = writable_copy(second, tmp_path / "elsewhere" / "2026-11-01")
    with pytest.raises(CorpusError, match=r"manifest\.json: .*base manifest .* store"):
        load_snapshot(moved)


def test_a_staged_snapshot_is_verified_without_parsing(library, tmp_path):
    folder = library / "2026-10-01"
    freeze(folder)
    store = RunStore(tmp_path / "store")
    first = stage_snapshot(store, folder, dt.datetime(2026, 10, 15))
    assert first.cached == 5 and first.parsed == 0
    again = stage_snapshot(store, folder, dt.datetime(2026, 10, 16))
    assert (again.parsed, again.cached) == (0, 0)
    assert again.verified_by == "file digests of the staged snapshot"
    assert again.summary == first.summary
    # A changed file is no longer the staged bytes: the full check runs and fails.
    document = folder / "documents" / "CLEAN-LOG-001@v1.md"
    edit(document, "12 months", "24 months")
    with pytest.raises(CorpusError, match="changed: CLEAN-LOG-001@v1"):
        stage_snapshot(store, folder, dt.datetime(2026, 10, 17))


def test_an_unfrozen_copy_of_a_staged_snapshot_is_refused_not_taken_for_it(library, tmp_path):
    """A copy of a snapshot folder (its manifest too) that was never frozen has the staged
    snapshot's file digests: it is refused by its name, rather than staged as the snapshot it
    was copied from (its night would report that snapshot's id)."""
    folder = library / "2026-10-01"
    freeze(folder)
    store = RunStore(tmp_path / "store")
    stage_snapshot(store, folder, dt.datetime(2026, 10, 15))
    copy = writable_copy(folder, library / "2026-11-25")
    with pytest.raises(CorpusError, match=r"frozen as snapshot '2026-10-01', but the folder is"):
        stage_snapshot(store, copy, dt.datetime(2026, 11, 26))
    freeze(copy)
    assert stage_snapshot(store, copy, dt.datetime(2026, 11, 26)).snapshot_id == "2026-11-25"


def test_a_load_reads_the_parse_cache_beside_the_files_and_fails_as_the_files_do(
    library, tmp_path, monkeypatch
):
    """A snapshot not staged yet has its parse cache read on a thread while its files are read:
    the cached rows are the ones used (nothing parsed), and a file that cannot be read fails the
    load with its own error, the thread waiting for the files released rather than left hanging.
    """
    import threading

    folder = library / "2026-10-01"
    freeze(folder)
    threads = []
    look_up = corpus._cached_rows

    def recording(files, store):
        threads.append(threading.current_thread())
        return look_up(files, store)

    monkeypatch.setattr(corpus, "_cached_rows", recording)
    staged = stage_snapshot(RunStore(tmp_path / "store"), folder, dt.datetime(2026, 10, 15))
    assert (staged.parsed, staged.cached) == (0, 5)
    assert len(threads) == 1 and threads[0] is not threading.main_thread()

    document = folder / "documents" / "CLEAN-LOG-001@v1.md"
    outside = tmp_path / "outside.md"
    shutil.copyfile(document, outside)
    document.unlink()
    document.symlink_to(outside)
    outcome = {}

    def load():
        try:
            stage_snapshot(RunStore(tmp_path / "other"), folder, dt.datetime(2026, 10, 16))
        except CorpusError as problem:
            outcome["error"] = str(problem)

    worker = threading.Thread(target=load, daemon=True)
    worker.start()
    worker.join(60)
    assert not worker.is_alive(), "the load hung after a file failed"
    assert "outside the snapshot" in outcome["error"] and "CLEAN-LOG-001@v1.md" in outcome["error"]


@pytest.mark.parametrize("snapshot_id", sorted(BUNDLED))
def test_staging_writes_the_tables_snapshot_tables_builds(snapshot_id, tmp_path, monkeypatch):
    """Staging decodes and writes the passages a slice at a time (small slices here, so many of
    them and a short last one) and counts the summary without decoding: the staged tables are
    exactly ``snapshot_tables`` of the loaded snapshot, row for row and type for type."""
    from polars.testing import assert_frame_equal

    from rag_eval_pipeline.lib.store.tables import conform

    folder = project_path("corpus_snapshots") / snapshot_id
    expected = corpus.snapshot_tables(load_snapshot(folder), dt.datetime(2026, 10, 15))
    monkeypatch.setattr(corpus, "TABLE_SLICE", 2)
    store = RunStore(tmp_path / "store")
    written = []
    write = RunStore.write_table_slices

    def counting(self, folder, table, frames, part="part-0000"):
        def each():
            for frame in frames:
                written.append(frame.height)
                yield frame

        return write(self, folder, table, each(), part)

    monkeypatch.setattr(RunStore, "write_table_slices", counting)
    stage_snapshot(store, folder, dt.datetime(2026, 10, 15))
    assert len(written) > 2 and sum(written) == expected["corpus_passages"].height
    corpus_dir = store.corpus_dir(BUNDLED[snapshot_id])
    for table, frame in expected.items():
        assert_frame_equal(store.read_table(corpus_dir, table), conform(frame, table))


def test_a_sliced_table_reads_back_with_parquet_types_everywhere(tmp_path):
    """The slices reach Arrow as string views and the file keeps no Arrow schema of its own:
    pyarrow reads plain strings, 32-bit integers and dates, DuckDB reads VARCHAR, and the rows
    come back exactly, nulls and non-ASCII text included."""
    import duckdb
    import polars as pl
    import pyarrow as pa
    import pyarrow.parquet as pq
    from polars.testing import assert_frame_equal

    from rag_eval_pipeline.lib.store.tables import conform

    rows = conform(
        load_snapshot(project_path("corpus_snapshots") / sorted(BUNDLED)[0]).passages.with_columns(
            pl.lit("d" * 64).alias("corpus_digest")
        ),
        "corpus_passages",
    ).with_columns(
        pl.when(pl.int_range(pl.len()) == 0)
        .then(pl.lit("Température « 2–8 °C »\nligne 2"))
        .otherwise(pl.col("text"))
        .alias("text")
    )
    store = RunStore(tmp_path)
    folder = store.corpus_dir("d" * 64)
    path = store.write_table_slices(
        folder, "corpus_passages", [rows.head(3), rows.slice(3, 0), rows.slice(3)]
    )
    assert_frame_equal(store.read_table(folder, "corpus_passages"), rows)
    assert b"ARROW:schema" not in (pq.read_metadata(str(path)).metadata or {})
    schema = pq.read_schema(str(path))
    assert schema.field("text").type == pa.string()
    assert schema.field("version").type == pa.int32()
    assert schema.field("effective_date").type == pa.date32()
    assert pq.read_table(str(path)).num_rows == rows.height
    with duckdb.connect() as connection:
        kinds = {
            name: kind
            for name, kind, *_ in connection.execute(f"DESCRIBE SELECT * FROM '{path}'").fetchall()
        }
        first = connection.execute(
            f"SELECT text FROM '{path}' WHERE passage_id = ?", [rows["passage_id"][0]]
        ).fetchall()
    assert kinds["text"] == kinds["superseded_by"] == "VARCHAR"
    assert (kinds["version"], kinds["effective_date"]) == ("INTEGER", "DATE")
    assert first == [("Température « 2–8 °C »\nligne 2",)]


def test_a_sliced_table_that_fails_midway_leaves_nothing(tmp_path):
    """``write_table_slices`` renames the part into place only once every slice is written: a
    slice that fails leaves no part and no temporary file."""
    import polars as pl

    store = RunStore(tmp_path)
    folder = store.corpus_dir("d" * 64)
    good = pl.DataFrame(
        {
            "corpus_digest": ["d" * 64],
            "snapshot_id": ["s"],
            "document_count": [1],
            "passage_count": [1],
            "current_passage_count": [1],
            "loaded_at": [dt.datetime(2026, 10, 15)],
        }
    )

    def slices():
        yield good
        raise ValueError("slice 2 is bad")

    with pytest.raises(ValueError, match="slice 2 is bad"):
        store.write_table_slices(folder, "corpus_snapshots", slices())
    assert not store.has_table(folder, "corpus_snapshots")
    assert not [path for path in Path(tmp_path).rglob("*") if path.is_file()]


def test_a_legacy_folder_loads_as_before(library):
    """A folder of markdown files with a manifest listing every document (no store) loads and
    verifies as it always did, line endings and all."""
    folder = library / "2026-10-01"
    manifest = json.loads((folder / "manifest.json").read_text())
    assert "store" not in manifest
    assert load_snapshot(folder).corpus_digest == manifest["corpus_digest"]
    assert not (library / STORE_NAME).exists()


def test_freeze_without_a_store_writes_only_a_full_manifest(library):
    folder = library / "2026-10-01"
    manifest = freeze_snapshot(folder, store=None)
    written = json.loads((folder / "manifest.json").read_text())
    assert written == manifest and "store" not in written and len(written["documents"]) == 5
    assert not (library / STORE_NAME).exists()


def test_the_parse_cache_is_keyed_by_bytes_and_version(library, tmp_path):
    folder = library / "2026-10-01"
    freeze(folder)
    store = SnapshotStore.beside(folder)
    parts = list((store.root / "parsed").rglob("*.parquet"))
    assert (
        len(parts) == 1
        and parts[0].stem == __import__("hashlib").sha256(parts[0].read_bytes()).hexdigest()
    )
    # A damaged cache part is ignored: everything is parsed again and the digest holds.
    os.chmod(parts[0], 0o644)
    parts[0].write_bytes(b"not parquet")
    snapshot = load_snapshot(folder)
    assert snapshot.parsed == 5


def test_the_parse_cache_parts_are_merged_only_past_the_limit_of_intact_parts(library, monkeypatch):
    """Each freeze that parses adds a part; the parts are merged only when more than
    ``MAX_CACHE_PARTS`` of them are intact (a damaged file is counted, then found out), and the
    merged part keeps every document, so nothing is parsed again."""
    from rag_eval_pipeline.lib.inputs import snapshot_store

    monkeypatch.setattr(snapshot_store, "MAX_CACHE_PARTS", 2)
    folders = [library / "2026-10-01"]
    freeze(folders[0])
    store = SnapshotStore.beside(folders[0])
    parts = store.root / "parsed"

    def next_snapshot(name: str, old: str, new: str) -> Path:
        folder = writable_copy(folders[0], library / name)
        (folder / "manifest.json").unlink()
        edit(folder / "documents" / "STORE-FRIDGE-001@v1.md", old, new)
        freeze(folder)
        folders.append(folder)
        return folder

    next_snapshot("2026-11-01", "8 °C", "6 °C")
    assert len(list(parts.rglob("*.parquet"))) == 2  # not past the limit
    # A third part that is damaged: three files, two intact parts, so no merge.
    damaged = sorted(parts.rglob("*.parquet"))[0]
    os.chmod(damaged, 0o644)
    kept_bytes = damaged.read_bytes()
    damaged.write_bytes(b"not parquet")
    next_snapshot("2026-12-01", "8 °C", "7 °C")
    assert len(list(parts.rglob("*.parquet"))) == 3
    damaged.write_bytes(kept_bytes)  # repaired: three intact parts now, past the limit
    next_snapshot("2027-01-01", "8 °C", "5 °C")
    merged = list(parts.rglob("*.parquet"))
    assert len(merged) == 1 and merged[0].stem == hashlib.sha256(merged[0].read_bytes()).hexdigest()
    for folder in folders:
        assert load_snapshot(folder).parsed == 0, folder


# -- the fast paths give exactly what the slow ones give --------------------------------------

FRONT_MATTERS = [
    "doc_id: A-1\ntitle: Plain title\nversion: 3\neffective_date: 2026-03-01\nstatus: current",
    "doc_id: A-1\ntitle: 'Quoted: title'\nversion: '2'\neffective_date: 2026-03-01",
    "title: With # not a comment\nowner: Lab",
    "title: value # a comment\nversion: 03",
    "version: 1_000\nflag: yes\nother: on\nnothing: ~\nempty:",
    "title: Null\nlanguage: no\nname: NULL\nx: 1.5\ny: .inf\nz: 1:20",
    "date: 2026-7-1\nwhen: 2026-07-01 10:00:00\nlist: [a, b]\nmap: {a: 1}",
    "title: Ünïcödé title\nowner: Équipe",
    "title:   spaced out   \nsuperseded_by: A-1@v4",
    "title: -20 °C storage\nx: -3\ny: +3\nz: 0x1f",
    "title: &anchor value\nother: *anchor",
    "title: multi\n  line continued",
    "yes: key is a bool\nno: again",
    "title: tab\there",
    "",
]


@pytest.mark.parametrize("text", FRONT_MATTERS)
def test_front_matter_is_what_the_yaml_parser_reads(text):
    lines = text.split("\n")
    try:
        expected = yaml.safe_load(text) or {}
    except yaml.YAMLError:
        with pytest.raises(CorpusError, match="front matter is not valid YAML"):
            corpus.front_matter(lines, "doc.md")
        return
    if not isinstance(expected, dict):
        with pytest.raises(CorpusError):
            corpus.front_matter(lines, "doc.md")
        return
    got = corpus.front_matter(lines, "doc.md")
    assert got == expected
    assert [type(v) for v in got.values()] == [type(v) for v in expected.values()]


TRICKY = [
    "plain",
    'quote " and \\ back',
    "tab\there",
    "nl\nx",
    "\x00\x01\x1f\x7f",
    "é ü ß 日本",
    "😀",
]


def test_a_texts_json_is_json_dumps_for_every_character():
    """The texts' escaping shortcut (``_json_text``) gives ``json.dumps``' bytes for every code
    point, between newlines and beside a quote and a backslash."""
    for point in range(0x110000):
        character = chr(point)
        for text in (f"a\n{character}\nb", f'\\{character}"'):
            expected = json.dumps(text, ensure_ascii=False)
            assert corpus._json_text(text) == expected, hex(point)


def test_orjson_escapes_every_character_as_json_dumps_does():
    """The freeze's lines are built with ``orjson.dumps`` of each title and text
    (``_encoded_block``): its bytes are ``json.dumps(ensure_ascii=False)``'s for every code point
    (surrogates aside: a text decoded from UTF-8 has none), alone, between newlines and beside
    a quote and a backslash, and in strings long enough for its vectorised paths."""
    for point in range(0x110000):
        if 0xD800 <= point <= 0xDFFF:
            continue
        character = chr(point)
        for text in (character, f"a\n{character}\nb", f'\\{character}"', "x" * 37 + character * 41):
            expected = json.dumps(text, ensure_ascii=False).encode("utf-8")
            assert corpus._dumps(text) == expected, hex(point)


def tricky_document(value: str, sections: int = 2) -> corpus.Document:
    return corpus.Document(
        doc_id="D-1",
        title=f"Title {value}  ",
        version=2,
        effective_date=dt.date(2026, 1, 2),
        status="superseded",
        language="en",
        sections=tuple(
            (f"Heading {n} {value}", f"Body {value}\nmore {n}\t{value}") for n in range(sections)
        ),
        superseded_by="D-1@v3",
    )


@pytest.mark.parametrize("sections", [1, 9, 10, 12])
@pytest.mark.parametrize("value", TRICKY)
def test_the_freezes_encoded_block_is_the_canonical_one(value, sections):
    """``_encoded_block`` (the freeze's and the load's parser, building bytes) gives the block,
    document digest and passage digests of the canonical lines (``canonical_row``)."""
    document = tricky_document(value, sections)
    expected = corpus.canonical_row(document)
    block, document_digest, passage_digests = corpus._encoded_block(
        document,
        [(corpus.normalise_text(t), corpus.normalise_text(x)) for t, x in document.sections],
    )
    assert block == expected["block"].encode("utf-8")
    assert document_digest == expected["document_digest"]
    assert passage_digests.split(" ") == expected["passage_digests"]


def test_a_block_of_ten_sections_or_more_lists_them_by_passage_id():
    """Passage ids sort as strings (``#s10`` before ``#s2``): a block of up to nine sections is
    in section order, a longer one is sorted, as the digest's sorted lines are."""
    document = corpus.Document(
        doc_id="D-1",
        title="T",
        version=1,
        effective_date=dt.date(2026, 1, 2),
        status="current",
        language="en",
        sections=tuple((f"S{n}", f"text {n}") for n in range(1, 13)),
    )
    row = corpus.canonical_row(document)
    ids = [json.loads(line)["passage_id"] for line in row["block"].split("\n")]
    assert ids == sorted(f"D-1@v1#s{n}" for n in range(1, 13)) and ids[1] == "D-1@v1#s10"
    short = corpus.canonical_row(replace(document, sections=document.sections[:9]))
    assert [json.loads(line)["passage_id"] for line in short["block"].split("\n")] == [
        f"D-1@v1#s{n}" for n in range(1, 10)
    ]
    ten = corpus.canonical_row(replace(document, sections=document.sections[:10]))
    assert [json.loads(line)["passage_id"] for line in ten["block"].split("\n")][:3] == [
        "D-1@v1#s1",
        "D-1@v1#s10",
        "D-1@v1#s2",
    ]


@pytest.mark.parametrize("value", TRICKY)
def test_canonical_lines_are_the_json_the_digest_defines(value):
    document = corpus.Document(
        doc_id="D-1",
        title=f"Title {value}  ",
        version=2,
        effective_date=dt.date(2026, 1, 2),
        status="superseded",
        language="en",
        sections=((f"Heading {value}", f"Body {value}\nmore"), ("Second", value or "x")),
        superseded_by="D-1@v3",
    )
    expected = [
        json.dumps(
            {
                "passage_id": f"D-1@v2#s{number}",
                "doc_id": "D-1",
                "version": 2,
                "status": "superseded",
                "superseded_by": "D-1@v3",
                "effective_date": "2026-01-02",
                "language": "en",
                "title": corpus.normalise_text(document.title),
                "section_title": corpus.normalise_text(title),
                "text": corpus.normalise_text(text),
            },
            sort_keys=True,
            ensure_ascii=False,
            separators=(",", ":"),
        )
        for number, (title, text) in enumerate(document.sections, start=1)
    ]
    assert corpus.canonical_lines(document) == expected


def test_normalise_text_agrees_with_the_definition():
    def by_definition(text: str) -> str:
        lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        return "\n".join(line.rstrip() for line in lines).strip()

    for text in [
        "a\nb",
        " a ",
        "a \nb",
        "a\t\nb",
        "a\x0b\nb",
        "a\u00a0\nb",
        "a\n\n\nb",
        "é\u2003\nb",
        "\n\n  a \n b\t\n\n",
        " \u2003\n\n",
        "",
    ]:
        assert corpus.normalise_text(text) == by_definition(text)


def test_staging_and_the_bm25_cache_work_on_an_fsspec_store(tmp_path):
    """A run store at an fsspec URL (``memory://``, as ``s3://`` in production): the sliced
    passages part and the reference system's BM25 index cache are written and read back there,
    with no temporary file left behind."""
    from polars.testing import assert_frame_equal
    from upath import UPath

    from rag_eval_pipeline.lib.store.tables import conform
    from rag_eval_pipeline.lib.systems.bm25 import BM25Index
    from rag_eval_pipeline.lib.systems.reference import ReferenceSystem

    folder = project_path("corpus_snapshots") / "2026-11-01"
    expected = corpus.snapshot_tables(load_snapshot(folder), dt.datetime(2026, 10, 15))
    store = RunStore(f"memory://staging-{os.getpid()}")
    stage_snapshot(store, folder, dt.datetime(2026, 10, 15))
    corpus_dir = store.corpus_dir(BUNDLED["2026-11-01"])
    passages = store.read_table(corpus_dir, "corpus_passages")
    assert_frame_equal(passages, conform(expected["corpus_passages"], "corpus_passages"))
    cache = store.cache_dir("systems")
    first = ReferenceSystem(passages, index_cache=cache)
    first.index()
    (stored,) = list(UPath(cache).iterdir())
    assert stored.name == f"{first.index_key()}.npz"
    second = ReferenceSystem(passages, index_cache=cache)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(BM25Index, "build", lambda *args, **kwargs: pytest.fail("built again"))
        assert second.index().vocabulary == first.index().vocabulary
    leftovers = [path for path in UPath(store.root).rglob("*") if path.name.endswith(".tmp")]
    assert not leftovers


def test_a_checkout_without_the_store_loads_a_delta_manifest_from_its_base_folder(
    library, tmp_path
):
    """Git keeps each snapshot's documents/ and manifest.json, not the store: a colleague's
    checkout of a corpus root whose second snapshot lists only its changes reads the base from
    the first snapshot's manifest.json (the bytes the delta names), and still names a document
    edited since it was frozen."""
    first = library / "2026-10-01"
    freeze(first)
    second = writable_copy(first, library / "2026-11-01")
    edit(second / "documents" / "STORE-FRIDGE-001@v1.md", "8 °C", "6 °C")
    frozen = freeze(second).manifest
    assert json.loads((second / "manifest.json").read_text())["base"]["snapshot_id"] == (
        "2026-10-01"
    )
    checkout = tmp_path / "checkout"
    for name in ("2026-10-01", "2026-11-01"):
        shutil.copytree(library / name, checkout / name)
    assert not (checkout / STORE_NAME).exists()
    loaded = load_snapshot(checkout / "2026-11-01")
    assert loaded.corpus_digest == frozen["corpus_digest"]
    assert loaded.document_count == 5
    edit(checkout / "2026-11-01" / "documents" / "LAB-LABEL-001@v2.md", "15 minutes", "20 min")
    with pytest.raises(CorpusError, match=r"changed: LAB-LABEL-001@v2"):
        load_snapshot(checkout / "2026-11-01")


def test_refreezing_a_folder_in_place_never_lists_changes_from_its_own_old_manifest(library):
    """The folder's own earlier manifest is replaced by the freeze, so it is never the base: a
    folder edited and frozen again lists every document (or its changes from another
    snapshot folder), and loads without the store."""
    folder = library / "2026-10-01"
    freeze(folder)
    edit(folder / "documents" / "STORE-FRIDGE-001@v1.md", "8 °C", "6 °C")
    again = freeze(folder).manifest
    written = json.loads((folder / "manifest.json").read_text())
    assert "base" not in written and len(written["documents"]) == 5
    shutil.rmtree(library / STORE_NAME)
    assert load_snapshot(folder).corpus_digest == again["corpus_digest"]
