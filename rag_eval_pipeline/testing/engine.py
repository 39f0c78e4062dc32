"""A multi-worker engine on this machine for tests and benchmarks: Redis and Celery workers.

``CeleryEngine`` starts a Redis broker (Debian's ``redis-server``) and N Celery workers running
dagster-celery's app, each a separate process listening only on 127.0.0.1, and stops every one of
them by its pid. Workers are started directly with ``celery -A dagster_celery.app worker`` (the
``dagster-celery worker start`` wrapper leaves the real worker behind when it is stopped), with a
generated ``dagster_celery_config.py`` naming the broker and the result backend.

    with CeleryEngine(workers=2, root=tmp_path) as engine:
        run_config = {"execution": {"config": engine.executor_config}}
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REDIS = "redis-server"
DEFAULT_QUEUE = "dagster"
# dagster-celery's app reads this module when a worker starts. Importing the definitions there
# (before the pool forks) saves each worker's first step about 6 s of imports; ``__import__``
# binds no name, so nothing but the two settings reaches Celery's configuration.
WORKER_CONFIG = """\
broker_url = {self.broker!r}
result_backend = {self.backend!r}
__import__("rag_eval_pipeline.defs.reconstruct").defs.reconstruct.preload()
"""


def free_port() -> int:
    """A port nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, *, what: str, timeout: float = 30.0) -> None:
    """Until something listens on 127.0.0.1:``port``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port} in {timeout:.0f} s")


def stop(process: subprocess.Popen, timeout: float = 30.0, signum: int = signal.SIGTERM) -> None:
    """Send the process we started ``signum`` (SIGTERM: Celery's warm shutdown), SIGKILL if it
    lingers past ``timeout``."""
    if process.poll() is not None:
        return
    process.send_signal(signum)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


class StartedProcesses:
    """A ``with`` block around ``start()`` and ``stop()`` (each subclass defines them): what did
    start is stopped on the way out, also when ``start`` itself fails part way, since
    ``__exit__`` does not run when ``__enter__`` raises."""

    def start(self):
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class CeleryEngine(StartedProcesses):
    """Redis plus ``workers`` Celery workers, as separate processes on 127.0.0.1.

    ``queues`` gives the queues each worker consumes, one comma-separated entry per worker
    (``("dagster,warehouse", "dagster")``); by default every worker consumes dagster-celery's
    ``dagster`` queue."""

    def __init__(
        self,
        *,
        workers: int = 2,
        root: Path,
        concurrency: int = 1,
        env: dict | None = None,
        queues: tuple[str, ...] = (),
    ):
        if shutil.which(REDIS) is None:
            raise RuntimeError(f"{REDIS} is not installed (apt-get install redis-server)")
        if queues and len(queues) != workers:
            raise ValueError(f"{len(queues)} queue entries for {workers} workers")
        self.queues = queues or (DEFAULT_QUEUE,) * workers
        self.workers = workers
        self.concurrency = concurrency
        self.root = Path(root)
        self.env = {**os.environ, **(env or {})}
        self.port = free_port()
        self.processes: list[subprocess.Popen] = []
        # Every process this engine started, kept after ``stop`` so a caller can check each ended.
        self.started: list[subprocess.Popen] = []
        self.worker_pids: list[int] = []

    @property
    def broker(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def backend(self) -> str:
        return f"redis://127.0.0.1:{self.port}/1"

    @property
    def environment(self) -> dict[str, str]:
        """What ``rag-eval nightly`` and the workers need to choose this engine."""
        return {
            "RAG_EVAL_EXECUTOR": "celery",
            "RAG_EVAL_CELERY_BROKER": self.broker,
            "RAG_EVAL_CELERY_BACKEND": self.backend,
        }

    @property
    def executor_config(self) -> dict:
        """The ``execution`` config of ``dagster_celery.celery_executor`` for this engine."""
        return {"broker": self.broker, "backend": self.backend}

    def start(self) -> "CeleryEngine":
        self.root.mkdir(parents=True, exist_ok=True)
        redis = subprocess.Popen(
            [
                REDIS,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.root),
            ],
            stdout=(self.root / "redis.log").open("wb"),
            stderr=subprocess.STDOUT,
        )
        self.processes.append(redis)
        self.started.append(redis)
        wait_for_port(self.port, what="redis")
        config = self.root / "celery_config"
        config.mkdir(exist_ok=True)
        (config / "dagster_celery_config.py").write_text(WORKER_CONFIG.format(self=self))
        celery = Path(sys.executable).parent / "celery"
        env = {
            **self.env,
            **self.environment,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(config), self.env.get("PYTHONPATH")])),
        }
        for index in range(1, self.workers + 1):
            worker = subprocess.Popen(
                [
                    str(celery),
                    "-A",
                    "dagster_celery.app",
                    "worker",
                    "--concurrency",
                    str(self.concurrency),
                    "--prefetch-multiplier",
                    "1",
                    "-n",
                    f"worker{index}@%h",
                    "--without-gossip",
                    "--without-mingle",
                    "--without-heartbeat",
                    "--loglevel",
                    "INFO",
                    "-Q",
                    self.queues[index - 1],
                ],
                env=env,
                cwd=self.root,
                stdout=(self.root / f"worker{index}.log").open("wb"),
                stderr=subprocess.STDOUT,
            )
            self.processes.append(worker)
            self.started.append(worker)
            self.worker_pids.append(worker.pid)
        self._wait_for_workers()
        return self

    def _wait_for_workers(self, timeout: float = 90.0) -> None:
        from celery import Celery

        app = Celery(broker=self.broker, backend=self.backend)
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                for process in self.processes[1:]:
                    if process.poll() is not None:
                        raise RuntimeError(f"a celery worker exited: see {self.root}/worker*.log")
                replies = app.control.ping(timeout=1.0) or []
                if len(replies) >= self.workers:
                    return
                time.sleep(0.5)
        finally:
            app.close()
        raise RuntimeError(f"{self.workers} celery workers did not answer in {timeout:.0f} s")

    def stop(self) -> None:
        """Stop the workers, then the broker, each by its pid."""
        for process in reversed(self.processes):
            stop(process)
        self.processes.clear()
