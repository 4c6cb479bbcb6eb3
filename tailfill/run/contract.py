"""The contract between the processes of a run, and its one serialisation.

What goes into the ingest job (:class:`JobSpec`: the planner writes it with :meth:`JobSpec.argv`, the
job reads it back with :meth:`JobSpec.parse`), what the job says while it runs (:class:`Restarted`),
and what comes out (:class:`JobResult`). The job writes its events and its result as lines
(:meth:`Restarted.line`, :meth:`JobResult.line`) among its progress lines; whoever runs it reads them
back with :func:`read_event` — here and nowhere else. Errors travel as data
(:class:`~tailfill.errors.ErrorInfo`), never as tracebacks to be read back.

A backfill's spec carries its slices' exact bounds and a tail's the recorded cutover: the job runs what
was planned, and only the planner records a cutover.
"""

from __future__ import annotations

import argparse
import json
import uuid
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Literal

from tailfill.errors import ErrorInfo, IngestError
from tailfill.offsets import OffsetRange, PartitionOffsets, ranges_between, subtract, total
from tailfill.redact import redact_data
from tailfill.values.drift import describe

Mode = Literal["backfill", "tail"]
RESULT_PREFIX = "TAILFILL_RESULT "
RESTART_PREFIX = "TAILFILL_RESTART "
NEXT_JOB = "--next-job"  # between the specs of jobs that run together in one application (:func:`together_argv`)


def new_run_id(mode: str) -> str:
    """``<mode>-<UTC time>-<6 hex>``: a backfill's, a tail's or a replay's run id."""
    return f"{mode}-{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True)
class Slice:
    """A bounded part of the backfill: ``[start, end)`` per partition, exactly as planned."""

    index: int
    count: int
    start: PartitionOffsets
    end: PartitionOffsets

    @property
    def ranges(self) -> list[OffsetRange]:
        return ranges_between(self.start, self.end)

    def remaining(self, committed: list[OffsetRange]) -> Slice | None:
        """This slice from the first offset not in ``committed`` of each partition on, or None when all is."""
        todo = subtract(self.ranges, committed)
        if not todo:
            return None
        first = dict(self.end.offsets)  # a partition already done reads nothing
        for r in reversed(todo):
            first[r.tp] = r.start
        return Slice(self.index, self.count, PartitionOffsets(first), self.end)

    def to_dict(self) -> dict:
        return {"index": self.index, "count": self.count, "start": self.start.to_dict(), "end": self.end.to_dict()}

    @classmethod
    def from_dict(cls, data: dict) -> Slice:
        return cls(data["index"], data["count"], PartitionOffsets.from_dict(data["start"]),
                   PartitionOffsets.from_dict(data["end"]))

    def __str__(self) -> str:
        return f"slice {self.index + 1}/{self.count} ({total(self.ranges):,} offsets)"


@dataclass(frozen=True)
class JobSpec:
    """One run of the ingest job: a pipeline, a mode, a run id; a backfill's slices, a tail's cutover."""

    pipeline: str  # name or path of the pipeline YAML; of a routed table, its ref (PipelineConfig.ref)
    mode: Mode
    run_id: str
    slices: tuple[Slice, ...] = ()  # backfill: exactly these slices (bounds as planned)
    cutover: PartitionOffsets | None = None  # tail: where it begins, as the planner recorded it
    once: bool = False  # tail: ingest what is there now, then stop
    stop_after_seconds: float | None = None  # processing-time tail: stop between batches after this long
    max_offsets_per_batch: int | None = None  # override of the pipeline's cap (tuned from measurements)
    max_offsets_per_second: int | None = None  # backfill: override of the pipeline's rate limit

    def argv(self) -> list[str]:
        """The job's command-line arguments."""
        out = ["--pipeline", self.pipeline, "--mode", self.mode, "--run-id", self.run_id]
        if self.slices:
            out += ["--slices", json.dumps([s.to_dict() for s in self.slices], separators=(",", ":"))]
        if self.cutover is not None:
            out += ["--cutover", self.cutover.to_json()]
        if self.once:
            out.append("--once")
        if self.stop_after_seconds is not None:
            out += ["--stop-after", str(self.stop_after_seconds)]
        if self.max_offsets_per_batch is not None:
            out += ["--max-offsets-per-batch", str(self.max_offsets_per_batch)]
        if self.max_offsets_per_second is not None:
            out += ["--max-offsets-per-second", str(self.max_offsets_per_second)]
        return out

    @classmethod
    def parse(cls, argv: list[str] | None = None) -> JobSpec:
        p = argparse.ArgumentParser(prog="spark_jobs/ingest.py", description="Tailfill's ingest job")
        p.add_argument("--pipeline", required=True, help="pipeline name or path to its YAML (a routed table: its ref)")
        p.add_argument("--mode", choices=("backfill", "tail"), required=True)
        p.add_argument("--run-id", required=True, help="run id recorded in every commit")
        p.add_argument("--slices", help="backfill: JSON list of slices {index, count, start, end}")
        p.add_argument("--cutover", help="tail: the recorded cutover, offsets JSON")
        p.add_argument("--once", action="store_true", help="tail: ingest what is there now, then stop")
        p.add_argument("--stop-after", type=float, help="tail with processing time: stop between batches after N s")
        p.add_argument("--max-offsets-per-batch", type=int, help="override the pipeline's cap for this run")
        p.add_argument("--max-offsets-per-second", type=int, help="backfill: override the pipeline's rate limit")
        a = p.parse_args(argv)
        if a.mode == "backfill" and not a.slices:
            p.error("a backfill needs --slices (plan with `tailfill backfill` or the backfill DAG)")
        if a.mode == "tail" and not a.cutover:
            p.error("a tail needs --cutover (plan with `tailfill tail` or the incremental DAG)")
        slices = tuple(Slice.from_dict(d) for d in json.loads(a.slices)) if a.slices else ()
        cutover = PartitionOffsets.from_json(a.cutover) if a.cutover else None
        return cls(a.pipeline, a.mode, a.run_id, slices, cutover, a.once, a.stop_after, a.max_offsets_per_batch,
                   a.max_offsets_per_second)


def together_argv(specs: Iterable[JobSpec]) -> list[str]:
    """The arguments of several jobs run together by one application, :data:`NEXT_JOB` between them."""
    out: list[str] = []
    for spec in specs:
        out += [*([NEXT_JOB] if out else []), *spec.argv()]
    return out


def parse_together(argv: list[str]) -> list[JobSpec]:
    """The specs of :func:`together_argv`'s arguments (one spec's arguments give that one)."""
    groups: list[list[str]] = [[]]
    for arg in argv:
        if arg == NEXT_JOB:
            groups.append([])
        else:
            groups[-1].append(arg)
    return [JobSpec.parse(group) for group in groups]


@dataclass
class IngestResult:
    """What one streaming query of a run did (a backfill run has one per run of adjacent slices)."""

    run_id: str
    label: str
    batches: int = 0
    offsets: int = 0
    rows: int = 0
    quarantined: int = 0
    skipped_offsets: int = 0
    seconds: float = 0.0
    restarts: int = 0
    causes: list[str] = field(default_factory=list)
    stages: dict[str, float] = field(default_factory=dict)  # seconds by stage, summed over the batches
    freshness: dict | None = None  # produce-to-commit latency over the run's records (p50, p95, max, records)
    warnings: list[str] = field(default_factory=list)  # e.g. the tail cannot keep up with the incoming rate
    # JSON fields the records held that format.fields does not declare: dotted path → [records, partition, offset
    # of the first record seen with it].
    unknown_fields: dict[str, list[int]] = field(default_factory=dict)

    @property
    def rows_per_second(self) -> float:
        return (self.rows + self.quarantined) / self.seconds if self.seconds else 0.0


@dataclass
class JobResult:
    """What one run of the job hands back to its caller: one :class:`IngestResult` per streaming query that
    finished, and the error (as data) when the run could not complete. Like dlt's ``LoadInfo``:
    :meth:`asdict` for machines, :meth:`asstr` for people; :meth:`line` is how it travels."""

    results: list[IngestResult] = field(default_factory=list)
    error: ErrorInfo | None = None
    run_id: str | None = None  # the job's, when several run together in one application

    def asdict(self) -> dict:
        return {"results": [asdict(r) for r in self.results],
                "error": self.error.to_dict() if self.error is not None else None,
                **({"run_id": self.run_id} if self.run_id is not None else {})}

    def asstr(self) -> str:
        if self.error is not None:
            return f"failed: {self.error} (fix: {self.error.fix})"
        done = ", ".join(f"{r.label}: {r.offsets:,} offsets in {r.batches} batches"
                         + (f" (fields not declared: {describe(r.unknown_fields)})" if r.unknown_fields else "")
                         for r in self.results)
        return f"done: {done or 'nothing to do'}"

    def line(self) -> str:
        """The job's last stdout line: this document, secrets redacted, for the process that ran it."""
        return RESULT_PREFIX + json.dumps(redact_data(self.asdict()))

    @classmethod
    def from_dict(cls, data: dict) -> JobResult:
        error = data.get("error")
        return cls([IngestResult(**r) for r in data.get("results", [])],
                   ErrorInfo.from_dict(error) if error else None, data.get("run_id"))


@dataclass(frozen=True)
class Restarted:
    """The job restarted a query after a failed attempt: which, the failures in a row, where, why, how long
    it waits first."""

    label: str
    failures: int
    tolerated: int
    step: str
    error: ErrorInfo
    wait_seconds: float

    def asstr(self) -> str:
        """The line people read (the job's log)."""
        return (f"[{self.label}] batch failed ({self.failures}/{self.tolerated} tolerated) at {self.step}: "
                f"{self.error}; restarting from the checkpoint in {self.wait_seconds:g}s")

    def line(self) -> str:
        data = {**asdict(self), "error": self.error.to_dict()}
        return RESTART_PREFIX + json.dumps(redact_data(data))

    @classmethod
    def from_dict(cls, data: dict) -> Restarted:
        return cls(**{**data, "error": ErrorInfo.from_dict(data["error"])})


Event = JobResult | Restarted


def read_event(line: str) -> Event | None:
    """The event a job's output line carries (its result, a restart), or None for any other line."""
    line = line.rstrip("\n")
    for prefix, kind in ((RESULT_PREFIX, JobResult), (RESTART_PREFIX, Restarted)):
        if line.startswith(prefix):
            try:
                return kind.from_dict(json.loads(line[len(prefix):]))
            except ValueError as exc:
                raise IngestError(f"a job's output line starts as its {kind.__name__} but cannot be read as one "
                                  f"({exc}): {line[:300]}") from None
    return None


def parse_result(lines: Iterable[str]) -> JobResult | None:
    """The job's result from its output lines (the last result among them), or None if it printed none."""
    found = None
    for line in lines:
        event = read_event(line) if line.startswith(RESULT_PREFIX) else None
        if isinstance(event, JobResult):
            found = event
    return found
