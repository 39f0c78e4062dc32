"""The snapshot store: document versions kept once, by the SHA-256 of their bytes.

Layout, beside the dated snapshot folders of a corpus root::

    corpus_snapshots/
      .snapshot_store/
        objects/ab/cdef...          the bytes of one document version (or of a manifest), named
                                    by their SHA-256, read-only
        parsed/canonical-v1/<digest>.parquet
                                    the parse cache: each parsed document's canonical lines
                                    and digests, by the SHA-256 of its file's bytes; a part is
                                    named by the SHA-256 of its own bytes and ignored when it
                                    does not match (derived data: deleting it costs a re-parse)
      2026-10-01/
        manifest.json               document versions and their digests (also kept as an object)
        documents/<id>@v<n>.md      hard links to the stored bytes

Freezing stores each file's bytes as an object unless an object with the same digest exists, and
makes the file in ``documents/`` a hard link to it, so a snapshot that repeats most of the one
before it adds only the changed documents to the disk. A manifest lists every document version
with its document digest (over its passages, as before), ``sha256`` and ``bytes`` of its file;
when it is frozen after another snapshot in the same store (its *base*), it lists only the
versions that are new or changed, the ones ``removed``, and the base manifest's object digest, so
a manifest costs the size of the change too. A base is always another snapshot folder's manifest,
never the folder's own earlier one. Loading applies the chain (at most ``MAX_BASE_DEPTH`` deep)
and checks every stored object it reads against its name. A checkout without the store (it is not
kept in git: ``documents/`` and ``manifest.json`` are) loads as well: each base manifest is then
read from its snapshot folder beside this one, where its SHA-256 must be the one the delta names.

The documents stay readable markdown files in ``documents/``, and a folder of markdown files
without a store still loads (its manifest lists every document, as before). Because the files are
hard links to the stored bytes, editing one in place would edit the stored version too: objects are
read-only, and a file edited anyway no longer matches its manifest and fails loudly when loaded or
frozen. Start a new snapshot from a copy (``cp -r``, then ``chmod -R u+w`` on the copy: copies of
read-only files are read-only), edit it, then freeze it.
"""

import contextlib
import hashlib
import itertools
import json
import math
import os
import stat
import threading
import uuid
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import polars as pl

from rag_eval_pipeline.lib.errors import InputError

MANIFEST_NAME = "manifest.json"
STORE_NAME = ".snapshot_store"
CACHE_VERSION = "canonical-v1"
MAX_BASE_DEPTH = 8
# A manifest lists only the changes from its base while they are at most this share of it.
MAX_DELTA_SHARE = 0.5
READ_ONLY = stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH
MAX_CACHE_PARTS = 32


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


# Temporary names are unique per process (a random prefix drawn once, and the process id, as
# a forked child keeps the prefix) and per call (a counter): as unique as a fresh ``uuid4`` per
# file, without drawing one for each of tens of thousands of files.
_TEMPORARY_PREFIX = uuid.uuid4().hex
_temporary_numbers = itertools.count()


def _temporary(folder: Path | str, name: str) -> str:
    unique = f"{_TEMPORARY_PREFIX}-{os.getpid()}-{next(_temporary_numbers)}"
    return os.path.join(folder, f".{name}.{unique}.tmp")


class _StopAfter:
    """The position after which ``add_files``' threads store nothing more: the first failed
    file's (-1 after an interrupt)."""

    def __init__(self) -> None:
        self.position = math.inf
        self._lock = threading.Lock()

    def lower(self, position: int) -> None:
        with self._lock:
            self.position = min(self.position, position)


class SnapshotStore:
    """The objects and the parse cache under ``root`` (``<corpus root>/.snapshot_store``)."""

    def __init__(self, root: Path | str):
        self.root = Path(root)
        self._objects = os.path.join(self.root, "objects")
        self._folders: set[str] = set()

    def __repr__(self) -> str:
        return f"SnapshotStore({str(self.root)!r})"

    @classmethod
    def beside(cls, snapshot_dir: Path) -> "SnapshotStore":
        """The store of the corpus root that holds ``snapshot_dir``."""
        return cls(Path(snapshot_dir).absolute().parent / STORE_NAME)

    # - objects -

    def object_path(self, digest: str) -> Path:
        return Path(self._object(digest))

    def _object(self, digest: str) -> str:
        return f"{self._objects}/{digest[:2]}/{digest[2:]}"

    def _folder_of(self, digest: str) -> str:
        folder = f"{self._objects}/{digest[:2]}"
        if folder not in self._folders:
            os.makedirs(folder, exist_ok=True)
            self._folders.add(folder)
        return folder

    def read_object(self, digest: str) -> bytes:
        """The stored bytes named ``digest``; ``ValueError`` when missing or not those bytes."""
        path = self._object(digest)
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError:
            raise ValueError(f"stored object {digest} is missing from {self.root}") from None
        if sha256_hex(data) != digest:
            raise ValueError(f"stored object {path} was changed: its bytes are not {digest}")
        return data

    def _write_object(self, digest: str, data: bytes) -> None:
        """Store ``data`` as a new read-only file (replacing a damaged object of that name)."""
        temporary = _temporary(self._folder_of(digest), digest[2:])
        with open(temporary, "wb") as handle:
            handle.write(data)
        os.chmod(temporary, READ_ONLY)
        os.replace(temporary, self._object(digest))

    def _adopt(self, digest: str, path: Path | str, read=None) -> bool:
        """Make the file at ``path`` (linked nowhere else) the object ``digest`` by hard linking
        it, without copying; False when the object exists already or the file system cannot
        link. ``read`` (the ``corpus.DocumentFile`` as read) is checked to be the file linked:
        one written, replaced or removed since it was read and hashed is taken back out of the
        store, and fails the freeze (``_check_read``)."""
        target = self._object(digest)
        self._folder_of(digest)
        try:
            os.link(path, target)
        except FileNotFoundError:  # the folder is there: the file was removed
            raise _changed_while_freezing(read or path) from None
        except OSError:
            return False
        if read is not None:
            try:
                _check_read(target, read)
            except InputError:
                os.unlink(target)
                raise
        os.chmod(path, READ_ONLY)
        return True

    def _link_to_object(self, digest: str, path: Path | str, read=None) -> bool:
        """Replace the file at ``path`` by a hard link to the object ``digest`` (same bytes). A
        file written, replaced or removed since it was read (``read``, as in ``_adopt``) is left
        as it is and fails the freeze, so an edit saved before this check is not replaced by the
        bytes read before it; one that is a link to the object already (another freeze of the
        folder linked it) is kept."""
        temporary = _temporary(os.path.dirname(path), os.path.basename(path))
        try:
            os.link(self._object(digest), temporary)
        except OSError:
            return False
        try:
            if read is None or not _check_read(path, read, linked=temporary):
                os.replace(temporary, path)
        finally:
            with contextlib.suppress(FileNotFoundError):  # replaced, or the check failed
                os.unlink(temporary)
        return True

    def add_bytes(self, data: bytes) -> str:
        """Store ``data`` (a manifest) unless stored already; returns its digest."""
        digest = sha256_hex(data)
        if not os.path.isfile(self._object(digest)):
            self._write_object(digest, data)
        return digest

    def add_files(
        self, files: Sequence, previous: dict[str, dict], unseen: Collection[str] = ()
    ) -> tuple[int, list[str]]:
        """Store every document file's bytes once and make each file a hard link to them.

        ``files`` are ``corpus.DocumentFile``s as read; ``previous`` the entries the folder was
        frozen with before; ``unseen`` the file digests the parse cache did not know, most likely
        never stored: such a file is linked into the store at once (then checked to be the file
        read), and only when its object turns out to exist is it checked as below. Returns the
        bytes newly stored, and warnings: a file edited in place while it was a hard link to a
        stored version (that stored version is gone; snapshots that listed it no longer load),
        or a stored object found damaged and stored again.
        A file on another file system than the store (no hard link possible) stays a copy.

        The files are stored on two threads (system calls, mostly, which release the GIL: a
        re-freeze of a 20,000-document copy 4.4-4.6 s -> 3.6-4.1 s), split by digest so that
        one object is only ever written by one thread; the warnings come in file order. A file
        that fails stops both threads before any file after it in order (the other thread still
        stores the files before it, so the error raised is the first failing file's, as one
        thread would have found it); an interrupt stops both at their next file.
        """
        numbered = list(enumerate(files))
        halves = [
            [(n, f) for n, f in numbered if int(f.file_digest[-1], 16) % 2 == half]
            for half in (0, 1)
        ]
        stop = _StopAfter()
        with ThreadPoolExecutor(2) as pool:
            running = [
                pool.submit(self._add_numbered, half, previous, unseen, stop) for half in halves
            ]
            try:
                done = [future.result() for future in running]
            except BaseException:  # an interrupt: both threads stop at their next file
                stop.lower(-1)
                raise
        failures = [failure for _, _, failure in done if failure is not None]
        if failures:
            raise min(failures, key=lambda failure: failure[0])[1]
        problems = sorted((item for _, found, _ in done for item in found), key=lambda i: i[0])
        return sum(stored for stored, _, _ in done), [problem for _, problem in problems]

    def _add_numbered(
        self,
        files: Sequence[tuple[int, object]],
        previous: dict[str, dict],
        unseen: Collection[str],
        stop: "_StopAfter",
    ) -> tuple[int, list[tuple[int, str]], tuple[int, BaseException] | None]:
        """``add_files`` of ``(position, file)`` pairs, in position order: the bytes newly
        stored, each warning with the position of its file, and the position and error of the
        file that failed (the other thread then stops before any later position)."""
        stored = 0
        problems: list[tuple[int, str]] = []
        for position, document_file in files:
            if position > stop.position:
                break
            try:
                stored += self._add_one(document_file, previous, unseen, position, problems)
            except Exception as error:
                stop.lower(position)
                return stored, problems, (position, error)
        return stored, problems, None

    def _add_one(
        self, document_file, previous: dict[str, dict], unseen: Collection[str], position, problems
    ) -> int:
        """Store one file (``add_files``); returns the bytes newly stored."""
        digest = document_file.file_digest
        target = self._object(digest)
        adoptable = document_file.links == 1 and not document_file.symlink
        # Not adopted: stored already (checked below as any stored object is), or no hard link
        # possible here.
        if (
            adoptable
            and digest in unseen
            and self._adopt(digest, document_file.location, document_file)
        ):
            return document_file.size
        try:
            existing = os.stat(target)
        except FileNotFoundError:
            existing = None
        if existing is not None and (existing.st_dev, existing.st_ino) == document_file.inode:
            return 0
        damaged = existing is not None and (
            existing.st_size != document_file.size or _read(target) != document_file.content()
        )
        if damaged:
            problems.append((position, f"{target}: stored object was damaged; stored again"))
            existing = None
        stored = 0
        if existing is None:
            stored = document_file.size
            # A damaged object is replaced (a hard link cannot replace it: its name is taken).
            if (
                not damaged
                and adoptable
                and self._adopt(digest, document_file.location, document_file)
            ):
                return stored
            # Checked before anything is forgotten: a freeze that fails forgets nothing.
            _check_read(document_file.location, document_file)
            self._write_object(digest, document_file.content())
            problems.extend(
                (position, problem) for problem in self._forget_edited(document_file, previous)
            )
        if not document_file.symlink:
            self._link_to_object(digest, document_file.location, document_file)
        return stored

    def _forget_edited(self, document_file, previous: dict[str, dict]) -> list[str]:
        """When the file shared its inode with the object it was frozen as, it was edited in
        place and that object no longer holds its bytes: remove it so nothing reads it."""
        frozen = previous.get(document_file.version_id, {}).get("sha256")
        if not frozen or frozen == document_file.file_digest:
            return []
        stale = self._object(frozen)
        try:
            status = os.stat(stale)
        except FileNotFoundError:
            return []
        if (status.st_dev, status.st_ino) != document_file.inode:
            return []
        os.unlink(stale)
        return [
            f"{document_file.path}: edited in place while it was a hard link to its frozen "
            f"version (stored object {frozen}); that version is gone, and snapshots listing it "
            "no longer load. Copy a snapshot (cp -r) before editing it."
        ]

    # - the parse cache -

    def _cache_folder(self) -> Path:
        return self.root / "parsed" / CACHE_VERSION

    def _cache_parts(self) -> list[Path]:
        """The parse cache's parts that are intact (each is named by the SHA-256 of its bytes;
        a part that is not is left out, so its documents are parsed again)."""
        folder = self._cache_folder()
        if not folder.is_dir():
            return []
        parts = []
        for part in sorted(folder.glob("*.parquet")):
            digest = hashlib.sha256()
            with open(part, "rb") as handle:
                while chunk := handle.read(1 << 20):
                    digest.update(chunk)
            if digest.hexdigest() == part.stem:
                parts.append(part)
        return parts

    def has_cached_rows(self) -> bool:
        """Whether the parse cache has a part (intact or not: ``cached_rows`` checks them)."""
        folder = self._cache_folder()
        return folder.is_dir() and any(folder.glob("*.parquet"))

    def cached_rows(self, wanted: Callable[[], pl.DataFrame], schema: dict) -> pl.DataFrame | None:
        """The parse cache's rows (``file_digest`` and ``schema``) for the ``(file_digest,
        doc_version_id)`` pairs ``wanted()`` gives, or None when the cache is empty.

        ``wanted`` is called once the first part is read: a thread can then check and read the
        cache while the files it will be asked about are still being read
        (``corpus._files_and_cached_rows``)."""
        columns = ["file_digest", *schema]
        frames = []
        pairs = None
        for part in self._cache_parts():
            if not set(columns) <= set(pl.read_parquet_schema(part)):
                continue
            rows = pl.read_parquet(part, columns=columns)
            if pairs is None:
                pairs = wanted()
            frame = rows.join(
                pairs, on=["file_digest", "doc_version_id"], how="semi", maintain_order="left"
            )
            if frame.height:
                frames.append(frame)
        if not frames:
            return None
        rows = pl.concat(frames, how="vertical") if len(frames) > 1 else frames[0]
        if rows["file_digest"].is_duplicated().any():
            rows = rows.unique("file_digest", keep="first", maintain_order=True)
        return rows.cast({"file_digest": pl.String, **schema})

    def add_cached_rows(self, rows: pl.DataFrame) -> None:
        """Add parsed documents' rows (keyed by ``file_digest``) to the parse cache, as one new
        part (the parts are merged when there are more than ``MAX_CACHE_PARTS``)."""
        if rows.height == 0:
            return
        self._write_cache_part(rows)
        # Parts are counted before they are checked (read and hashed): the check is for the
        # merge, which is rare.
        if sum(1 for _ in self._cache_folder().glob("*.parquet")) <= MAX_CACHE_PARTS:
            return
        parts = self._cache_parts()
        if len(parts) > MAX_CACHE_PARTS:
            merged = pl.scan_parquet(parts).unique("file_digest", keep="first").collect()
            kept = self._write_cache_part(merged)
            for part in parts:
                if part != kept:
                    part.unlink(missing_ok=True)

    def _write_cache_part(self, frame: pl.DataFrame) -> Path:
        folder = self._cache_folder()
        folder.mkdir(parents=True, exist_ok=True)
        temporary = _temporary(folder, "part.parquet")
        # LZ4: on one thread (the freeze's other threads keep the cores busy) the 20,000-document
        # library's part is written in 0.38-0.55 s against 0.54-0.69 s at Zstandard level 1, and
        # read in 0.09-0.14 s against 0.16-0.33 s, at 48 MB instead of 30 MB.
        frame.write_parquet(temporary, compression="lz4")
        digest = sha256_hex(_read(temporary))
        os.chmod(temporary, READ_ONLY)
        target = folder / f"{digest}.parquet"
        os.replace(temporary, target)
        return target


def _check_read(path: str, read, linked: str | None = None) -> bool:
    """Raise when the file at ``path`` is not ``read`` (a ``corpus.DocumentFile``) as it was
    read: removed, or another inode, size or modification time (written or replaced since).
    True when it is instead the same file as ``linked`` (a link to the object already)."""
    try:
        status = os.stat(path)
    except FileNotFoundError:
        raise _changed_while_freezing(read) from None
    if (
        (status.st_dev, status.st_ino) == read.inode
        and status.st_size == read.size
        and (read.modified_ns is None or status.st_mtime_ns == read.modified_ns)
    ):
        return False
    if linked is not None and os.path.samestat(status, os.stat(linked)):
        return True
    raise _changed_while_freezing(read)


def _changed_while_freezing(read) -> InputError:
    where = getattr(read, "path", read)
    return InputError(
        f"{where}: changed while the snapshot was being frozen (written, replaced or removed "
        "after it was read and hashed); it was left as it is and no manifest was written: "
        "freeze again once nothing is writing to the snapshot"
    )


# -- manifests -----------------------------------------------------------------------------------


def checked_manifest(manifest: object) -> dict:
    """``manifest`` when it has the keys a manifest needs; ``ValueError`` naming the key."""
    if not isinstance(manifest, dict):
        raise ValueError(f"a manifest is a JSON object, got a {type(manifest).__name__}")
    for key in ("snapshot_id", "corpus_digest", "documents"):
        if key not in manifest:
            raise ValueError(f"manifest has no '{key}'")
    documents = manifest["documents"]
    if not isinstance(documents, dict):
        raise ValueError(
            f"manifest key 'documents' must map each document version to its digests, "
            f"got a {type(documents).__name__}"
        )
    for version_id, entry in documents.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("digest"), str):
            raise ValueError(
                f"manifest key 'documents.{version_id}' must be an object with a 'digest'"
            )
    base = manifest.get("base")
    if base is not None and not (isinstance(base, dict) and isinstance(base.get("manifest"), str)):
        raise ValueError("manifest key 'base' must be an object with the base 'manifest' digest")
    if not isinstance(manifest.get("removed", []), list):
        raise ValueError("manifest key 'removed' must be a list of document versions")
    return manifest


def store_of(snapshot_dir: Path, manifest: dict) -> SnapshotStore | None:
    """The store a manifest names, or the one beside the folder if there is one."""
    if isinstance(manifest.get("store"), str):
        return SnapshotStore(os.path.normpath(Path(snapshot_dir).absolute() / manifest["store"]))
    beside = SnapshotStore.beside(snapshot_dir)
    return beside if beside.root.is_dir() else None


def relative_store(snapshot_dir: Path, store: SnapshotStore) -> str:
    return Path(os.path.relpath(store.root.absolute(), Path(snapshot_dir).absolute())).as_posix()


def _base_manifest_bytes(base: dict, store: SnapshotStore | None, folder: Path | None) -> bytes:
    """The bytes of a delta manifest's ``base`` (their SHA-256 is ``base["manifest"]``), from the
    store, else from ``folder``, the base's snapshot folder: the store keeps every manifest it
    froze; a checkout without the store (``.snapshot_store`` is not in git) still has the base
    snapshot's own ``manifest.json``, the same bytes while that snapshot was not frozen again."""
    if store is not None and store.object_path(base["manifest"]).is_file():
        return store.read_object(base["manifest"])
    if folder is not None:
        with contextlib.suppress(OSError):
            data = (folder / MANIFEST_NAME).read_bytes()
            if sha256_hex(data) == base["manifest"]:
                return data
    where = "no snapshot store" if store is None else f"the snapshot store {store.root}"
    if folder is not None:
        where += f", and {folder / MANIFEST_NAME} is not that manifest (missing, or frozen again)"
    raise ValueError(
        f"its base manifest (snapshot {base.get('snapshot_id')}, stored object "
        f"{base['manifest']}) is not in {where}: keep a snapshot folder beside the snapshot "
        f"it lists its changes from (or the {STORE_NAME} folder), or freeze the folder again"
    )


def resolve_entries(
    manifest: dict, store: SnapshotStore | None, depth: int = 0, *, folder: Path | None = None
) -> dict[str, dict]:
    """Every document version's entry: the manifest's own, applied to its base's (if any).
    ``folder`` is the snapshot folder of ``manifest``, beside which a base missing from the
    store is looked for (``_base_manifest_bytes``)."""
    base = manifest.get("base")
    if base is None:
        return dict(manifest["documents"])
    if depth >= MAX_BASE_DEPTH:
        raise ValueError(f"chain of base manifests is deeper than {MAX_BASE_DEPTH}")
    base_folder = (
        Path(folder).parent / base["snapshot_id"]
        if folder is not None and isinstance(base.get("snapshot_id"), str)
        else None
    )
    base_manifest = checked_manifest(json.loads(_base_manifest_bytes(base, store, base_folder)))
    entries = resolve_entries(base_manifest, store, depth + 1, folder=base_folder)
    for version_id in manifest.get("removed", []):
        entries.pop(version_id, None)
    entries.update(manifest["documents"])
    return entries


def _same_folder(first: Path, second: Path) -> bool:
    return os.path.normpath(Path(first).absolute()) == os.path.normpath(Path(second).absolute())


def _chain_depth(manifest: dict) -> int:
    base = manifest.get("base")
    return 0 if base is None else int(base.get("depth", MAX_BASE_DEPTH))


# ``json.dumps(value, ensure_ascii=False)``, without building an encoder for each call.
_json = json.JSONEncoder(ensure_ascii=False).encode


def _manifest_text(manifest: dict) -> str:
    """The manifest as JSON, one line per key and one per document version: as readable as an
    indented file, and written by the C encoder (``indent`` makes ``json`` use Python code)."""
    lines = []
    for key, value in manifest.items():
        if key == "documents" and isinstance(value, dict) and value:
            entries = [f"    {_json(k)}: {_json(v)}" for k, v in value.items()]
            lines.append('  "documents": {\n' + ",\n".join(entries) + "\n  }")
        else:
            lines.append(f"  {_json(key)}: {_json(value)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def write_manifest(snapshot_dir: Path, manifest: dict) -> bytes:
    """Write ``manifest.json`` to a temporary name, then rename it into place."""
    data = _manifest_text(manifest).encode("utf-8")
    target = Path(snapshot_dir) / MANIFEST_NAME
    temporary = target.with_suffix(".json.tmp")
    temporary.write_bytes(data)
    temporary.replace(target)
    return data


def _base_candidates(snapshot_dir: Path, store: SnapshotStore) -> list[Path]:
    """Manifests a new one may list its changes against: the snapshots beside it dated before
    it, newest first. Never the folder's own: this freeze replaces it, so a checkout without the
    store could not resolve a delta against it."""
    snapshot_dir = Path(snapshot_dir).absolute()
    # Only earlier snapshots: an older folder frozen again as a delta of a later one, itself a
    # delta of the older one's previous manifest, would leave a checkout without the store
    # unable to resolve either.
    return sorted(
        (
            p
            for p in snapshot_dir.parent.glob(f"*/{MANIFEST_NAME}")
            if p.parent.name < snapshot_dir.name
        ),
        key=lambda p: p.parent.name,
        reverse=True,
    )


def _choose_base(
    snapshot_dir: Path, store: SnapshotStore, entries: dict[str, dict]
) -> tuple[dict, dict[str, dict], str] | None:
    """The first candidate (``_base_candidates``) in the same store that is stored, resolvable
    and close enough."""
    for path in _base_candidates(snapshot_dir, store):
        try:
            data = path.read_bytes()
            manifest = checked_manifest(json.loads(data))
        except (OSError, ValueError):
            continue
        named = store_of(path.parent, manifest)
        if named is None or not _same_folder(named.root, store.root):
            continue
        digest = sha256_hex(data)
        if not store.object_path(digest).is_file() or _chain_depth(manifest) >= MAX_BASE_DEPTH:
            continue
        try:
            base_entries = resolve_entries(manifest, store, folder=path.parent)
        except (OSError, ValueError):
            continue
        changed = sum(1 for k, v in entries.items() if base_entries.get(k) != v)
        removed = len(base_entries.keys() - entries.keys())
        if changed + removed <= MAX_DELTA_SHARE * max(len(entries), 1):
            return manifest, base_entries, digest
    return None


def write_store_manifest(
    snapshot_dir: Path, store: SnapshotStore, header: dict, entries: dict[str, dict]
) -> dict:
    """Write the manifest of a stored snapshot (the changes from a base when there is a close
    one), keep its bytes as an object too, and return the manifest as written."""
    manifest = {**header, "store": relative_store(snapshot_dir, store)}
    base = _choose_base(snapshot_dir, store, entries)
    if base is None:
        manifest["documents"] = entries
    else:
        base_manifest, base_entries, digest = base
        manifest["base"] = {
            "snapshot_id": base_manifest["snapshot_id"],
            "manifest": digest,
            "depth": _chain_depth(base_manifest) + 1,
        }
        manifest["removed"] = sorted(base_entries.keys() - entries.keys())
        manifest["documents"] = {k: v for k, v in entries.items() if base_entries.get(k) != v}
    data = write_manifest(snapshot_dir, manifest)
    digest = sha256_hex(data)
    if not store.object_path(digest).is_file() and not store._adopt(
        digest, Path(snapshot_dir) / MANIFEST_NAME
    ):
        store._write_object(digest, data)
    return manifest
