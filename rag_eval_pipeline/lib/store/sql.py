"""The project's SQL, read from ``sql/`` (shipped in the wheel as ``rag_eval_pipeline/sql``).

A file holds one statement, or several named queries each opened by a ``-- name: <query>`` line
(``sql_query("runs", "latest_complete")``). Parameters are named (``$name``) and bound at execution,
never formatted in.
"""

import re
from functools import cache
from pathlib import Path

from rag_eval_pipeline.lib.paths import packaged_path

NAME_LINE = re.compile(r"^--\s*name:\s*([a-z0-9_]+)\s*$", re.MULTILINE)


def sql_dir() -> Path:
    """The folder of SQL files: inside the installed package, else the checkout's ``sql/``."""
    return packaged_path("sql")


@cache
def load_sql(name: str) -> str:
    """The text of ``sql/<name>.sql``."""
    path = sql_dir() / f"{name}.sql"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such SQL file")
    return path.read_text(encoding="utf-8")


@cache
def named_queries(name: str) -> dict[str, str]:
    """The named queries of ``sql/<name>.sql``, keyed by name."""
    text = load_sql(name)
    marks = list(NAME_LINE.finditer(text))
    if not marks:
        raise ValueError(f"{sql_dir() / name}.sql has no '-- name:' queries")
    queries = {}
    for mark, following in zip(marks, [*marks[1:], None], strict=True):
        body = text[mark.end() : following.start() if following else len(text)]
        queries[mark.group(1)] = body.strip().rstrip(";")
    return queries


def sql_query(name: str, query: str) -> str:
    """One named query of ``sql/<name>.sql``."""
    queries = named_queries(name)
    if query not in queries:
        raise KeyError(f"sql/{name}.sql has no query {query!r}; it has {', '.join(queries)}")
    return queries[query]


def sql_statements(name: str) -> list[str]:
    """The statements of a SQL file, split at semicolons that end a line."""
    return [part.strip() for part in load_sql(name).split(";\n") if part.strip()]


def query_frame(connection, query: str, parameters: dict | list | None = None):
    """Run a query with bound parameters and return a Polars frame."""
    return connection.sql(query, params=parameters).pl()


class ArrowStream:
    """A Polars frame seen only through the Arrow C stream interface (``__arrow_c_stream__``),
    for ``connection.register``: DuckDB scans its columns (string views included) without the
    copy ``DataFrame.to_arrow()`` makes and without pyarrow or NumPy being imported. Each scan
    asks for a new stream, so a registered frame can be read by several statements."""

    def __init__(self, frame) -> None:
        self.frame = frame

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        return self.frame.__arrow_c_stream__(requested_schema)
