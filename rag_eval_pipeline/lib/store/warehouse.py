"""The DuckDB warehouse: one published file that readers open, written privately, published atomically.

Analysts and auditors open the warehouse file with the DuckDB CLI for as long as they like. DuckDB
lets one process write a file and refuses other processes while it does (a read-only session held
open makes a writer fail on the lock, and the other way round), so nothing ever writes the
published file in place:

1. a writer takes the publish lock (``<file>.lock``, so writers queue instead of losing each
   other's rows),
2. copies the published file to a private working file beside it,
3. writes there (schema, migrations, its rows; each table's rows of one scope replaced in one
   transaction),
4. checkpoints and closes it, and renames it over the published path.

A reader opens the published file read-only and sees the state before or after a write, never a
part of one; a session held open keeps reading the state it opened, and sees new runs when it
reconnects. A failed write leaves the published file as it was.

A session that opens the published file read-write is the one thing this cannot live with:
DuckDB then lets no other process open the file, and what that session writes goes to a
write-ahead log beside the file (``<file>.wal``) that would not match the file a writer renames
into place, so no reader could open the warehouse afterwards. A writer therefore refuses to
publish while such a session holds the file (``WarehouseUnavailable``, naming the process and
what to do), checked before it copies and again just before it renames; the log of a session
that died before checkpointing is copied with the file, its changes published with the write,
and removed. A reader that finds the file held says the same instead of DuckDB's bare lock error.

Writes replace the rows of one scope (an ``eval_run_id`` or a digest), so re-running a partition
replaces that run's rows and nothing else.
"""

import os
import re
import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb
import polars as pl
from filelock import FileLock

from rag_eval_pipeline.lib.errors import RagEvalError
from rag_eval_pipeline.lib.store.sql import ArrowStream, query_frame, sql_query, sql_statements
from rag_eval_pipeline.lib.store.tables import SCOPE_COLUMNS, TABLES, VIEWS, conform

LOCK_TIMEOUT_S = 1800.0
# A DuckDB database file carries these bytes at offset 8 (its main header).
DUCKDB_MAGIC = b"DUCK"
DUCKDB_MAGIC_OFFSET = 8


def location_problem(path: Path) -> str | None:
    """Why ``path`` cannot be a warehouse file, or ``None``: the nearest folder of it that exists
    must be a folder (not a file it would be written under), and a file already there must be a
    DuckDB database (not, say, a YAML file the setting named by mistake)."""
    if path.is_dir():
        return "is a folder, not a DuckDB file"
    if path.exists():
        with path.open("rb") as opened:
            header = opened.read(DUCKDB_MAGIC_OFFSET + len(DUCKDB_MAGIC))
        if header[DUCKDB_MAGIC_OFFSET:] != DUCKDB_MAGIC:
            return "exists and is not a DuckDB database"
        return None
    for parent in path.parents:
        if parent.exists():
            return None if parent.is_dir() else f"{parent} is a file, not a folder"
    return None


# DuckDB's words for a file another process holds read-write.
_LOCK_HOLDER = re.compile(r"Conflicting lock is held in (?P<program>.*?) \(PID (?P<pid>\d+)\)")


class WarehouseUnavailable(RagEvalError):
    """The published warehouse cannot be opened or published over as it is now: a session holds
    it read-write, or a write-ahead log beside it holds changes it does not have (the module
    docstring). A step it fails exits 1, as a failure of the store; a command that only reads,
    2."""


def _read_write_advice(path: Path) -> str:
    return (
        f"close that session, or open the warehouse read-only (duckdb -readonly {path}, or "
        "duckdb.connect(path, read_only=True))"
    )


def unavailable(path: Path, error: Exception) -> WarehouseUnavailable:
    """``WarehouseUnavailable`` for DuckDB's ``error`` opening ``path``: the process holding it,
    or the log that does not match it, and what to do."""
    text = " ".join(str(error).split())
    if held := _LOCK_HOLDER.search(text):
        return WarehouseUnavailable(
            f"{path}: held open read-write by PID {held['pid']} ({held['program']}), and DuckDB "
            f"lets no other process open it meanwhile: {_read_write_advice(path)}"
        )
    if "WAL" in text:
        return WarehouseUnavailable(
            f"{path}.wal: a write-ahead log that does not match the warehouse file (a read-write "
            "session wrote to a file since replaced): its changes are not in the warehouse; move "
            f"it aside to read the warehouse again (DuckDB: {text})"
        )
    return WarehouseUnavailable(f"{path}: cannot be opened: {text}")


def _config(path: Path) -> dict:
    # Never let DuckDB reach for ~/.duckdb or the network for extensions.
    return {"extension_directory": str(path.parent / ".duckdb_extensions")}


def upgrade(connection: duckdb.DuckDBPyConnection) -> None:
    """Create the tables, upgrade a warehouse written by an earlier version, create the views."""
    for statement in sql_statements("schema"):
        connection.execute(statement)
    if connection.sql(sql_query("migrations", "legacy_eval_runs_is_a_table")).fetchall()[0][0]:
        for step in ("legacy_records", "legacy_baselines", "legacy_drop"):
            connection.execute(sql_query("migrations", step))
    for step in (
        "decision_suite_column",
        "decision_suite_value",
        "optional_outcomes",
        "capture_columns",
        "measures_version_column",
        "comparison_alpha_column",
    ):
        connection.execute(sql_query("migrations", step))
    for statement in sql_statements("views"):
        connection.execute(statement)


class Warehouse:
    """The published warehouse file and how to read and write it (module docstring)."""

    def __init__(self, path: Path | str):
        self.path = Path(path)

    @property
    def lock_path(self) -> Path:
        return self.path.with_name(self.path.name + ".lock")

    def exists(self) -> bool:
        return self.path.is_file()

    @contextmanager
    def reading(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A read-only connection to the published warehouse (created empty if there is none)."""
        if not self.exists():
            with self.writing():
                pass
        try:
            connection = duckdb.connect(str(self.path), read_only=True, config=_config(self.path))
        except duckdb.IOException as error:
            raise unavailable(self.path, error) from None
        try:
            yield connection
        finally:
            connection.close()

    def _remove_abandoned_copies(self) -> None:
        """Remove the private copies (and their write-ahead logs) of writers that died while
        writing (``kill -9`` during a publish): a writer makes its copy only while it holds the
        publish lock, so under the lock every copy but the holder's own is abandoned."""
        pattern = re.compile(rf"\.{re.escape(self.path.name)}\.[0-9]+\.[0-9a-f]{{32}}(\.wal)?")
        for leftover in self.path.parent.glob(f".{self.path.name}.*"):
            if pattern.fullmatch(leftover.name):
                leftover.unlink(missing_ok=True)

    @property
    def log_path(self) -> Path:
        """The write-ahead log a read-write session of the published file leaves beside it."""
        return self.path.with_name(self.path.name + ".wal")

    def refuse_other_writer(self) -> None:
        """Raise ``WarehouseUnavailable`` when a read-write session holds the warehouse (a
        read-only probe cannot take its lock): publishing over it would lose what the session
        writes, and its log would not match the file published."""
        if not self.exists():
            return
        try:
            duckdb.connect(str(self.path), read_only=True, config=_config(self.path)).close()
        except duckdb.IOException as error:
            raise WarehouseUnavailable(
                f"{unavailable(self.path, error)}; nothing was published (the run's rows stay in "
                "the run store: run the night again once the session is closed)"
            ) from None

    def _log_state(self) -> tuple[int, int] | None:
        """Size and modification time of the log beside the warehouse; None when there is none."""
        try:
            status = os.stat(self.log_path)
        except FileNotFoundError:
            return None
        return status.st_size, status.st_mtime_ns

    @contextmanager
    def writing(
        self,
        before_publish: Callable[[], None] | None = None,
        after_publish: Callable[[], None] | None = None,
    ) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection to a private copy, published atomically when the block ends without error.

        ``before_publish`` is called once the copy is written out, just before it replaces the
        warehouse: what must exist before readers see the new figures (a run's report) is
        finished there, and if it raises nothing is published. ``after_publish`` is called
        right after, still under the publish lock, so what it puts in place (the report
        renamed into place) follows the publishes in their order."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(self.lock_path), timeout=LOCK_TIMEOUT_S):
            self._remove_abandoned_copies()
            self.refuse_other_writer()
            working = self.path.with_name(f".{self.path.name}.{os.getpid()}.{uuid.uuid4().hex}")
            # A log a read-write session left (killed before it checkpointed) holds changes the
            # file has not: copied with it, DuckDB replays it into the copy, which is published.
            log = self._log_state()
            try:
                if self.exists():
                    shutil.copyfile(self.path, working)
                    if log is not None:
                        shutil.copyfile(self.log_path, working.with_name(working.name + ".wal"))
                connection = duckdb.connect(str(working), config=_config(self.path))
                try:
                    upgrade(connection)
                    yield connection
                    connection.execute("CHECKPOINT")
                finally:
                    connection.close()
                with working.open("rb") as handle:
                    os.fsync(handle.fileno())
                if before_publish is not None:
                    before_publish()
                self.refuse_other_writer()  # a session may have opened it since the copy
                if self._log_state() != log:
                    raise WarehouseUnavailable(
                        f"{self.log_path}: written by a read-write session while this write "
                        "was copying the warehouse; nothing was published: run it again"
                    )
                # The log's changes are in the copy: removed first, so that a reader meanwhile
                # opens the file as it was, never the new file with the old file's log.
                self.log_path.unlink(missing_ok=True)
                os.replace(working, self.path)
                if after_publish is not None:
                    after_publish()
            finally:
                for leftover in (working, working.with_name(working.name + ".wal")):
                    leftover.unlink(missing_ok=True)


def _checked(table: str, scope: dict[str, str]) -> str:
    """The ``WHERE`` clause of ``scope`` (bound parameters) for a contract table."""
    if table not in TABLES:
        raise ValueError(f"unknown warehouse table {table!r}")
    if not scope or not set(scope) <= SCOPE_COLUMNS:
        raise ValueError(f"scope must use only {sorted(SCOPE_COLUMNS)}, got {sorted(scope)}")
    return " AND ".join(f"{column} = ${column}" for column in scope)


def replace_rows(
    connection: duckdb.DuckDBPyConnection, table: str, frame: pl.DataFrame, scope: dict[str, str]
) -> int:
    """Delete the rows of ``table`` matching ``scope`` and insert ``frame``, in one transaction.

    The table name comes from the fixed list of contract tables (identifiers cannot be bound);
    the scope values are bound parameters.
    """
    where = _checked(table, scope)
    rows = conform(frame, table)
    connection.execute("BEGIN TRANSACTION")
    try:
        connection.execute(f'DELETE FROM "{table}" WHERE {where}', scope)
        if rows.height:
            connection.register("incoming_rows", ArrowStream(rows))
            connection.execute(f'INSERT INTO "{table}" BY NAME SELECT * FROM incoming_rows')
            connection.unregister("incoming_rows")
        connection.execute("COMMIT")
    except Exception:
        connection.execute("ROLLBACK")
        raise
    return rows.height


def replace_rows_from_parquet(
    connection: duckdb.DuckDBPyConnection, table: str, files: list[str], scope: dict[str, str]
) -> int:
    """``replace_rows`` with the rows of local Parquet ``files`` already shaped as ``table``
    (``RunStore.write_table`` wrote them), read by DuckDB itself: no frame of them is built.

    Every row must carry the scope's values (a file of another scope would be loaded under the
    wrong digest): the scope's rows, deleted before the insert, must afterwards be as many as it
    inserted; a mismatch rolls the transaction back and raises."""
    where = _checked(table, scope)
    connection.execute("BEGIN TRANSACTION")
    try:
        connection.execute(f'DELETE FROM "{table}" WHERE {where}', scope)
        count = connection.execute(
            f'INSERT INTO "{table}" BY NAME SELECT * FROM read_parquet($files)', {"files": files}
        ).fetchall()[0][0]
        inside = connection.execute(
            f'SELECT count(*) FROM "{table}" WHERE {where}', scope
        ).fetchall()[0][0]
        outside = count - inside
        if outside:
            raise ValueError(
                f"{', '.join(files)}: {outside} row(s) for {table} lie outside {scope}; "
                "nothing was loaded"
            )
        connection.execute("COMMIT")
    except Exception:
        connection.execute("ROLLBACK")
        raise
    return count


@contextmanager
def memory_limit(connection: duckdb.DuckDBPyConnection, limit: str) -> Iterator[None]:
    """DuckDB's ``memory_limit`` set to ``limit`` for the block, then reset to DuckDB's default
    (the warehouse connections set none; reading the setting back would round it).

    Under a limit, a large insert writes its row groups to the database file as they fill instead
    of holding the whole transaction in memory: loading a 96,000-passage corpus (157 MB of text)
    peaks about 255 MB above the process instead of about 475 MB, for about 0.3 s more."""
    connection.execute(f"SET memory_limit = '{limit}'")
    try:
        yield
    finally:
        connection.execute("RESET memory_limit")


def read_frame(
    connection: duckdb.DuckDBPyConnection, query: str, parameters: dict | None = None
) -> pl.DataFrame:
    """A query's result as a Polars frame (parameters bound, never formatted in)."""
    return query_frame(connection, query, parameters)


def table_counts(connection: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Row count of every contract table and view."""
    return {
        table: connection.sql(f'SELECT count(*) FROM "{table}"').fetchall()[0][0]
        for table in (*TABLES, *VIEWS)
    }
