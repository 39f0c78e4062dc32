"""The evaluation jobs as workers load them: rebuilt from the environment, by name.

The multiprocess and Celery executors run each step in another process, which must build the
same job itself: ``dg.build_reconstructable_job(__name__, "evaluation_job", (name,))`` points it
here, and the environment (``RAG_EVAL_*``, ``DAGSTER_HOME``) decides the rest, as for the code
location.
"""

import os

import dagster as dg

from rag_eval_pipeline.defs import build_definitions
from rag_eval_pipeline.lib.deployment import Deployment


def evaluation_job(job_name: str) -> dg.JobDefinition:
    """The job ``job_name`` of the definitions this environment builds."""
    return build_definitions(Deployment.from_environment(os.environ)).resolve_job_def(job_name)


def reconstructable_job(job_name: str):
    """A pointer to ``job_name`` that another process can follow."""
    return dg.build_reconstructable_job(
        __name__, "evaluation_job", reconstructable_args=(job_name,)
    )
