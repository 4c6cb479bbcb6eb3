"""Where a run starts and ends: the cutover, backfill slices, and the tail's start position.

History and tail are separate (seed 001): the cutover is recorded once per pipeline, in the data
table's properties; the backfill covers ``[earliest, cutover)`` in slices, the tail ``[cutover, ∞)``.
A missing position is never replaced by "latest".
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from pyiceberg.table import Table

from tailfill.config import PipelineConfig
from tailfill.kafka_client import Watermarks, consumer_config, list_partitions, watermarks
from tailfill.lake import ensure_tables
from tailfill.ledger import Ledger, read_cutover, read_ledger, record_cutover
from tailfill.offsets import OffsetRange, PartitionOffsets, ranges_between, split_slices, subtract, total


@dataclass(frozen=True)
class SourceState:
    """What the broker and the table say right now."""

    cfg: PipelineConfig
    table: Table
    quarantine: Table
    marks: Watermarks
    ledger: Ledger
    cutover: PartitionOffsets | None


def source_state(cfg: PipelineConfig) -> SourceState:
    conf = consumer_config(cfg.source)
    parts = list_partitions(conf, cfg.source.topic)
    if cfg.source.partitions is not None and len(parts) != cfg.source.partitions:
        raise ValueError(
            f"{cfg.path}: source.partitions: topic {cfg.source.topic!r} has {len(parts)} partitions, "
            f"the pipeline expects {cfg.source.partitions} (fix: update the pipeline after a repartition)"
        )
    marks = watermarks(conf, parts)
    table, quarantine = ensure_tables(cfg)
    return SourceState(cfg, table, quarantine, marks, read_ledger(table), read_cutover(table))


def ensure_cutover(state: SourceState) -> PartitionOffsets:
    """The recorded cutover, recording the broker's current ends if there is none yet."""
    return state.cutover or record_cutover(state.table, state.marks.high)


@dataclass(frozen=True)
class Slice:
    """A bounded part of the backfill: ``[start, end)`` per partition."""

    index: int
    count: int
    start: PartitionOffsets
    end: PartitionOffsets

    @property
    def ranges(self) -> list[OffsetRange]:
        return ranges_between(self.start, self.end)

    @property
    def key(self) -> str:
        """Stable name for the slice's checkpoint: the same bounds give the same key."""
        digest = hashlib.sha1((self.start.to_json() + self.end.to_json()).encode()).hexdigest()[:12]
        return f"slice-{digest}"

    def __str__(self) -> str:
        return f"slice {self.index + 1}/{self.count} ({total(self.ranges):,} offsets)"


def plan_backfill(
    state: SourceState,
    start: PartitionOffsets | None = None,
    end: PartitionOffsets | None = None,
    slices: int | None = None,
) -> list[Slice]:
    """Slices of ``[start, end)`` (default ``[earliest, cutover)``) that still hold uncommitted offsets."""
    start = start or state.marks.low
    end = end or ensure_cutover(state)
    pieces = split_slices(ranges_between(start, end), slices or state.cfg.backfill.slices)
    plan = []
    for i, piece in enumerate(pieces):
        todo = subtract(piece, state.ledger.committed)
        if not todo:
            continue
        ends = {r.tp: r.end for r in piece}
        first = dict(ends)  # a partition already done in this slice reads nothing
        for r in reversed(todo):
            first[r.tp] = r.start
        plan.append(Slice(i, len(pieces), PartitionOffsets(first), PartitionOffsets(ends)))
    return plan


def tail_start(state: SourceState) -> PartitionOffsets:
    """Where the tail resumes: the end of the committed run from the cutover, per partition.

    Partitions created after the cutover are tail-only and start at 0.
    """
    cutover = ensure_cutover(state)
    base = PartitionOffsets({tp: cutover.get(tp, 0) or 0 for tp in state.marks.high})
    return state.ledger.position(base)
