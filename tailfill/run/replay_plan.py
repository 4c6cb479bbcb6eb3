"""What a replay covers: committed offsets only, still on the broker, in batches of one range per partition.

``tailfill replay`` re-reads offsets the table has committed, with the pipeline as it is now, and replaces
their rows (:mod:`tailfill.run.replay`). Planning turns the request (``--from``/``--to`` or ``--run``) into
those offsets: the uncommitted part of a range is clipped off (one line says which), offsets recorded as lost
are left out (they never had rows), and offsets the broker no longer holds refuse the whole replay before
anything is written.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyiceberg.table import Table

from tailfill.errors import ConfigError, ReplayExpiredError
from tailfill.lake.audit_log import audit_log
from tailfill.lake.ledger import Ledger
from tailfill.offsets import (
    OffsetRange,
    PartitionOffsets,
    TopicPartition,
    by_partition,
    cap,
    intersect_all,
    merge,
    ranges_between,
    subtract,
    total,
)
from tailfill.pipeline.handle import Pipeline
from tailfill.proof.audit import committed_batches
from tailfill.run.contract import new_run_id
from tailfill.run.plan import source_state


@dataclass(frozen=True)
class ReplayRequest:
    """``[start, end)`` (None: from offset 0, up to the committed end) or the ranges a past run committed."""

    start: PartitionOffsets | None = None
    end: PartitionOffsets | None = None
    run: str | None = None  # a run id of the ledger (a backfill's or a tail's)


@dataclass(frozen=True)
class ReplayPlan:
    """The replay's run id, its batches (each at most one range per partition) and what planning decided."""

    run_id: str
    batches: list[list[OffsetRange]]
    lines: list[str] = field(default_factory=list)

    @property
    def offsets(self) -> int:
        return sum(total(b) for b in self.batches)


def split_committed(asked: list[OffsetRange], ledger: Ledger) -> tuple[list[OffsetRange], list[OffsetRange],
                                                                       list[OffsetRange]]:
    """``asked`` as (committed offsets with rows to replay, uncommitted offsets, offsets recorded as lost)."""
    asked = merge(asked)
    committed = intersect_all(asked, ledger.committed)
    lost = intersect_all(committed, ledger.lost)
    return subtract(committed, lost), subtract(asked, ledger.committed), lost


def check_on_broker(ranges: list[OffsetRange], low: PartitionOffsets, where: str) -> None:
    """Refuse ranges that start below their partition's earliest offset on the broker (retention removed them)."""
    for tp, rs in sorted(by_partition(ranges).items()):
        earliest = low.get(tp, 0) or 0
        if rs[0].start < earliest:
            raise ReplayExpiredError(
                f"cannot replay topic {tp.topic} partition {tp.partition}: offset {rs[0].start:,} is no longer on "
                f"{where} (earliest available is {earliest:,}: retention removed [{rs[0].start:,}, {earliest:,})); "
                "nothing was written (fix: replay from the earliest offset on, e.g. --from "
                f'\'{{"{tp.topic}": {{"{tp.partition}": {earliest}}}}}\')')


def replay_batches(ranges: list[OffsetRange], max_offsets: int) -> list[list[OffsetRange]]:
    """``ranges`` in batches of at most ``max_offsets`` offsets (at least one per partition with work), each
    holding at most one range per partition."""
    todo, out = merge(ranges), []
    while todo:
        firsts = [rs[0] for rs in by_partition(todo).values()]
        batch = cap(firsts, max_offsets)
        out.append(batch)
        todo = subtract(todo, batch)
    return out


def _asked(pipeline: Pipeline, request: ReplayRequest, data: Table, ledger: Ledger, topic: str,
           partitions: list[TopicPartition]) -> list[OffsetRange]:
    """The offsets the request names, before clipping."""
    if request.run is not None:
        batches = committed_batches(audit_log(pipeline.state, data), data, request.run)
        if not batches:
            raise ConfigError(f"run {request.run} committed nothing to {'.'.join(data.name())} (fix: a run id from "
                              "a run's summary line, or `tailfill validate --all`)")
        return merge(r for b in batches for r in b.ranges)
    unknown = sorted({tp for bound in (request.start, request.end) if bound for tp in bound} - set(partitions))
    if unknown:
        raise ConfigError(f"replay bounds: {', '.join(map(str, unknown))} is not a partition of {topic} "
                          f"(it has {len(partitions)})")
    named = [tp for tp in partitions if (request.start and tp in request.start) or (request.end and tp in request.end)]
    ends = {r.tp: r.end for r in merge(ledger.committed)}
    chosen = named or partitions
    end = PartitionOffsets({tp: request.end[tp] if request.end and tp in request.end else ends.get(tp, 0)
                            for tp in chosen})
    start = PartitionOffsets({tp: request.start[tp] if request.start and tp in request.start else 0 for tp in chosen})
    try:
        return ranges_between(start, end)
    except ValueError as exc:
        raise ConfigError(f"replay bounds: {exc} (fix: swap --from and --to)") from None


def plan_replay(pipeline: Pipeline, request: ReplayRequest) -> ReplayPlan:
    """Plan ``request``: the tables first take the pipeline's declared columns (as before any run); refuses a keyed
    table, and offsets no longer on the broker (:class:`ReplayExpiredError`, nothing written)."""
    cfg = pipeline.cfg
    if pipeline.keyed:
        raise ConfigError(f"pipeline {cfg.name} is keyed (target.mode: upsert): replay replaces rows of append-mode "
                          "tables only (fix: `tailfill reset` and a new backfill rebuild a keyed table)")
    tables = pipeline.provision_tables()  # a field added to the YAML becomes a column here, as on a normal run
    state = source_state(pipeline, tables)
    asked = _asked(pipeline, request, tables.data, state.ledger, cfg.source.described, list(state.marks.high))
    todo, uncommitted, lost = split_committed(asked, state.ledger)
    lines = []
    if uncommitted:
        lines.append(f"clipped: {', '.join(map(str, uncommitted))} not committed ({total(uncommitted):,} offsets): "
                     "replay covers committed offsets only (backfill or tail them first)")
    if lost:
        lines.append(f"left out: {', '.join(map(str, lost))} recorded as lost (expired before ingest; no rows)")
    check_on_broker(todo, state.marks.low, f"{state.cfg.source.bootstrap_servers}")
    batches = replay_batches(todo, cfg.backfill.max_offsets_per_batch)
    return ReplayPlan(new_run_id("replay"), batches, lines)
