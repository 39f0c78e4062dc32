"""Where a run's time went, from its Dagster event log: per step, per worker, and the waits.

``run_timeline`` reads the events of one run from its instance and gives a row per step: when the
executor handed it out (the Celery or multiprocess engine event, else its start), when it started
and ended, and which worker ran it. ``timeline_summary`` groups those into what a person asks of a
sharded run: how long the run took, how much of it steps were running, and how long steps waited
between being handed out and starting (the engine's overhead: queueing, process start-up, loading
the definitions).
"""

from dataclasses import dataclass

import dagster as dg

HANDED_OUT = ("in celery worker", "in subprocess")


@dataclass(frozen=True)
class StepTime:
    """One step of a run, times in seconds from the run's start."""

    step_key: str
    handed_out: float
    started: float
    ended: float
    worker: str

    @property
    def seconds(self) -> float:
        return self.ended - self.started

    @property
    def wait(self) -> float:
        return self.started - self.handed_out


def run_timeline(instance: dg.DagsterInstance, run_id: str) -> tuple[float, list[StepTime]]:
    """The run's wall time and its steps in the order they started."""
    run_start = run_end = None
    handed_out: dict[str, float] = {}
    started: dict[str, float] = {}
    ended: dict[str, float] = {}
    worker: dict[str, str] = {}
    for entry in instance.all_logs(run_id):
        event = entry.dagster_event
        if event is None:
            continue
        kind = event.event_type_value
        at = entry.timestamp
        if kind in ("RUN_START", "PIPELINE_START"):
            run_start = at
        elif kind in ("RUN_SUCCESS", "RUN_FAILURE", "PIPELINE_SUCCESS", "PIPELINE_FAILURE"):
            run_end = at
        elif not event.step_key:
            continue
        elif kind in ("ENGINE_EVENT", "STEP_WORKER_STARTED") and any(
            marker in (event.message or "") for marker in HANDED_OUT
        ):
            handed_out.setdefault(event.step_key, at)
            metadata = event.event_specific_data.metadata or {}
            name = metadata.get("Celery worker") or metadata.get("pid")
            if name is not None:
                worker[event.step_key] = str(name.value).split("@")[0]
        elif kind == "STEP_START":
            started[event.step_key] = at
        elif kind in ("STEP_SUCCESS", "STEP_FAILURE"):
            ended[event.step_key] = at
    if run_start is None:
        raise ValueError(f"run {run_id} has no start event")
    zero = run_start
    steps = [
        StepTime(
            step_key=key,
            handed_out=handed_out.get(key, started[key]) - zero,
            started=started[key] - zero,
            ended=ended[key] - zero,
            worker=worker.get(key, "in-process"),
        )
        for key in sorted(started, key=started.get)
        if key in ended
    ]
    wall = (run_end if run_end is not None else max(ended.values())) - zero
    return wall, steps


def asset_of(step_key: str) -> str:
    return step_key.split(".")[0]


def timeline_summary(wall: float, steps: list[StepTime]) -> dict:
    """The run's wall time, busy time per asset (summed over its steps and shards), the
    engine's waits, and the time no step was running at all."""
    by_asset: dict[str, dict] = {}
    for step in steps:
        asset = by_asset.setdefault(asset_of(step.step_key), {"steps": 0, "busy": 0.0, "span": []})
        asset["steps"] += 1
        asset["busy"] += step.seconds
        asset["span"].append((step.handed_out, step.ended))
    for asset in by_asset.values():
        spans = asset.pop("span")
        asset["elapsed"] = max(end for _, end in spans) - min(start for start, _ in spans)
    covered, last_end = 0.0, 0.0
    for step in sorted(steps, key=lambda s: s.started):
        start = max(step.started, last_end)
        if step.ended > start:
            covered += step.ended - start
            last_end = step.ended
    return {
        "wall": wall,
        "busy": sum(step.seconds for step in steps),
        "engine_wait": sum(step.wait for step in steps),
        "idle": wall - covered,
        "assets": by_asset,
        "workers": sorted({step.worker for step in steps}),
    }


def format_timeline(summary: dict) -> str:
    """The summary as lines a person reads."""
    lines = [
        f"wall {summary['wall']:.1f} s; steps busy {summary['busy']:.1f} s (summed over "
        f"workers); no step running {summary['idle']:.1f} s; handed out but not yet started "
        f"{summary['engine_wait']:.1f} s (summed)",
        f"  {'asset':<20} {'steps':>5} {'elapsed s':>10} {'busy s':>8}",
    ]
    for name, asset in summary["assets"].items():
        lines.append(
            f"  {name:<20} {asset['steps']:>5} {asset['elapsed']:>10.1f} {asset['busy']:>8.1f}"
        )
    return "\n".join(lines)
