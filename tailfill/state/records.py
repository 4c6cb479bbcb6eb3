"""The typed records of the shared run state, each with ``to_json``/``from_json``.

:class:`BatchReport` (one per committed micro-batch), :class:`TailHealth` (the tail's last
measurements), :class:`StopRequest` (``tailfill stop-tail``), :class:`TailClaim` (the running tail),
:class:`LaneRecord` (what the Airflow pages know of a lane beyond its batch reports) and
:class:`FailureRecord` (a failed task or a missed deadline). Where each is stored: :mod:`tailfill.state.store`.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field, fields, replace

from tailfill.offsets import OffsetRange, ranges_from_json, ranges_to_json
from tailfill.values.batch_cost import BatchCost, PartitionSpread
from tailfill.values.freshness import Freshness

KEEP_UP_TOLERANCE = 1.05  # incoming may exceed capacity by this much before it is called a problem
KEEP_UP_HEADROOM = 1.2  # a fix sizes for this much more than the incoming rate
MIN_LIVE_SECONDS = 15.0  # a heartbeat older than max(this, 3 intervals) means no tail is running


class _Plain:
    """``to_json``/``from_json`` for a record of plain JSON values."""

    def to_json(self) -> str:
        return json.dumps(asdict(self))  # type: ignore[call-overload]

    @classmethod
    def from_json(cls, text: str):
        known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        return cls(**{k: v for k, v in json.loads(text).items() if k in known})


@dataclass(frozen=True)
class BatchReport:
    """One micro-batch: its offsets, what became rows or quarantine, what the commit did, how long it took."""

    batch_id: int
    at: float  # when the commit finished (unix seconds)
    seconds: float  # from the batch's trigger (or the previous batch's end) to the end of this commit
    offsets: int
    records: int  # what the source read (offsets minus absent or expired ones)
    rows: int
    quarantined: int
    committed: list[OffsetRange] = field(default_factory=list)
    skipped: list[OffsetRange] = field(default_factory=list)  # already committed (a replay)
    snapshot_id: int | None = None
    commit_ms: float = 0.0
    # Where the time went: plan (Spark, between batches), prepare (wall), read/parse/write (summed
    # over the batch's tasks, which run in parallel), commit; yield: a backfill's wait for its rate
    # limit or the tail, after the commit.
    stages: dict[str, float] = field(default_factory=dict)
    # Produce-to-commit latency of the batch's records (p50, p95, max seconds; records): Kafka
    # timestamp to this commit. The tail's freshness; for a backfill, how old the history is.
    freshness: dict | None = None
    # A keyed pipeline's merge: its changes inserted, updated, deleted, truncated, superseded (None: append).
    changes: dict[str, int] | None = None
    # JSON fields the batch's records held that format.fields does not declare: dotted path → [records, partition,
    # offset of the first] (tailfill.values.drift.Drift.unknown).
    unknown_fields: dict[str, list[int]] = field(default_factory=dict)
    table_partitions: int | None = None  # the data table's partitions its rows went to (None: not counted)

    def to_json(self) -> str:
        data = asdict(self)
        data["committed"], data["skipped"] = ranges_to_json(self.committed), ranges_to_json(self.skipped)
        return json.dumps(data)

    @classmethod
    def from_json(cls, line: str) -> BatchReport:
        data = json.loads(line)
        data["committed"], data["skipped"] = ranges_from_json(data["committed"]), ranges_from_json(data["skipped"])
        return cls(**data)



def format_stages(stages: dict[str, float]) -> str:
    """``plan 0.6s, prepare 1.2s, …``: where a batch's (or a run's) time went."""
    return ", ".join(f"{k} {v:.1f}s" for k, v in stages.items())


@dataclass(frozen=True)
class TailHealth:
    """What the tail measured at its last batch (and when it last said it was alive).

    Whether that meets the objective is :func:`tailfill.state.tail_verdict.tail_verdict`'s to say.
    """

    alive_at: float  # unix seconds of the last heartbeat or batch
    trigger_interval_seconds: float
    freshness_objective_seconds: float
    max_offsets_per_batch: int
    freshness: Freshness | None = None  # of the last batch
    batch_at: float | None = None  # when the last batch committed
    caught_up: bool = False  # Spark saw no new data at the last heartbeat (not part of the verdict)
    incoming_per_s: float | None = None  # the topic's growth, offsets/s (smoothed)
    processing_per_s: float | None = None  # the tail's own rate while a batch runs, offsets/s (smoothed)
    backlog: int | None = None  # offsets on the broker not yet committed, after the last batch
    # a batch's cost fit from the recent batches (tailfill.values.batch_cost): seconds fixed, per offset, per table
    # partition touched, and how many partitions the records spread over
    fixed_seconds: float | None = None
    per_offset_seconds: float | None = None
    per_partition_seconds: float = 0.0
    partitions_spread: float = 1.0

    def live(self, now: float | None = None) -> bool:
        """A tail is running: its heartbeat is recent."""
        age = (now or time.time()) - self.alive_at
        return age <= max(MIN_LIVE_SECONDS, 3 * self.trigger_interval_seconds)

    @property
    def cost(self) -> BatchCost | None:
        """What a batch costs, once measured on batches of different sizes."""
        if self.fixed_seconds is None or self.per_offset_seconds is None:
            return None
        return BatchCost(self.fixed_seconds, self.per_offset_seconds, self.per_partition_seconds,
                         PartitionSpread(self.partitions_spread))

    @property
    def capacity_per_s(self) -> float | None:
        """The most offsets/s the tail can take: its largest batch per trigger (or per batch's time, by the
        measured cost), or, before a cost is measured, its cap per trigger or its measured rate if lower."""
        if self.cost is not None:
            return self.cost.rate(self.max_offsets_per_batch, self.trigger_interval_seconds)
        by_cap = self.max_offsets_per_batch / self.trigger_interval_seconds
        return min(by_cap, self.processing_per_s) if self.processing_per_s else None

    def keep_up_problem(self) -> str | None:
        """One line when the incoming rate is above what the tail can take: the numbers and the fix."""
        capacity = self.capacity_per_s
        if self.incoming_per_s is None or capacity is None or self.incoming_per_s <= capacity * KEEP_UP_TOLERANCE:
            return None
        if self.cost is not None:
            return self._costly_batches(self.cost, self.incoming_per_s, capacity)
        by_cap = self.max_offsets_per_batch / self.trigger_interval_seconds
        if capacity >= by_cap:
            needed = math.ceil(self.incoming_per_s * self.trigger_interval_seconds * KEEP_UP_HEADROOM)
            limit = (f"tail.max_offsets_per_batch {self.max_offsets_per_batch:,} per "
                     f"{self.trigger_interval_seconds:g}s trigger")
            fix = f"raise tail.max_offsets_per_batch to at least {needed:,}"
        else:
            limit = f"its measured processing rate {self.processing_per_s:,.0f} offsets/s"
            fix = "give the tail more cores or executors (--master, --conf), or a longer trigger_interval_seconds"
        return (f"the tail cannot keep up: incoming {self.incoming_per_s:,.0f} offsets/s, the most the tail "
                f"can take is {capacity:,.0f} offsets/s ({limit}); fix: {fix}")

    def _costly_batches(self, cost: BatchCost, incoming: float, capacity: float) -> str:
        """The keep-up line by the measured cost: rates in and achieved, fixed and per-offset cost, the fix."""
        top, interval = self.max_offsets_per_batch, self.trigger_interval_seconds
        achieved = f"{self.processing_per_s:,.0f}" if self.processing_per_s else "?"
        figures = (f"the tail cannot keep up: incoming {incoming:,.0f} offsets/s, achieved {achieved} offsets/s; "
                   f"a batch costs {cost.fixed_seconds:.1f}s fixed + {cost.per_offset_seconds * 1000:.3g}ms per "
                   f"offset{_per_partition(cost, top)}, so even its largest (tail.max_offsets_per_batch {top:,}) takes "
                   f"{cost.seconds(top):.1f}s: at most {capacity:,.0f} offsets/s")
        needed = cost.offsets_for_rate(incoming * KEEP_UP_HEADROOM, interval)
        if needed is None:
            fix = ("each offset alone costs too much: make each batch cheaper (coarser table partitioning, more "
                   "cores or executors)")
        else:
            fix = (f"raise tail.max_offsets_per_batch to at least {needed:,} (or tail.trigger_interval_seconds), "
                   "or make each batch cheaper (coarser table partitioning, more cores or executors)")
        return f"{figures}; fix: {fix}"

    def to_json(self) -> str:
        data = asdict(self)
        data["freshness"] = self.freshness.to_dict() if self.freshness else None
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> TailHealth:
        data = json.loads(text)
        data["freshness"] = Freshness.from_dict(data["freshness"])
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def beat(self, caught_up: bool, now: float | None = None) -> TailHealth:
        return replace(self, alive_at=now or time.time(), caught_up=caught_up)


@dataclass(frozen=True)
class StopRequest(_Plain):
    """``tailfill stop-tail`` asked the running tail to stop between batches."""

    at: float


@dataclass(frozen=True)
class TailClaim(_Plain):
    """The one tail of a pipeline that runs: where (host, process, this boot of the host, the process's start in
    clock ticks), since when, and its run. Its generation is its object's name (:mod:`tailfill.state.tail_claim`)."""

    host: str
    pid: int
    run_id: str
    since: float  # unix seconds
    boot: str = ""
    started: int | None = None


@dataclass(frozen=True)
class LaneRecord(_Plain):
    """One lane of an Airflow run as its task last wrote it: label, plan, state and failure cause."""

    label: str | None = None
    planned: int | None = None
    started_at: float | None = None
    try_number: int | None = None
    state: str | None = None
    ended_at: float | None = None
    cause: str | None = None
    tries: dict[str, float] = field(default_factory=dict)  # each try's number (as text) → when it started
    # the job's own restarts of its queries, every try's: {"try", "at", "failures", "tolerated", "step", "cause",
    # "wait_seconds"}
    restarts: list[dict] = field(default_factory=list)

    def merged(self, **changes) -> LaneRecord:
        return replace(self, **changes)

    def try_at(self, at: float) -> int | None:
        """The try that was running at ``at`` (a batch's commit time): the last one started before it."""
        started = [int(n) for n, t in sorted(self.tries.items(), key=lambda kv: kv[1]) if t <= at]
        return started[-1] if started else None


@dataclass(frozen=True)
class FailureRecord(_Plain):
    """A failed Tailfill task (or a scheduled run that missed its deadline): where, which try, the error."""

    at: float
    dag_id: str | None
    run_id: str | None
    task_id: str | None
    map_index: int | None
    try_number: int | None
    error: str
    will_retry: bool = False  # a try that failed with retries left (alerted too: an outage that recovers is seen)
    warning: bool = False  # not a failure: a run that went on, with something to look at (a missed objective)


def _per_partition(cost: BatchCost, offsets: int) -> str:
    """The keep-up line's cost per table partition touched ('' when there is none)."""
    if not cost.per_partition_seconds:
        return ""
    return (f" + {cost.per_partition_seconds * 1000:.3g}ms per table partition touched (a batch of {offsets:,} "
            f"touches {cost.spread.touched(offsets):,.0f})")
