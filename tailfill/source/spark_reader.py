"""The readers of ``tailfill_kafka`` (:mod:`tailfill.source.spark_source`, where its options are
described), batch and streaming: offsets and input partitions planned on the driver's side, records
or ranges read in the tasks. A streaming reader reads the broker's ends once per trigger, and a
failure of its planning is handed to the writer as data (``failureFile``) before Spark passes it on
as text."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)

from tailfill.config import SourceConfig
from tailfill.errors import ConfigError, ErrorInfo, ExpiredOffsetsError
from tailfill.offsets import OffsetRange, PartitionOffsets, cap, deal, ranges_between
from tailfill.source.handoff import Budget, report_failure
from tailfill.source.kafka import OwnedConsumer, consumer_config, read_range, subscribed_partitions, watermarks
from tailfill.source.partition_count import check_partition_counts
from tailfill.source.stream_api import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from tailfill.values.schema import RANGE_SCHEMA

MIN_SPLIT_OFFSETS = 100_000  # a range is halved for parallel tasks only if each half has this many


class RangePartition(InputPartition):
    """The offset ranges one task reads (one, except with ``output=ranges`` and ``tasks``)."""

    def __init__(self, ranges: list[OffsetRange]):
        super().__init__(ranges)
        self.ranges = ranges


class KafkaOptions:
    """Parsed options shared by the batch and the streaming reader; ``output``: the checked ``output`` option."""

    def __init__(self, options: dict[str, str], output: str):
        options = {k.lower(): v for k, v in options.items()}  # Spark lower-cases option keys
        if "source" not in options:
            raise ConfigError("tailfill_kafka needs the 'source' option (the pipeline's source block as JSON)")
        self.source = SourceConfig.model_validate_json(options["source"])
        self.conf = consumer_config(self.source)
        self.starting = options.get("startingoffsets")
        self.ending = options.get("endingoffsets")
        max_offsets = options.get("maxoffsetspertrigger")
        self.max_offsets = int(max_offsets) if max_offsets else None
        self.budget_file = Path(options["budgetfile"]) if options.get("budgetfile") else None
        self.failure_file = Path(options["failurefile"]) if options.get("failurefile") else None
        self.markers = options.get("includerangemarkers", "false").lower() == "true"
        self.output = output
        self.tasks = int(options["tasks"]) if options.get("tasks") else None
        self.consumer = OwnedConsumer(self.conf)  # kept across this reader's calls; closed when it stops

    def budget(self) -> int | None:
        """This batch's cap: the writer's :class:`Budget`, within ``maxOffsetsPerTrigger``, else that alone."""
        budget = Budget.read(self.budget_file)
        return budget.within(self.max_offsets, self.tasks)[0] if budget else self.max_offsets

    def task_count(self) -> int | None:
        """This batch's number of tasks: the writer's :class:`Budget`, within ``tasks``, else that alone."""
        budget = Budget.read(self.budget_file)
        return budget.within(self.max_offsets, self.tasks)[1] if budget else self.tasks

    def partitions(self) -> list:
        """The source's partitions now; a count other than ``source.partitions`` (when set) stops the query."""
        parts = subscribed_partitions(self.conf, self.source, consumer=self.consumer)
        check_partition_counts(self.source, parts)
        return parts

    def resolve(self, spec: str | None, role: str) -> PartitionOffsets:
        """Offsets from JSON, or from the broker for ``earliest`` / ``latest`` (ending only)."""
        if spec not in (None, "earliest", "latest"):
            return PartitionOffsets.from_json(spec)
        if spec == "latest" and role == "starting":
            raise ConfigError(
                "startingOffsets=latest would skip every record not yet ingested; tailfill starts from "
                "explicit offsets (the table's committed position) or 'earliest'"
            )
        marks = watermarks(self.conf, self.partitions())
        return marks.low if spec == "earliest" else marks.high

    def check_expired(self, ranges: list[OffsetRange]) -> None:
        """Fail at planning time if a range starts below what the broker still has, naming every offset of the
        request that is gone: from the range's start to the earliest available (a batch's range is only the
        first part of it), within the request's end when it has one."""
        if self.source.on_expired_offsets == "record_gap":
            return
        low = watermarks(self.conf, sorted({r.tp for r in ranges}),
                         consumer=self.consumer).low
        ending = PartitionOffsets.from_json(self.ending) if self.ending not in (None, "latest") else None
        for r in ranges:
            earliest = low.get(r.tp, 0) or 0
            if r.start < earliest:
                end = min(earliest, ending.get(r.tp, earliest) or earliest) if ending is not None else earliest
                raise ExpiredOffsetsError(r.with_bounds(r.start, end), earliest)

    def input_partitions(self, start: PartitionOffsets, end: PartitionOffsets) -> list[RangePartition]:
        ranges = [r for r in ranges_between(start, end) if not r.is_empty()]
        self.check_expired(ranges)
        tasks = self.task_count()
        if self.output == "ranges" and tasks:
            return [RangePartition(group) for group in deal(ranges, tasks, MIN_SPLIT_OFFSETS)]
        return [RangePartition([r]) for r in ranges]

    def read(self, partition: RangePartition):
        if self.output == "ranges":
            yield range_batch(partition.ranges)
            return
        [r] = partition.ranges
        yield from read_range(self.conf, r, on_expired=self.source.on_expired_offsets, with_marker=self.markers)


class KafkaBatchReader(DataSourceReader):
    def __init__(self, opts: KafkaOptions):
        self.opts = opts

    def partitions(self) -> list[RangePartition]:
        start = self.opts.resolve(self.opts.starting or "earliest", "starting")
        end = self.opts.resolve(self.opts.ending, "ending")
        return self.opts.input_partitions(start, end)

    def read(self, partition: RangePartition):
        return self.opts.read(partition)


Planning = TypeVar("Planning", bound=Callable[..., Any])


def _reported(method: Planning) -> Planning:
    """A planning step of the stream reader whose failure is also handed to the writer, as data."""

    @functools.wraps(method)
    def planned(self: KafkaStreamReader, *args: Any) -> Any:
        try:
            return method(self, *args)
        except Exception as exc:
            report_failure(self.opts.failure_file, ErrorInfo.of(exc))
            raise

    return planned  # type: ignore[return-value]


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: KafkaOptions):
        self.opts = opts
        self.target: PartitionOffsets | None = None
        self.latest: PartitionOffsets | None = None  # the end the last latestOffset read, for reportLatestOffset
        self.position: PartitionOffsets | None = None  # where the latest batch planned ends (Spark 4.1's start)
        if opts.starting is None:
            raise ConfigError("streaming from Kafka needs explicit startingOffsets (JSON or 'earliest')")

    @_reported
    def initialOffset(self) -> dict:
        self.position = self.opts.resolve(self.opts.starting, "starting")
        return self.position.to_dict()

    def _end(self) -> PartitionOffsets:
        if self.target is not None:
            return self.target
        if self.opts.ending:
            return self.opts.resolve(self.opts.ending, "ending")
        return self.opts.resolve(None, "ending")

    @_reported
    def prepareForTriggerAvailableNow(self) -> None:
        self.target = self._end()

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.opts.max_offsets) if self.opts.max_offsets else ReadAllAvailable()

    @_reported
    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        """The next batch's end, within the budget. Spark 4.2 gives the batch's start (and ``maxOffsetsPerTrigger``
        as ``limit``, which the budget holds already); Spark 4.1 neither, and the start is where the latest batch
        planned ends, else ``startingOffsets`` (a query starts afresh from there or replays its checkpoint's planned
        batch first: :mod:`tailfill.run.checkpoint`)."""
        if start is not None:
            begin = PartitionOffsets.from_dict(start)
        else:  # before any batch of this reader: where the query starts
            begin = self.position or self.opts.resolve(self.opts.starting, "starting")
        end = self.latest = self._end()
        return batch_end(begin, end, self.opts.budget()).to_dict()

    @_reported
    def reportLatestOffset(self) -> dict | None:
        """The end latestOffset just read (Spark asks right after it): the broker is read once per trigger."""
        return (self.latest or self._end()).to_dict()

    @_reported
    def partitions(self, start: dict, end: dict) -> list[RangePartition]:
        self.position = PartitionOffsets.from_dict(end)
        return self.opts.input_partitions(PartitionOffsets.from_dict(start), self.position)

    def read(self, partition: RangePartition):
        return self.opts.read(partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: positions live in the table's ledger, not in consumer groups."""

    def stop(self) -> None:
        """The query stopped: let go of the reader's consumer."""
        self.opts.consumer.close()


def batch_end(begin: PartitionOffsets, end: PartitionOffsets, budget: int | None) -> PartitionOffsets:
    """Where the batch from ``begin`` ends: at ``end``, or sooner on some partitions when its offsets would pass
    ``budget`` (None: no cap; 0: nothing, the query is held). Equal to ``begin`` when there is nothing to read."""
    ranges = [r for r in ranges_between(begin, _at_least(end, begin)) if not r.is_empty()]
    if budget == 0:
        ranges = []
    elif budget is not None:
        ranges = cap(ranges, budget)
    out = dict(begin.offsets)
    out.update({r.tp: r.end for r in ranges})
    return PartitionOffsets(out)


def range_batch(ranges: list[OffsetRange]) -> pa.RecordBatch:
    """``ranges`` as rows of :data:`~tailfill.values.schema.RANGE_SCHEMA` (what ``output=ranges`` reads)."""
    return pa.RecordBatch.from_pylist([{"kafka_topic": r.topic, "kafka_partition": r.partition,
                                        "start_offset": r.start, "end_offset": r.end} for r in ranges],
                                      schema=RANGE_SCHEMA)


def _at_least(end: PartitionOffsets, start: PartitionOffsets) -> PartitionOffsets:
    """``end`` never behind ``start`` (a bounded slice already past its end reads nothing)."""
    merged = dict(start.offsets)
    for tp in end:
        merged[tp] = max(end[tp], start.get(tp, 0) or 0)
    return PartitionOffsets(merged)
