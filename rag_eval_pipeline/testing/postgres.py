"""A throw-away PostgreSQL server from Debian's binaries, for Dagster's run and event storage.

``PostgresServer`` runs ``initdb`` and ``postgres`` from ``/usr/lib/postgresql/<version>/bin``
(Debian's ``postgresql`` package) on 127.0.0.1 with a fresh data folder, trust authentication and
``fsync=off`` (nothing here outlives the test), and stops it by its pid (SIGINT: PostgreSQL's fast
shutdown, which does not wait for clients). PostgreSQL refuses to run as root, so under root
both run as the ``postgres`` user the package creates (``setpriv``); its data folder is a fresh
one under the system's temporary folder (a test's ``tmp_path`` is private to root), removed when
the server stops.

    with PostgresServer() as server:
        (home / "dagster.yaml").write_text(server.instance_settings("PG_PASSWORD"))
"""

import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import yaml

from rag_eval_pipeline.testing.engine import StartedProcesses, free_port, stop, wait_for_port

USER = "dagster"
DATABASE = "postgres"


def postgres_bin() -> Path | None:
    """The newest Debian PostgreSQL ``bin`` folder, or None when none is installed."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=lambda p: int(p.split("/")[4])
    )
    return Path(found[-1]).parent if found else None


class PostgresServer(StartedProcesses):
    """One PostgreSQL server on 127.0.0.1, with a data folder of its own."""

    def __init__(self, bin_dir: Path | None = None):
        self.bin_dir = bin_dir or postgres_bin()
        if self.bin_dir is None:
            raise RuntimeError("PostgreSQL is not installed (apt-get install postgresql)")
        self.root = Path(tempfile.mkdtemp(prefix="rag-eval-postgres-"))
        self.port = free_port()
        self.process: subprocess.Popen | None = None

    def _as_owner(self, command: list[str]) -> list[str]:
        if os.geteuid() != 0:
            return command
        return ["setpriv", "--reuid=postgres", "--regid=postgres", "--clear-groups", *command]

    def start(self) -> "PostgresServer":
        data = self.root / "data"
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
        subprocess.run(
            self._as_owner(
                [
                    str(self.bin_dir / "initdb"),
                    "-D",
                    str(data),
                    "-U",
                    USER,
                    "--auth=trust",
                    "--encoding=UTF8",
                    "--no-sync",
                ]
            ),
            check=True,
            capture_output=True,
        )
        self.process = subprocess.Popen(
            self._as_owner(
                [
                    str(self.bin_dir / "postgres"),
                    "-D",
                    str(data),
                    "-c",
                    "listen_addresses=127.0.0.1",
                    "-c",
                    f"port={self.port}",
                    "-c",
                    f"unix_socket_directories={self.root}",
                    "-c",
                    "fsync=off",
                    "-c",
                    "max_connections=200",
                ]
            ),
            stdout=(self.root / "postgres.log").open("wb"),
            stderr=subprocess.STDOUT,
        )
        wait_for_port(self.port, what="postgres")
        self._wait_until_ready()
        return self

    def _wait_until_ready(self, timeout: float = 30.0) -> None:
        import psycopg2

        deadline = time.monotonic() + timeout
        while True:
            try:
                psycopg2.connect(
                    host="127.0.0.1", port=self.port, user=USER, dbname=DATABASE
                ).close()
                return
            except psycopg2.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def instance_settings(self, password_env: str) -> str:
        """A ``dagster.yaml`` keeping runs, events and schedules in this server; the password
        is read from ``password_env`` by every process that opens the instance."""
        settings = {
            "telemetry": {"enabled": False},
            "nux": {"enabled": False},
            "storage": {
                "postgres": {
                    "postgres_db": {
                        "username": USER,
                        "password": {"env": password_env},
                        "hostname": "127.0.0.1",
                        "db_name": DATABASE,
                        "port": self.port,
                        "scheme": "postgresql+psycopg2",
                    }
                }
            },
        }
        return yaml.safe_dump(settings, sort_keys=False)

    def stop(self, timeout: float = 30.0) -> None:
        """Fast shutdown by pid (SIGKILL if it lingers), then the data folder is removed."""
        if self.process is not None:
            stop(self.process, timeout, signal.SIGINT)  # SIGINT: PostgreSQL's fast shutdown
        shutil.rmtree(self.root, ignore_errors=True)
