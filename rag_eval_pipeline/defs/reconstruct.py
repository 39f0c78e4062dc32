"""The evaluation jobs as workers load them: rebuilt from the environment, by name.

The multiprocess and Celery executors run each step in another process, which must build the
same job itself: ``dg.build_reconstructable_job(__name__, "evaluation_job", (name,))`` points it
here, and the environment (``RAG_EVAL_*``, ``DAGSTER_HOME``) decides the rest, as for the code
location. A worker calls ``preload`` once, before it forks its step processes, so its first step
does not pay for importing what every step needs.
"""

import importlib
import os
import warnings

import dagster as dg

from rag_eval_pipeline.defs import build_definitions
from rag_eval_pipeline.lib.deployment import Deployment


def evaluation_job(job_name: str) -> dg.JobDefinition:
    """The job ``job_name`` of the definitions this environment builds. A step process says
    nothing of Dagster's beta markers (``Output(data_version=...)``), as ``rag-eval`` does not."""
    warnings.filterwarnings("ignore", category=dg.BetaWarning)
    return build_definitions(Deployment.from_environment(os.environ)).resolve_job_def(job_name)


def reconstructable_job(job_name: str):
    """A pointer to ``job_name`` that another process can follow."""
    return dg.build_reconstructable_job(
        __name__, "evaluation_job", reconstructable_args=(job_name,)
    )


# What steps import when they first run rather than with the definitions (``lib.reporting.charts``
# draws with Matplotlib and Pillow, ``lib.systems.bm25`` reads bm25s's stop words).
STEP_IMPORTS = (
    "matplotlib.figure",
    "matplotlib.backends.backend_agg",
    "matplotlib.ticker",
    "PIL.Image",
    "bm25s.tokenization",
)


def preload() -> list[str]:
    """Import, without connecting to anything, what every step needs: the modules of the
    instance's storage classes (``DAGSTER_HOME/dagster.yaml``: SQLite, PostgreSQL, ...), most of
    the cost of a step's first instance (0.6-1.5 s measured here), and ``STEP_IMPORTS``. The run
    launcher, coordinator and scheduler are left alone: Dagster loads them only where they are
    used, and a worker need not have their packages (``dagster_k8s`` on a Celery worker).
    Opening no connection keeps it safe before a fork. Returns the modules imported."""
    from dagster._core.instance.ref import InstanceRef
    from dagster._serdes import ConfigurableClassData

    modules = set(STEP_IMPORTS)
    home = os.environ.get("DAGSTER_HOME")
    # A worker may start before the first night creates DAGSTER_HOME: nothing to read yet.
    if home and os.path.isdir(home):
        ref = InstanceRef.from_dir(home)
        for field in ref._fields:
            value = getattr(ref, field)
            storage = "storage" in field or field == "compute_logs_data"
            if storage and isinstance(value, ConfigurableClassData):
                modules.add(value.module_name)
    for module in sorted(modules):
        importlib.import_module(module)
    return sorted(modules)
