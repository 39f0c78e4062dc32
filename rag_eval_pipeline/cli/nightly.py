"""``rag-eval nightly`` and ``rag-eval rebaseline``: a night of one suite, in the project's instance.

The job runs against the persistent Dagster instance (``DAGSTER_HOME``, else the project's
``.dagster_home``), so the run is in the UI under the ``dagster_run_id`` its ``eval_runs`` row
names: in this process by default, or on the executor ``RAG_EVAL_EXECUTOR`` names (a process per
step, or Celery workers; ``docs/SCALING.md``). A line per finished step goes to stderr (as each
step ends in-process, after the run on other executors); the summary, where the
warehouse and report are, and the comparison guard's decision go to stdout. A run that fails
is marked failed in the warehouse; a failing release gate fails the Dagster run and exits 1
after every table and the comparison are written.
"""

import argparse
import contextlib
import datetime as dt
import os
import signal
import socket
import sys
import time
import warnings
from contextlib import contextmanager
from pathlib import Path
from zoneinfo import ZoneInfo

import yaml

from rag_eval_pipeline.cli import project
from rag_eval_pipeline.lib.errors import ConfigError, named_few
from rag_eval_pipeline.lib.inputs.suites import DEFAULT_SUITE, check_suite_files, check_suite_name
from rag_eval_pipeline.lib.paths import project_path
from rag_eval_pipeline.lib.runs.failures import failed_on_input, step_failure_lines
from rag_eval_pipeline.lib.runs.record import (
    REBASELINE_REASON_TAG,
    REBASELINE_TAG,
    REQUESTED_BY_TAG,
    RunSettings,
)


def read_run_config(path: str | None) -> dict:
    """A run configuration YAML file as a mapping; every problem names the file."""
    if not path:
        return {}
    source = Path(path)
    if source.is_dir():
        raise ConfigError(f"{source}: is a folder, not a run configuration file")
    if not source.is_file():
        raise ConfigError(f"{source}: run configuration file does not exist")
    try:
        document = yaml.safe_load(source.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read the run configuration: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{source}: not UTF-8 text (byte {exc.start}): a run configuration is a YAML file"
        ) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {' '.join(str(exc).split())}") from None
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise ConfigError(
            f"{source}: a run configuration is a mapping (resources: ..., ops: ...), "
            f"got a {type(document).__name__}"
        )
    return document


def with_deployment_system(run_config: dict, deployment) -> dict:
    """``run_config`` with the HTTP system's URL and key variable taken from the environment
    (``RAG_EVAL_SYSTEM_URL``, ``RAG_EVAL_SYSTEM_KEY_ENV``) where its ``resources.system.config``
    block does not name them: a block that only sets, say, the concurrency would otherwise
    replace the configured resource and ask for a ``base_url`` the environment already gives.
    The replay's trace file likewise (``RAG_EVAL_TRACES``), for a block that only allows a corpus
    mismatch."""
    resources = run_config.get("resources") or {}
    block = resources.get("system") if isinstance(resources, dict) else None
    config = block.get("config") if isinstance(block, dict) else None
    if deployment.system not in ("http", "replay") or not isinstance(config, dict):
        return run_config
    filled = dict(config)
    if deployment.system == "replay":
        filled.setdefault("path", deployment.traces)
        return {**run_config, "resources": {**resources, "system": {**block, "config": filled}}}
    if deployment.system_url:
        filled.setdefault("base_url", deployment.system_url)
    if deployment.system_key_env:
        filled.setdefault("api_key_env", deployment.system_key_env)
    return {**run_config, "resources": {**resources, "system": {**block, "config": filled}}}


def preflight(run_config: dict, suite_name: str, source: str | None) -> RunSettings:
    """Refuse settings that would silently change figures, a file the suite names that is not
    there, and a replayed trace file that is not there, before anything runs; the checked run
    settings."""
    from rag_eval_pipeline.defs.resources import EvalSettings, SuiteRegistryResource

    deployment = project.deployment()
    suite = SuiteRegistryResource(path=deployment.suites).suite(suite_name)
    check_suite_files(suite)
    resources = run_config.get("resources") or {}
    if deployment.system == "replay":
        check_replayed_file(resources, deployment.traces, source)
    settings = ((resources.get("settings") or {}).get("config")) or {}
    if not isinstance(settings, dict):
        raise ConfigError(f"{source}: resources.settings.config must be a mapping")
    moved = sorted(
        set(settings) & {"corpus_root", "golden_set", "snapshot", "human_labels", "trace_store"}
    )
    if moved:
        raise ConfigError(
            f"{source}: resources.settings.config: {', '.join(moved)} belong to a suite now: "
            "write them in suites/<name>.yaml and run with --suite <name> (see README)"
        )
    try:
        return EvalSettings(**settings).run_settings(suite)
    except ConfigError as error:
        raise ConfigError(f"{source or 'run configuration'}: {error}") from None
    except Exception as error:  # pydantic: a wrong type or an unknown field
        raise ConfigError(
            f"{source or 'run configuration'}: {'; '.join(settings_problems(error))}"
        ) from None


def check_replayed_file(resources: dict, traces: str, source: str | None) -> None:
    """The replay's trace file (``RAG_EVAL_TRACES``, or the run file's
    ``resources.system.config.path``) is there."""
    from rag_eval_pipeline.lib.inputs.traces import TraceError  # it loads Polars

    block = resources.get("system") if isinstance(resources, dict) else None
    config = block.get("config") if isinstance(block, dict) else None
    named = config.get("path") if isinstance(config, dict) else None
    path = named or traces
    if not project_path(path).is_file():
        given = named and named != traces  # not filled in from the environment
        where = f"{source}: resources.system.config.path" if given else "RAG_EVAL_TRACES"
        raise TraceError(f"{where}={path}: trace file does not exist (the replayed trace file)")


def settings_problems(error: Exception) -> list[str]:
    """A pydantic ``ValidationError`` of the run settings as short lines naming each key (no
    pydantic URL); any other error as its own text."""
    errors = getattr(error, "errors", None)
    if not callable(errors):
        return [" ".join(str(error).split())]
    problems = []
    for problem in errors(include_url=False):
        where = ".".join(["resources.settings.config", *map(str, problem["loc"])])
        if problem["type"] == "extra_forbidden":
            problems.append(f"{where}: unknown key")
        else:
            problems.append(f"{where}: {problem['msg']}, got {problem['input']!r}")
    return problems


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM during a run."""

    def __init__(self, signal_name: str):
        super().__init__(signal_name)
        self.signal_name = signal_name


# The signals that interrupted a run of this process, first first. Dagster installs handlers of
# its own for both while a step runs, and a stopped step fails inside Dagster without naming the
# signal, so they are read from the interpreter's wakeup file descriptor, which every handled
# signal is written to whoever handles it.
RECEIVED: list[str] = []
_STOPPING = {signal.SIGINT.value: "SIGINT", signal.SIGTERM.value: "SIGTERM"}


def interrupted_exit_code(name: str | None = None) -> int:
    """``128 +`` the signal ``name`` (``SIGINT``: 130, ``SIGTERM``: 143), by default the first
    that interrupted a run here (SIGTERM's when none is known)."""
    name = name or (RECEIVED[0] if RECEIVED else "SIGTERM")
    return 128 + signal.Signals[name]


@contextmanager
def interrupts_stop_the_run():
    """SIGTERM and SIGINT raise ``Interrupted`` in the main thread, so a run stops within
    seconds and is marked failed, rather than dying unrecorded (SIGTERM) or waiting on threads.
    The signals that arrived during it are in ``RECEIVED`` afterwards."""

    def stop(number, frame):
        raise Interrupted(signal.Signals(number).name)

    RECEIVED.clear()
    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    os.set_blocking(write_end, False)
    previous_wakeup = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    try:
        yield
    finally:
        signal.set_wakeup_fd(previous_wakeup)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        with contextlib.suppress(BlockingIOError):
            RECEIVED.extend(_STOPPING[n] for n in os.read(read_end, 4096) if n in _STOPPING)
        os.close(read_end)
        os.close(write_end)


def _config_keys(config_type, path: list[str]) -> list[str] | None:
    """The keys the job's config schema takes at ``path`` (``None`` where it names none)."""
    for level in [*path, None]:
        while getattr(config_type, "fields", None) is None and hasattr(config_type, "inner_type"):
            config_type = config_type.inner_type  # Noneable, Array
        fields = getattr(config_type, "fields", None)
        if not isinstance(fields, dict) or (level is not None and level not in fields):
            return None
        if level is None:
            return sorted(fields)
        config_type = fields[level].config_type
    return None


def config_problems(error, job_def) -> list[str]:
    """Dagster's config errors as short lines, each naming the key path and what is wrong,
    without Dagster's dump of the whole expected schema (reasons compared by name: their enum is
    not in Dagster's public API)."""
    problems = []
    for problem in error.errors:
        path = [str(level) for level in problem.stack.levels]
        where = ".".join(path) or "the top level"
        data, reason = problem.error_data, problem.reason.name
        if reason in ("FIELD_NOT_DEFINED", "FIELDS_NOT_DEFINED"):
            names = getattr(data, "field_names", None) or [data.field_name]
            keys = _config_keys(job_def.run_config_schema.config_type, path)
            known = f" (keys: {', '.join(keys)})" if keys else ""
            unknown = ", ".join(repr(name) for name in names)
            problems.append(f"{where}: unknown key {unknown}{known}")
        elif reason == "MISSING_REQUIRED_FIELD":
            problems.append(f"{where}: missing key {data.field_name!r}")
        elif reason == "RUNTIME_TYPE_MISMATCH":
            expected = data.config_type_snap.given_name or data.config_type_snap.key
            problems.append(f"{where}: {data.value_rep} is not of type {expected}")
        else:
            problems.append(f"{where}: {problem.message.split(' Expected: ')[0]}")
    return problems


def run_job(
    defs,
    instance,
    job_name: str,
    key: str,
    *,
    run_config=None,
    tags=None,
    verbose=False,
    source: str | None = None,
):
    """Execute one job in-process, a line per finished step on stderr. A run configuration
    Dagster refuses is a ``ConfigError`` naming ``source`` (the file it came from), the key and
    what is wrong.

    The run is tagged with this machine and process, so a run whose process dies (``kill -9``)
    is failed by the next ``rag-eval nightly`` or the ``abandoned_runs`` sensor. An interrupt
    (SIGINT, SIGTERM) fails the Dagster run and its evaluation run, then exits at once. The run
    names the code location's job as its origin (``job_origin``), so the UI can re-execute it.
    """
    import dagster as dg

    from rag_eval_pipeline.defs.sensors import HOST_TAG, PID_TAG

    # Failures are reported as one line each (failure_messages); --verbose shows Dagster's log.
    log_level = "DEBUG" if verbose else "CRITICAL"
    in_process = project.deployment().executor == "in_process"
    loggers = {"console": {"config": {"log_level": log_level}}}
    # Loggers run where the step runs: on a Celery worker the progress lines would go to the
    # worker's log, so for other executors they are printed from the event log after the run.
    config = {
        **(run_config or {}),
        "loggers": loggers | ({"step_progress": {}} if in_process else {}),
    }
    tags = {**(tags or {}), HOST_TAG: socket.gethostname(), PID_TAG: str(os.getpid())}
    origin = job_origin(defs, job_name)
    try:
        with interrupts_stop_the_run():
            from dagster._core.definitions.job_base import InMemoryJob
            from dagster._core.execution.execute_in_process import merge_run_tags

            job_def = defs.resolve_job_def(job_name)
            # The partition's tags (its key checked) as ``execute_in_process`` adds them, for
            # every executor.
            tags = merge_run_tags(job_def, key, tags, None, instance, config)
            if in_process:
                return execute_here(instance, InMemoryJob(job_def), config, tags, origin)
            result = execute_on_workers(instance, job_name, config, tags, origin)
            print_finished_steps(instance, result.run_id)
            return result
    except dg.DagsterInvalidConfigError as error:
        problems = "; ".join(config_problems(error, defs.resolve_job_def(job_name))) or str(error)
        where = f"{source}: run configuration of {job_name}" if source else job_name
        raise ConfigError(f"{where}: {problems}") from None
    except KeyboardInterrupt as interrupt:
        name = getattr(interrupt, "signal_name", "SIGINT")
        end_interrupted_runs(instance, tags, f"interrupted by {name}")
        print(f"error: {job_name} interrupted by {name}; the run is marked failed", file=sys.stderr)
        sys.stderr.flush()
        sys.stdout.flush()
        # Threads still waiting on an endpoint must not keep the process alive.
        os._exit(interrupted_exit_code(name))


# The code location as ``workspace.yaml`` declares it to the webserver and the daemon.
CODE_LOCATION = "rag_eval_pipeline"
DEFINITIONS_MODULE = "rag_eval_pipeline.definitions"


def job_origin(defs, job_name: str):
    """The origin a run of ``job_name`` carries when the webserver or the daemon launches it:
    the job in the one repository of the code location ``workspace.yaml`` loads. The UI
    re-executes a run in the code location its origin names, and refuses a run without one
    (``CheckError: Expected non-None value``); no code server is started for it here."""
    from dagster._core.remote_origin import (
        ManagedGrpcPythonEnvCodeLocationOrigin,
        RemoteJobOrigin,
        RemoteRepositoryOrigin,
    )
    from dagster._core.types.loadable_target_origin import LoadableTargetOrigin

    location = ManagedGrpcPythonEnvCodeLocationOrigin(
        LoadableTargetOrigin(module_name=DEFINITIONS_MODULE), location_name=CODE_LOCATION
    )
    repository = RemoteRepositoryOrigin(location, defs.get_repository_def().name)
    return RemoteJobOrigin(repository, job_name)


def execute_here(instance, job, config: dict, tags: dict, origin):
    """Create the run of ``job`` with ``origin`` (as ``instance.create_run_for_job`` does for
    ``execute_in_process`` and ``execute_job``, which take no origin), then execute it from this
    process on the job's executor, as they do, failures recorded rather than raised."""
    from dagster._core.definitions.reconstruct import ReconstructableJob
    from dagster._core.execution.api import execute_run

    job_def = job.get_definition()
    run = instance.create_run_for_job(
        job_def=job_def,
        run_config=config,
        tags={**job_def.run_tags, **tags},
        remote_job_origin=origin,
        job_code_origin=job.get_python_origin() if isinstance(job, ReconstructableJob) else None,
    )
    return execute_run(job, run, instance, raise_on_error=False)


def execute_on_workers(instance, job_name: str, config: dict, tags: dict, origin):
    """Run a job whose steps run in other processes (multiprocess, Celery workers): they rebuild
    the job from the environment (``defs.reconstruct``), so every process must see the same
    ``RAG_EVAL_*`` variables and instance. ``tags`` carry the partition's. The run id is the
    instance's."""
    from rag_eval_pipeline.defs.reconstruct import reconstructable_job

    return execute_here(instance, reconstructable_job(job_name), config, tags, origin)


def print_finished_steps(instance, run_id: str) -> None:
    """The progress lines (``defs.progress``) of a finished run, from its event log."""
    import dagster as dg

    from rag_eval_pipeline.defs.progress import progress_line

    finished = instance.all_logs(
        run_id, of_type={dg.DagsterEventType.STEP_SUCCESS, dg.DagsterEventType.STEP_FAILURE}
    )
    for entry in sorted(finished, key=lambda entry: entry.timestamp):
        print(progress_line(entry.dagster_event), file=sys.stderr)
    sys.stderr.flush()


def end_interrupted_runs(instance, tags: dict, reason: str) -> None:
    """Fail the interrupted run of this process (found by its host and pid tags, whichever
    executor made it; Dagster may have failed it already) and its evaluation run. A run
    interrupted before its first step is still ``NOT_STARTED``: it is failed too, as the
    ``abandoned_runs`` sweep would, so the error line's "marked failed" holds at once."""
    import dagster as dg

    from rag_eval_pipeline.defs.alerts import abandon_eval_run
    from rag_eval_pipeline.defs.sensors import HOST_TAG, PID_TAG, executed_by_rag_eval

    mine = dg.RunsFilter(tags={HOST_TAG: tags[HOST_TAG], PID_TAG: tags[PID_TAG]})
    for run in instance.get_runs(filters=mine):
        if run.status == dg.DagsterRunStatus.SUCCESS or not executed_by_rag_eval(run):
            continue
        if run.status in (
            dg.DagsterRunStatus.NOT_STARTED,
            dg.DagsterRunStatus.STARTING,
            dg.DagsterRunStatus.STARTED,
        ):
            instance.report_run_failed(run, message=reason)
        abandon_eval_run(run, reason, project.warehouse_resource())


def failure_messages(result) -> list[str]:
    """One line per failed step (a failed blocking gate is reported with the gates instead)."""
    return step_failure_lines(
        result.all_events, interrupted_by=RECEIVED[0] if RECEIVED else "SIGINT or SIGTERM"
    )


def failed_checks(result) -> tuple[list[str], list[str]]:
    """Messages of failed ERROR checks (gates that fail the night) and of WARN checks."""
    errors, warned = [], []
    for evaluation in result.get_asset_check_evaluations():
        if evaluation.passed:
            continue
        entry = evaluation.metadata.get("message") or evaluation.metadata.get("reason")
        text = entry.value if entry is not None else (evaluation.description or "")
        line = f"{evaluation.asset_key.to_user_string()}/{evaluation.check_name}: {text}"
        (errors if evaluation.severity.value == "ERROR" else warned).append(line)
    return errors, warned


def summary_facts(result) -> dict | None:
    from rag_eval_pipeline.defs.sensors import metadata_values

    materializations = result.asset_materializations_for_node("eval_summary")
    return metadata_values(materializations[-1].metadata) if materializations else None


def mark_failed(instance, result, reason: str, *, alert: bool = True) -> None:
    """A failed Dagster run executed here: its evaluation run marked failed in the warehouse
    (unless it had completed: a failed gate leaves it complete) and, unless ``alert`` is False
    (an interrupt), the alert the ``failure_alerts`` sensor posts for the daemon's runs, which
    does not see runs executed in this process. A webhook that refuses it is a warning."""
    from rag_eval_pipeline.defs.alerts import abandon_eval_run, alert_failed_run

    run = instance.get_run_by_id(result.run_id)
    if run is None:
        return
    if not alert:
        abandon_eval_run(run, reason, project.warehouse_resource())
        return
    try:
        status = alert_failed_run(instance, run, reason, project.warehouse_resource())
    except RuntimeError as error:  # the webhook did not take it, after its retries
        print(f"warning: {error}", file=sys.stderr)
        return
    if status is not None and status >= 400:
        print(
            f"warning: the alert webhook refused the alert of run {run.run_id}: HTTP {status}",
            file=sys.stderr,
        )


def fail_on_steps(instance, result, lines: list[str]) -> int:
    """A run whose steps failed: marked failed (alerted unless it was interrupted), each
    failure printed. An interrupted one (a step stopped by the signal, or one that failed after
    a signal reached this process, as the HTTP system does when it stops its calls) ends the
    process at once with its signal's code (130 for SIGINT, 143 for SIGTERM); otherwise the
    exit status: 2 when every failed step failed on bad input (``failed_on_input``), else 1."""
    interrupted = bool(RECEIVED) or any("interrupted" in line for line in lines)
    mark_failed(instance, result, "; ".join(lines), alert=not interrupted)
    for line in lines:
        print(f"error: {line}", file=sys.stderr)
    if interrupted:
        sys.stderr.flush()
        # Threads still waiting on an endpoint must not keep the process alive.
        os._exit(interrupted_exit_code())
    return 2 if failed_on_input(result.all_events) else 1


def command_nightly(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    import dagster as dg

    from rag_eval_pipeline.defs import build_definitions
    from rag_eval_pipeline.defs.alerts import alert_not_comparable
    from rag_eval_pipeline.defs.partitions import SUITE, check_night, partition_key
    from rag_eval_pipeline.defs.sensors import (
        GUARD_DONE_TAG,
        GUARD_PENDING,
        GUARD_TAG,
        IN_PROCESS,
        fail_abandoned_runs,
        guard_requests,
    )
    from rag_eval_pipeline.lib.reporting.summary import format_summary, headline_from_tables
    from rag_eval_pipeline.lib.runs.comparisons import comparison_rows
    from rag_eval_pipeline.lib.runs.gates import check_cutoffs, read_gates
    from rag_eval_pipeline.lib.runs.guard import NOT_COMPARABLE, REBASELINE, guard_decision

    # The console shows warnings and errors; every event stays in the Dagster instance and UI.
    warnings.filterwarnings("ignore", message=".*is currently in beta")
    # dagster-celery registers its step task on an app that already has it (celery 5.7 warns);
    # both are the same task, so the warning says nothing about this run.
    warnings.filterwarnings("ignore", message="Task name 'execute_plan' is already registered")
    suite = check_suite_name(args.suite, "--suite")
    deployment = project.deployment()
    run_config = with_deployment_system(read_run_config(args.config), deployment)
    settings = preflight(run_config, suite, args.config)
    # A gate at a cut-off these settings do not compute would never be enforced.
    check_cutoffs(read_gates(deployment.gates_file), settings.cutoffs)
    night = args.partition or dt.datetime.now(ZoneInfo(deployment.timezone)).date().isoformat()
    check_night(night, deployment.timezone, first_night=deployment.first_night)
    project.warehouse()  # a warehouse location that cannot be one, refused before any step
    defs = build_definitions(deployment)
    project.dagster_home()
    instance = dg.DagsterInstance.get()
    if suite not in instance.get_dynamic_partitions(SUITE):
        instance.add_dynamic_partitions(SUITE, [suite])
    for abandoned in fail_abandoned_runs(instance, project.warehouse_resource()):
        print(f"failed abandoned run {abandoned}: its process is gone", file=sys.stderr)
    loaded = time.perf_counter()
    print(f"nightly_eval: suite {suite}, night {night}", file=sys.stderr, flush=True)
    result = run_job(
        defs,
        instance,
        "nightly_eval",
        partition_key(night, suite),
        run_config=run_config,
        source=args.config,
        # With its guard applied here, the daemon's guard leaves this night (and what this
        # guard launches) to this process.
        tags={
            **dict(args.tag or []),
            **({GUARD_TAG: IN_PROCESS, GUARD_DONE_TAG: GUARD_PENDING} if args.guard else {}),
        },
        verbose=args.verbose,
    )
    if args.timings:
        print(f"timing: imports and definitions {loaded - started:.2f} s", file=sys.stderr)
        print(f"timing: job {time.perf_counter() - loaded:.2f} s", file=sys.stderr)
    step_failures = failure_messages(result)
    if step_failures:
        return fail_on_steps(instance, result, step_failures)
    summary = summary_facts(result)
    if summary is None:
        mark_failed(instance, result, "the run ended before its summary")
        print("error: the run ended before its summary step", file=sys.stderr)
        return 1
    warehouse = project.warehouse()
    if args.print_summary:
        with warehouse.reading() as connection:
            headline = headline_from_tables(connection, summary["eval_run_id"])
        print(format_summary(headline, warehouse=str(warehouse.path)))
    failed, warned = failed_checks(result)
    if summary.get("replaced_figures"):
        warned = [summary["replaced_figures"], *warned]
    # Runs that failed on their release gates alone (a gate of the night, a significant
    # regression of its comparison), with their gates' messages: alerted, and their gates
    # printed, however the guard below ends.
    gated = [] if result.success else [(result, failed)]

    def report_gates() -> int:
        for line in warned:
            sys.stderr.write(f"warning: {line}\n")  # one write: step lines may print beside it
        for ended, lines in gated:
            mark_failed(instance, ended, "; ".join(lines) or "the run failed")
        # Each failed run under its own heading: a night and the re-baseline the guard ran on
        # it can fail the same gates, and the lines alone would read as one list said twice.
        for ended, lines in gated:
            if lines:
                job = ended.dagster_run.job_name
                print(
                    f"\nrelease gates failed in {job} (Dagster run {ended.run_id[:8]}):",
                    file=sys.stderr,
                )
                for line in lines:
                    print(f"  {line}", file=sys.stderr)
        return 1 if gated else 0

    # The comparison guard, as the sensor would run it under the daemon: compare, re-baseline
    # (then compare), or say why not.
    # Each run whose summary this guard decided (and ran what it decided for) is tagged so; one
    # left untagged because this process died is decided by the daemon's guard after all.
    deciding = result.run_id

    def decided(run_id: str) -> None:
        instance.add_run_tags(run_id, {GUARD_DONE_TAG: "true"})

    while args.guard and summary:
        requests, reason = guard_requests(summary)
        print(f"\ncomparison guard: {reason}")
        if not requests:
            action = guard_decision(summary)[0]
            if action == NOT_COMPARABLE:
                try:
                    alert_not_comparable(instance.get_run_by_id(deciding), summary, reason)
                except RuntimeError as error:  # the webhook did not take it
                    print(f"warning: {error}", file=sys.stderr)
            decided(deciding)
            if action == REBASELINE:
                # A re-baseline was asked for and cannot be run: the baseline did not move.
                print(f"error: the re-baseline was not run: {reason}", file=sys.stderr)
                return max(report_gates(), 1)
            break
        request = requests[0]
        print(f"running {request.job_name} for {request.partition_key}", file=sys.stderr)
        follow_up = run_job(
            defs,
            instance,
            request.job_name,
            request.partition_key,
            run_config=request.run_config,
            tags={**request.tags, GUARD_TAG: IN_PROCESS, GUARD_DONE_TAG: GUARD_PENDING},
            verbose=args.verbose,
        )
        more_failures = failure_messages(follow_up)
        if more_failures:
            status = fail_on_steps(instance, follow_up, more_failures)  # exits if interrupted
            decided(deciding)
            return max(report_gates(), status)
        decided(deciding)
        deciding = follow_up.run_id
        more_failed, more_warned = failed_checks(follow_up)
        if not follow_up.success:
            gated.append((follow_up, more_failed))
        warned += more_warned
        if request.job_name == "run_comparison_job":
            candidate = request.run_config["ops"]["run_comparison"]["config"]["candidate_run_id"]
            with warehouse.reading() as connection:
                print(format_comparison(candidate, comparison_rows(connection, candidate)))
            break
        summary = summary_facts(follow_up)
        if request.job_name == "rebaseline" and summary:
            with warehouse.reading() as connection:
                print(format_offsets(summary["eval_run_id"], connection))
    return report_gates()


def format_offsets(rebaseline_run_id: str, connection) -> str:
    """What a re-baseline stored in ``rebaseline_offsets``, as a table: the effect on each metric
    of what changed since the old baseline (corpus, golden set, measure definitions, named),
    measured with the baseline's system."""
    from rag_eval_pipeline.lib.runs.record import run_changes
    from rag_eval_pipeline.lib.runs.registry import run_row
    from rag_eval_pipeline.lib.store.sql import sql_query

    rows = connection.execute(
        sql_query("runs", "rebaseline_offsets"), {"eval_run_id": rebaseline_run_id}
    ).fetchall()
    if not rows:
        return f"re-baseline {rebaseline_run_id}: no offsets recorded"
    old, new = run_row(connection, rows[0][0]), run_row(connection, rebaseline_run_id)
    changed = [what for what, _, _ in run_changes(old, new)] if old and new else []
    effect = (
        f"the effect of the {' and '.join(changed)} change alone"
        if changed
        else "nothing changed that keeps runs from comparing"
    )
    lines = [
        f"re-baseline {rebaseline_run_id} against the old baseline {rows[0][0]} "
        f"(the baseline's system on both: {effect}):"
    ]
    for _, metric, old, new, offset, low, high in rows:
        if old is None or new is None or offset is None:
            lines.append(f"  {metric:<16} not measured on both")
            continue
        interval = f" [{low:+.4f}, {high:+.4f}]" if low is not None and high is not None else ""
        lines.append(f"  {metric:<16} {old:.4f} -> {new:.4f}  offset {offset:+.4f}{interval}")
    drifted = [
        item
        for (item,) in connection.execute(
            sql_query("runs", "drifted_items"), {"eval_run_id": rebaseline_run_id}
        ).fetchall()
    ]
    if drifted:
        named = named_few(drifted)
        lines.append(
            f"  note: {len(drifted)} golden item(s) have an answering passage that is not current, "
            f"or changed, on the new snapshot ({named}; table golden_drift): part of these offsets is their "
            "stale labels, not the library. Re-label them, then re-baseline again for the "
            "golden-set change."
        )
    return "\n".join(lines)


def format_comparison(candidate_run_id: str, rows) -> str:
    """The recorded comparison of one candidate run as a table, each metric significantly worse
    or better at the level its regression gate was checked at (``regression_alpha``, recorded
    with the comparison) marked so."""
    from rag_eval_pipeline.lib.metrics.comparison import row_verdict
    from rag_eval_pipeline.lib.reporting.summary import comparison_line, in_compared_order

    if not rows.height:
        return f"no comparison recorded for {candidate_run_id}"
    first = rows.row(0, named=True)
    lines = [f"{candidate_run_id} against baseline {first['baseline_run_id']}: {first['reason']}"]
    compared = rows.filter(rows["candidate_value"].is_not_null()).to_dicts()
    for row in in_compared_order(compared):
        alpha = row.get("regression_alpha")
        marked = row_verdict(row, alpha)
        lines.append(comparison_line({**row, "verdict": marked}))
    return "\n".join(lines)


def command_rebaseline(args: argparse.Namespace) -> int:
    if not args.reason.strip():
        raise ConfigError("a re-baseline needs a reason (--reason)")
    requested_by = args.requested_by or os.environ.get("USER") or "unknown"
    tags = [
        [REBASELINE_TAG, "true"],
        [REBASELINE_REASON_TAG, args.reason],
        [REQUESTED_BY_TAG, requested_by],
    ]
    return command_nightly(
        argparse.Namespace(
            suite=args.suite,
            partition=args.partition,
            config=None,
            tag=tags,
            timings=False,
            verbose=args.verbose,
            print_summary=False,
            guard=True,
        )
    )


def add_commands(commands) -> None:
    nightly = commands.add_parser("nightly", help="run a night's evaluation of one suite")
    nightly.add_argument("--suite", default=DEFAULT_SUITE, help=f"default {DEFAULT_SUITE}")
    nightly.add_argument(
        "--partition", type=project.night, help="night to evaluate (YYYY-MM-DD); default today"
    )
    nightly.add_argument(
        "--tag", action="append", nargs=2, metavar=("KEY", "VALUE"), help="Dagster run tag"
    )
    nightly.add_argument(
        "--config", help="run configuration YAML (e.g. resources.system.config.evidence_threshold)"
    )
    nightly.add_argument("--timings", action="store_true", help="print where the time went")
    nightly.add_argument("--verbose", action="store_true", help="show Dagster's debug log")
    nightly.add_argument(
        "--no-summary",
        dest="print_summary",
        action="store_false",
        help="do not print the run's summary (errors, gates and the guard's line still are)",
    )
    nightly.add_argument(
        "--no-guard",
        dest="guard",
        action="store_false",
        help="skip the comparison guard here (the daemon's comparison_guard sensor decides the night)",
    )
    nightly.set_defaults(handler=command_nightly)

    rebaseline = commands.add_parser(
        "rebaseline", help="run a night tagged for re-baselining, then the rebaseline job"
    )
    rebaseline.add_argument("--suite", default=DEFAULT_SUITE, help=f"default {DEFAULT_SUITE}")
    rebaseline.add_argument("--partition", type=project.night, help="night; default today")
    rebaseline.add_argument(
        "--reason",
        required=True,
        help="what changed (the corpus, the golden set, the measure definitions) and why",
    )
    rebaseline.add_argument("--requested-by", help="who asks (default: $USER)")
    rebaseline.add_argument("--verbose", action="store_true", help="show Dagster's debug log")
    rebaseline.set_defaults(handler=command_rebaseline)
