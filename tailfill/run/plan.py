"""Where a run starts and ends: the cutover, backfill slices, the tail's start, and the requests.

History and tail are separate: the cutover is recorded once per pipeline, in the data
table's properties; the backfill covers ``[earliest, cutover)`` in slices, the tail ``[cutover, ∞)``.
The one resume truth is the table's ledger: every request starts at the first uncommitted offset
of its bounds, and a missing position is never replaced by "latest".
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pyiceberg.table import Table

from tailfill.config import RETRY_CEILING_SECONDS, PipelineConfig
from tailfill.errors import ConfigError, LakeError, SourceError
from tailfill.lake.ledger import Ledger, read_cutover, read_ledger, record_cutover
from tailfill.lake.tables import Tables
from tailfill.lake.topic_ids import read_topic_ids, record_topic_ids, with_topic_ids
from tailfill.offsets import (
    OffsetRange,
    PartitionOffsets,
    TopicPartition,
    by_partition,
    ranges_between,
    split_slices,
    total,
)
from tailfill.pipeline.handle import Pipeline
from tailfill.run.backfill_inputs import refuse_start_after_end
from tailfill.run.contract import Mode, Slice
from tailfill.source.kafka import Watermarks, subscribed_partitions, watermarks
from tailfill.source.partition_count import check_partition_counts
from tailfill.source.topic_ids import check_same_topics, topic_ids


@dataclass(frozen=True)
class SourceState:
    """What the broker and the tables say right now. ``tables`` None: they were never made (nothing is
    committed, no cutover is recorded)."""

    pipeline: Pipeline
    tables: Tables | None
    marks: Watermarks
    ledger: Ledger
    cutover: PartitionOffsets | None
    topic_ids: dict[str, str] = field(default_factory=dict)  # each topic's id on the broker now
    recorded_ids: dict[str, str] = field(default_factory=dict)  # the ids the table recorded

    @property
    def cfg(self) -> PipelineConfig:
        """The pipeline's config, its broker's address resolved."""
        return self.pipeline.resolved

    @property
    def data(self) -> Table:
        """The data table (the planner's state always has one: it provisions the tables first)."""
        if self.tables is None:
            raise LakeError(f"the tables of pipeline {self.pipeline.name} were never made (fix: plan a run first: "
                            "`tailfill backfill` or `tailfill tail`)")
        return self.tables.data


def source_state(pipeline: Pipeline, tables: Tables | None) -> SourceState:
    """Read the broker's watermarks and, from ``tables`` (None: never made), the ledger and the cutover."""
    cfg = pipeline.resolved
    parts = subscribed_partitions(pipeline.kafka, cfg.source)
    ids = topic_ids(pipeline.kafka, sorted(topics_of(parts)))  # one request, every plan
    marks = watermarks(pipeline.kafka, parts)
    ledger, cutover, recorded = Ledger(), None, {}
    if tables is not None:
        tables.data.refresh()
        ledger, cutover, recorded = read_ledger(tables.data), read_cutover(tables.data), read_topic_ids(tables.data)
        check_same_topics(recorded, ids, seen(marks, ledger), cfg.source.bootstrap_servers,
                          ".".join(tables.data.name()), cfg.name)
    check_partition_counts(cfg.source, parts, str(cfg.path))
    check_not_behind(cfg, marks, ledger)
    return SourceState(pipeline, tables, marks, ledger, cutover, ids, recorded)


def seen(marks: Watermarks, ledger: Ledger) -> dict[str, str]:
    """Per topic, what the broker holds and what the table holds, in words (for a recreated topic's message)."""
    held = {t: max(r.end for r in ledger.committed if r.topic == t) for t in topics_of(ledger.committed)}
    out = {}
    for topic in topics_of(marks.high):
        parts = [tp for tp in marks.high if tp.topic == topic]
        now = (f"it has {len(parts)} partition{'s' * (len(parts) != 1)} ending at "
               f"{', '.join(f'{marks.high[tp]:,}' for tp in parts)}")
        out[topic] = now + (f"; the table holds offsets up to {held[topic]:,}" if topic in held else
                            "; the table holds none of it yet")
    return out


def ensure_topic_ids(state: SourceState) -> None:
    """Record the ids of the topics the table has none for yet (a new topic, a table made before ids were recorded,
    a backfill to explicit bounds before any cutover); the planner's, as the cutover is, after it."""
    if state.tables is not None and set(state.topic_ids) - set(state.recorded_ids):
        record_topic_ids(state.data, state.topic_ids)


def topics_of(ranges: Iterable[OffsetRange] | Iterable[TopicPartition]) -> set[str]:
    """The topics that ``ranges`` (or partitions) are of."""
    return {r.topic for r in ranges}


def new_and_gone_topics(state: SourceState) -> tuple[list[str], list[str]]:
    """Topics on the broker that neither the cutover nor the ledger knows (they came after the cutover: the tail
    reads them from their earliest offset), and topics the ledger holds that the source no longer finds."""
    on_broker = topics_of(state.marks.high)
    known = topics_of(state.ledger.committed) | (topics_of(state.cutover) if state.cutover is not None else set())
    new = sorted(on_broker - known) if state.cutover is not None else []
    return new, sorted(topics_of(state.ledger.committed) - on_broker)


def check_not_behind(cfg: PipelineConfig, marks: Watermarks, ledger: Ledger) -> None:
    """Refuse a topic whose end is before what the table has committed: the broker lost data, or the
    topic was deleted and created again. Nothing can be planned from there without a person's decision.
    """
    behind = [f"{tp} ends at {marks.high[tp]:,} but the table holds offsets up to {ranges[-1].end:,}"
              for tp, ranges in by_partition(ledger.committed).items()
              if tp in marks.high and marks.high[tp] < ranges[-1].end]
    if behind:
        raise SourceError(
            f"{cfg.source.described} on {cfg.source.bootstrap_servers} went backwards: {'; '.join(behind)}. "
            "The broker lost data or the topic was created again; offsets from here would be new records under "
            f"old numbers (fix: find out what happened to the topic; to start over, `tailfill reset {cfg.name}` "
            "or ingest into a new table)")


def ensure_cutover(state: SourceState) -> PartitionOffsets:
    """The recorded cutover, recording the broker's current ends if there is none yet (under ``read_committed``
    the last stable offsets: a transaction still open at that moment is the tail's), and the topics' ids with it."""
    if state.cutover is not None:
        return state.cutover
    return record_cutover(state.data, state.marks.high, with_topic_ids(state.topic_ids))


def plan_backfill(
    state: SourceState,
    start: PartitionOffsets | None = None,
    end: PartitionOffsets | None = None,
    slices: int | None = None,
) -> list[Slice]:
    """Slices of ``[start, end)`` (default ``[earliest, cutover)``) that still hold uncommitted offsets.

    The bounds are not checked here: the planner refuses those the broker cannot have (see
    :func:`check_bounds`) before it calls this.
    """
    start = start or state.marks.low
    end = end or ensure_cutover(state)
    pieces = split_slices(ranges_between(start, end), slices or state.cfg.backfill.slices)
    planned = [Slice(i, len(pieces), PartitionOffsets({r.tp: r.start for r in piece}),
                     PartitionOffsets({r.tp: r.end for r in piece})) for i, piece in enumerate(pieces)]
    return [s for s in planned if s.remaining(state.ledger.committed) is not None]


def check_bounds(state: SourceState, start: PartitionOffsets | None, end: PartitionOffsets) -> None:
    """Refuse a backfill's ``[start, end)`` that the topic cannot hold, naming each partition and both ends."""
    topic = state.cfg.source.described
    marks = state.marks
    unknown = sorted(tp for tp in end if tp not in marks.high)
    if unknown:
        have = ", ".join(f"{t} 0 to {n - 1}" for t, n in sorted(Counter(tp.topic for tp in marks.high).items()))
        raise ConfigError(f"backfill bounds: {', '.join(map(str, unknown))} is not a partition of {topic} "
                          f"(fix: name partitions the source has: {have})")
    refuse_start_after_end(start, end)
    past = [f"{tp}: asked up to {end[tp]:,}, the broker's end is {marks.high[tp]:,}" for tp in sorted(end)
            if end[tp] > marks.high[tp]]
    if past:
        raise ConfigError(f"backfill bounds past the end of {topic} on {state.cfg.source.bootstrap_servers}: "
                          f"{'; '.join(past)} (fix: give To at most the broker's end, or `cutover` to "
                          "backfill up to the cutover)")


def tail_start(state: SourceState, cutover: PartitionOffsets) -> PartitionOffsets:
    """Where the tail resumes: the end of the committed run from the ``cutover``, per partition.

    Partitions created after the cutover are tail-only and start at 0.
    """
    base = PartitionOffsets({tp: cutover.get(tp, 0) or 0 for tp in state.marks.high})
    return state.ledger.position(base)


def resume_at(ledger: Ledger, at: PartitionOffsets, end: PartitionOffsets | None) -> PartitionOffsets:
    """Where an attempt of a request reads from: ``at`` (the request's start, or the batch being replayed) moved
    past every offset the ``ledger`` holds from there, never past the request's ``end``. A restart reads what is
    left, not what the run already did."""
    position = ledger.position(at)
    out = {}
    for tp in position:
        limit = end.get(tp) if end is not None else None
        out[tp] = position[tp] if limit is None else min(position[tp], max(limit, at[tp]))
    return PartitionOffsets(out)


def checkpoint_key(mode: Mode, start: PartitionOffsets, end: PartitionOffsets | None) -> str:
    """A checkpoint name from a request's bounds: the same bounds, and only they, share a checkpoint."""
    bounds = start.to_json() + (end.to_json() if end is not None else "")
    return f"{mode}-{hashlib.sha1(bounds.encode()).hexdigest()[:12]}"


@dataclass(frozen=True)
class IngestRequest:
    """One streaming query: ingest ``[start, end)`` (``end`` None: unbounded) in capped micro-batches."""

    label: str
    start: PartitionOffsets
    end: PartitionOffsets | None
    max_offsets_per_batch: int  # the first batch's cap, and every batch's limit
    max_consecutive_failures: int
    restart_backoff_seconds: float  # the first restart's wait; doubled per consecutive failure
    checkpoint: Path
    run_id: str
    trigger: Literal["available_now", "processing_time"] = "available_now"
    trigger_interval_seconds: float = 30.0
    target_end: PartitionOffsets | None = None  # for the progress of an unbounded tail
    stop_after_seconds: float | None = None  # processing time: stop between batches after this long
    batch_seconds: float | None = None  # size batches by this time budget (None: always the cap)
    max_offsets_per_second: int | None = None  # a backfill's rate limit (None: none)
    stall_timeout_seconds: float | None = None  # a tail: no commit for this long while busy is a failure
    retry_ceiling_seconds: float = RETRY_CEILING_SECONDS  # restarts without a commit stop after this long

    @property
    def name(self) -> str:
        """The query's name: its checkpoint's, and its batch report file's."""
        return self.checkpoint.name


def checkpoint_root(cfg: PipelineConfig, mode: Mode) -> Path:
    return Path(cfg.checkpoint_location) / cfg.name / mode


def contiguous(slices: list[Slice]) -> list[list[Slice]]:
    """``slices`` in runs where each one starts, on every partition, where the one before ends."""
    runs: list[list[Slice]] = []
    for s in sorted(slices, key=lambda s: s.index):
        if runs and runs[-1][-1].end.offsets == s.start.offsets:
            runs[-1].append(s)
        else:
            runs.append([s])
    return runs


def joined(run: list[Slice]) -> Slice:
    """Adjacent slices as one: from the first's start to the last's end."""
    return Slice(run[0].index, run[0].count, run[0].start, run[-1].end)


def backfill_requests(state: SourceState, slices: list[Slice], run_id: str,
                      max_offsets_per_batch: int | None = None,
                      max_offsets_per_second: int | None = None) -> list[IngestRequest]:
    """One request per run of adjacent slices that still holds uncommitted offsets, from its first one.

    Adjacent slices run as one streaming query: its batches read every partition in parallel tasks
    (splitting a partition's range when there are fewer partitions than cores), so joining them
    costs no parallelism and saves a query's start per slice (measured: ~1-3 s each).
    """
    cfg, out = state.cfg, []
    for run in contiguous(slices):
        s = joined(run).remaining(state.ledger.committed)
        if s is None:
            continue
        which = f"slice {run[0].index + 1}" if len(run) == 1 else f"slices {run[0].index + 1}-{run[-1].index + 1}"
        out.append(IngestRequest(
            label=f"{cfg.name} backfill {which}/{run[0].count} ({total(joined(run).ranges):,} offsets)",
            start=s.start,
            end=s.end,
            max_offsets_per_batch=max_offsets_per_batch or cfg.backfill.max_offsets_per_batch,
            max_consecutive_failures=cfg.backfill.max_consecutive_failures,
            restart_backoff_seconds=cfg.backfill.restart_backoff_seconds,
            retry_ceiling_seconds=cfg.backfill.retry_ceiling_seconds,
            checkpoint=checkpoint_root(cfg, "backfill") / checkpoint_key("backfill", s.start, s.end),
            run_id=run_id,
            batch_seconds=cfg.backfill.batch_seconds,
            max_offsets_per_second=max_offsets_per_second or cfg.backfill.max_offsets_per_second,
        ))
    return out


def tail_request(state: SourceState, cutover: PartitionOffsets, run_id: str, once: bool = False,
                 stop_after_seconds: float | None = None, max_offsets_per_batch: int | None = None) -> IngestRequest:
    """The tail from its committed position after the recorded ``cutover``: once (what is there now) or on
    the pipeline's trigger."""
    cfg = state.cfg
    start = tail_start(state, cutover)
    return IngestRequest(
        label=f"{cfg.name} tail",
        start=start,
        end=None,
        max_offsets_per_batch=max_offsets_per_batch or cfg.tail.max_offsets_per_batch,
        max_consecutive_failures=cfg.tail.max_consecutive_failures,
        restart_backoff_seconds=cfg.tail.restart_backoff_seconds,
        retry_ceiling_seconds=cfg.tail.retry_ceiling_seconds,
        checkpoint=checkpoint_root(cfg, "tail") / checkpoint_key("tail", start, None),
        run_id=run_id,
        trigger="available_now" if once else cfg.tail.trigger,
        trigger_interval_seconds=cfg.tail.trigger_interval_seconds,
        target_end=state.marks.high,
        stop_after_seconds=stop_after_seconds,
        stall_timeout_seconds=max(cfg.tail.stall_timeout_seconds, 3 * cfg.tail.trigger_interval_seconds),
    )
