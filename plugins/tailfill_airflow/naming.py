"""Names shared by the DAGs, the operator and the plugin pages: run ids, pipelines and lane labels.

The plugin pages find a task's batch reports from what the Airflow UI knows (dag id, run id, map
index) with the same functions the tasks used to name them, so the two sides cannot disagree.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tailfill.run.contract import IngestResult, JobSpec

BACKFILL, INCREMENTAL, MAINTENANCE = "backfill", "incremental", "maintenance"
REPLAYED_KEY = "replayed"  # the backfill's plan task's XCom of what its replay of committed offsets did
REPLAY_LANE = "replay"  # a backfill's replay on the plugin's pages, in place of a lane's map index


def dag_id(pipeline: str, kind: str) -> str:
    """``<pipeline>_backfill``, ``<pipeline>_incremental`` or ``<pipeline>_maintenance``."""
    return f"{pipeline}_{kind}"


def split_dag_id(dag: str) -> tuple[str, str]:
    """``(pipeline, kind)`` of one of Tailfill's DAG ids; ``ValueError`` for any other DAG."""
    for kind in (BACKFILL, INCREMENTAL, MAINTENANCE):
        if dag.endswith(f"_{kind}"):
            return dag.removesuffix(f"_{kind}"), kind
    raise ValueError(f"{dag!r} is not a Tailfill DAG (<pipeline>_backfill, _incremental or _maintenance)")


def tailfill_run_id(pipeline: str, kind: str, airflow_run_id: str, lane: int | None = None) -> str:
    """The file-name-safe Tailfill run id of a backfill lane or a tail run (stable across task retries); ``lane``
    of a tail: its table's place among the run's tails (a pipeline with a table per topic)."""
    prefix = f"{pipeline}-backfill-lane{lane}" if kind == BACKFILL else \
        f"{pipeline}-tail" + (f"-lane{lane}" if lane is not None else "")
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", f"af-{prefix}-{airflow_run_id}").strip("-")


def lane_label(slices: list[dict]) -> str:
    """A lane's label in the grid: its slices (1-based, as the job logs them) and their offsets.

    ``slices``: the lane's planned slices as ``Slice.to_dict()`` (index, count, start, end).
    """
    if not slices:
        return "no slices"
    first, last, count = slices[0]["index"] + 1, slices[-1]["index"] + 1, slices[0]["count"]
    offsets = sum(end - s["start"][topic][part]
                  for s in slices for topic, parts in s["end"].items() for part, end in parts.items())
    which = f"slice {first}" if first == last else f"slices {first}-{last}"
    return f"{which} of {count} ({offsets:,} offsets)"


def label_of_args(argv: list[str]) -> str:
    """The lane label of a job's arguments (``--slices`` JSON), for the ingest task's map index template; of a
    table of a pipeline with a table per topic, led by the table's name."""
    import json

    args = list(argv)
    label = lane_label(json.loads(args[args.index("--slices") + 1])) if "--slices" in args else "tail"
    table = table_of_job(args[args.index("--pipeline") + 1]) if "--pipeline" in args else None
    return f"{table} · {label}" if table else label


def lane_entry(spec: JobSpec) -> dict:
    """A backfill lane as the ``plan`` task's XCom lists it: its run id, label, slice indexes and the job's
    arguments."""
    args = spec.argv()
    return {"run_id": spec.run_id, "label": label_of_args(args), "slices": [s.index for s in spec.slices],
            "args": args}


def replayed_entry(result: IngestResult) -> dict:
    """What a backfill's replay of committed offsets did, as its ``plan`` task's ``replayed`` XCom holds it."""
    return {"run_id": result.run_id, "offsets": result.offsets, "rows": result.rows, "quarantined": result.quarantined,
            "batches": result.batches}


def table_of_job(pipeline: str) -> str | None:
    """The table of a job's ``--pipeline`` when it is a route's ref (``<file>#<table>:<topics>``), else None."""
    from tailfill.pipeline.routes import parse_route

    _, sep, route = pipeline.partition("#")
    return parse_route(route)[0] if sep else None


# Spark capacity shared by every Tailfill DAG of this Airflow: one pool, created by ``local.py``
# (``airflow pools set tailfill_spark <slots> …`` elsewhere). Backfill lanes may hold all slots but
# one, so an incremental run always finds a free slot.
SPARK_POOL = "tailfill_spark"
SLOTS_ENV = "TAILFILL_SPARK_SLOTS"


def spark_slots(environ: dict[str, str] | None = None) -> int:
    """Slots of the Spark pool: ``$TAILFILL_SPARK_SLOTS`` (4 when unset: three backfill lanes beside one
    incremental run), from the settings of ``environ`` (default: this process's environment)."""
    from tailfill.settings import settings

    return settings(environ).spark_slots


def backfill_lane_slots(environ: dict[str, str] | None = None) -> int:
    """How many backfill lanes may run at once across all runs of a pipeline: every slot but one."""
    return spark_slots(environ) - 1


def lanes_at_once(asked: int, environ: dict[str, str] | None = None) -> str:
    """What a run of ``asked`` lanes will really run in parallel, in one line for the plan's log."""
    room = backfill_lane_slots(environ)
    pool = f"pool `{SPARK_POOL}`: {room + 1} slots, one kept for the incremental DAG"
    if asked <= room:
        return f"{asked} lane(s), all at once ({pool})"
    return (f"{asked} lanes asked, {room} run at once ({pool}); the rest wait for a slot "
            f"(more at once: set {SLOTS_ENV} and the pool's slots)")
