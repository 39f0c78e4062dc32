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
        connection = duckdb.connect(str(self.path), read_only=True, config=_config(self.path))
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
            working = self.path.with_name(f".{self.path.name}.{os.getpid()}.{uuid.uuid4().hex}")
            try:
                if self.exists():
                    shutil.copyfile(self.path, working)
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
