"""The code location: the definitions, built when Dagster loads them (the environment is read
here, once, not at import)."""

import os

import dagster as dg

from rag_eval_pipeline.defs import build_definitions
from rag_eval_pipeline.lib.deployment import Deployment


@dg.definitions
def defs() -> dg.Definitions:
    """Assets, checks, jobs, schedule, sensor and resources for this deployment's environment."""
    return build_definitions(Deployment.from_environment(os.environ))
