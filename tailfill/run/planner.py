"""The one planner: a request (the CLI's flags or the backfill form's params) becomes the job specs.

A backfill request says ``[from, to)``, how many slices and lanes, a rate limit and what to do
with offsets already committed; the plan is one :class:`~tailfill.run.contract.JobSpec` per lane, each
with its slices' exact bounds and the batch cap. A tail request (once, stop after) becomes the
tail's spec, with the cutover it starts from, and what it will find waiting. ``tailfill
backfill``/``tail`` and the DAGs' ``plan`` and ``tune`` tasks only turn their input into a request
and run what comes out, so the same request
gets the same specs whichever way it arrives. Planning records the cutover when there is none yet
(the first run's planner; never a check, never the job).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

from tailfill.errors import ConfigError
from tailfill.offsets import OffsetRange, PartitionOffsets, ranges_between, subtract, total
from tailfill.pipeline.handle import Pipeline
from tailfill.run.backfill_inputs import bound_offsets
from tailfill.run.contract import JobSpec, Slice, new_run_id
from tailfill.run.plan import (
    SourceState,
    check_bounds,
    ensure_cutover,
    ensure_topic_ids,
    new_and_gone_topics,
    plan_backfill,
    source_state,
    tail_start,
)
from tailfill.run.tuning import Tuning, tuned_max_offsets
from tailfill.run.write_test import ensure_writable
from tailfill.source.times import offsets_at
from tailfill.state.tail_claim import check_free

OnCommitted = Literal["skip", "fail", "replay"]
COMMITTED = "every offset of the range is committed"


@dataclass(frozen=True)
class BackfillRequest:
    """What a backfill should cover and how: ``None`` bounds are ``earliest`` and the ``cutover``."""

    start: PartitionOffsets | None = None
    end: PartitionOffsets | None = None
    slices: int | None = None  # None: the pipeline's backfill.slices
    lanes: int = 1  # parallel jobs sharing the slices (never more than there are slices)
    max_offsets_per_second: int | None = None  # None: the pipeline's backfill.max_offsets_per_second
    on_committed: OnCommitted = "skip"  # offsets of the range already committed: leave them, refuse, or replay them
    topics: tuple[str, ...] = ()  # of a pipeline of several topics, only these (empty: all of them)
    from_time: datetime | None = None  # instead of ``start``: the first offset of each partition at or after it
    to_time: datetime | None = None  # instead of ``end``: the first offset at or after it (not included)

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> BackfillRequest:
        """The backfill DAG's form: ``from_offsets``/``to_offsets`` (``earliest``/``cutover`` or offsets JSON),
        ``slices``, ``max_parallel_slices``, ``max_offsets_per_second``, ``committed_ranges``, ``topics`` (names
        separated by commas; empty: all)."""
        return cls(start=bound_offsets("from_offsets", params.get("from_offsets")),
                   end=bound_offsets("to_offsets", params.get("to_offsets")),
                   slices=params.get("slices"), lanes=params.get("max_parallel_slices") or 1,
                   max_offsets_per_second=params.get("max_offsets_per_second"),
                   on_committed=params.get("committed_ranges") or "skip",
                   topics=topic_names(params.get("topics")))


def topic_names(text: str | None) -> tuple[str, ...]:
    """Topic names from a comma-separated list (the form's and ``--topics``); empty for none."""
    return tuple(name.strip() for name in (text or "").split(",") if name.strip())


def only_topics(offsets: PartitionOffsets, topics: tuple[str, ...], state: SourceState) -> PartitionOffsets:
    """``offsets`` of ``topics`` only (all when empty); a topic the source does not have is refused, naming those
    it has."""
    if not topics:
        return offsets
    have = sorted({tp.topic for tp in state.marks.high})
    unknown = [t for t in topics if t not in have]
    if unknown:
        raise ConfigError(f"backfill topics: {', '.join(map(repr, unknown))} not among the pipeline's "
                          f"{state.cfg.source.described} (fix: name some of: {', '.join(have)})")
    return PartitionOffsets({tp: off for tp, off in offsets.offsets.items() if tp.topic in topics})


@dataclass(frozen=True)
class TailRequest:
    """A tail run: ``once`` (what is there now) or on the pipeline's trigger, optionally stopping after a while."""

    once: bool = False
    stop_after_seconds: float | None = None

    def ends_because(self, trigger: str, pipeline_file: str | None) -> str | None:
        """Why a tail of this request on a pipeline with tail ``trigger`` ends by itself, in words; None when only a
        stop ends it (``tailfill stop-tail``, a signal: the job's own line says so)."""
        if self.once:
            return "it read to the topic's end, as --once asks"
        if trigger == "available_now":
            where = f" ({pipeline_file})" if pipeline_file else ""
            return (f"it read to the topic's end: the pipeline's tail.trigger is available_now{where}, one catch-up "
                    "run (tail.trigger: processing_time tails live)")
        if self.stop_after_seconds is not None:
            return f"--stop-after {self.stop_after_seconds:g}s passed"
        return None


@dataclass(frozen=True)
class BackfillPlan:
    """The lanes of a backfill (empty: every offset of the range is committed) and how they were sized."""

    specs: list[JobSpec]
    tuning: Tuning
    lines: list[str] = field(default_factory=list)  # what the planner read and decided, for the log
    start: PartitionOffsets | None = None  # the bounds planned (``earliest`` and ``cutover`` resolved)
    end: PartitionOffsets | None = None
    nothing: str = COMMITTED  # why there is nothing to run, when ``specs`` is empty


@dataclass(frozen=True)
class TailPlan:
    """The tail's spec and what it will find: ``pending`` offsets from its position to the broker's end."""

    spec: JobSpec
    tuning: Tuning
    start: PartitionOffsets
    high: PartitionOffsets
    pending: int
    notes: list[str] = field(default_factory=list)  # topics new since the cutover, or gone: one line each


def _overlap(state: SourceState, start: PartitionOffsets, end: PartitionOffsets) -> list[OffsetRange]:
    return [r for r in ranges_between(start, end) if subtract([r], state.ledger.committed) != [r]]


def lanes_of(todo: list[Slice], lanes: int) -> list[list[Slice]]:
    """``todo`` dealt into at most ``lanes`` blocks of adjacent slices (each block runs as one query)."""
    n = max(1, min(lanes, len(todo)))
    return [todo[i * len(todo) // n:(i + 1) * len(todo) // n] for i in range(n)] if todo else []


def plan_backfill_lanes(pipeline: Pipeline, request: BackfillRequest,
                        run_id: Callable[[int], str]) -> BackfillPlan:
    """Plan ``request``: one spec per lane (``run_id(lane)`` names each), bounds as planned, the cap tuned once.
    Every place the run writes its own files is write-tested first (:func:`ensure_writable`: a refusal stops it
    before the catalog and the broker are asked); then the tables are made (or evolved), and the cutover recorded
    when there is none yet.

    Bounds the broker cannot have (past a partition's end, a partition it does not have, a start
    after its end) are refused here, before any job starts: such a run would wait for records that
    never come and fail much later with a misleading cause.

    Raises :class:`ConfigError` when ``on_committed`` is ``fail`` and the range overlaps committed offsets (with
    ``replay``, the caller replays the committed part of the plan's bounds: :func:`tailfill.run.replay.replay`).
    """
    cfg = pipeline.cfg
    ensure_writable(pipeline)
    state = source_state(pipeline, pipeline.provision_tables())
    start = only_topics(request.start or at_time(state, request.from_time) or state.marks.low, request.topics, state)
    end = only_topics(request.end or at_time(state, request.to_time) or ensure_cutover(state), request.topics, state)
    ensure_topic_ids(state)
    if request.from_time is not None:  # a time past the end starts a partition at its end: nothing of it to read
        start = PartitionOffsets({tp: min(start[tp], end.get(tp, start[tp]) or 0) for tp in start})
    check_bounds(state, start, end)  # From after To, unknown partitions, past the broker's end: one line each
    lines = [f"earliest {state.marks.low.to_dict()}, cutover {(state.cutover or end).to_dict()}, committed "
             f"{sum(r.size for r in state.ledger.committed):,} offsets; this run covers "
             f"[{start.to_dict()}, {end.to_dict()})"]
    cutover = state.cutover or end
    past_cutover = [f"{tp} to {end[tp]:,} (cutover {cutover[tp]:,})" for tp in sorted(end)
                    if tp in cutover and end[tp] > cutover[tp]]
    if request.end is not None and past_cutover:
        lines.append(f"warning: To passes the cutover on {'; '.join(past_cutover)}: the offsets after the cutover "
                     "are the tail's too; each lands once whoever commits it first")
    lines += gone_topic_notes(state)  # new topics are the tail's
    overlap = _overlap(state, start, end)
    if overlap and request.on_committed == "fail":
        raise ConfigError(f"requested range overlaps committed offsets in {', '.join(map(str, overlap))} "
                          "(fix: skip committed ranges (committed_ranges=skip in the form, --on-committed skip on the "
                          "command line), or request a range after them)")
    tuning = tuned_max_offsets(cfg, pipeline.state, "backfill")
    if (request.from_time or request.to_time) is not None and not total(ranges_between(start, end)):
        since = request.from_time.isoformat() if request.from_time else "its earliest offset"
        until = f"before {request.to_time.isoformat()}" if request.to_time else "up to the cutover"
        nothing = f"no record of {cfg.source.described} at or after {since} {until}"
        return BackfillPlan([], tuning, [*lines, f"nothing to backfill: {nothing}"], start, end, nothing)
    todo = plan_backfill(state, start, end, request.slices)
    if not todo:
        return BackfillPlan([], tuning, [*lines, f"nothing to backfill: {COMMITTED}"], start, end)
    lines.append(f"max offsets per batch: {tuning.max_offsets_per_batch} ({tuning.reason})")
    rate = request.max_offsets_per_second or cfg.backfill.max_offsets_per_second
    blocks = lanes_of(todo, request.lanes)
    if len(blocks) < request.lanes:
        lines.append(f"lanes: {request.lanes} asked, {len(blocks)} used: there are {len(todo)} slice(s) to run")
    specs = [JobSpec(cfg.ref, "backfill", run_id(lane), tuple(block),
                     max_offsets_per_batch=tuning.max_offsets_per_batch, max_offsets_per_second=rate)
             for lane, block in enumerate(blocks)]
    return BackfillPlan(specs, tuning, lines, start, end)


def at_time(state: SourceState, at: datetime | None) -> PartitionOffsets | None:
    """Each partition's first offset at or after ``at`` (None: no time asked)."""
    return None if at is None else offsets_at(state.pipeline.kafka, at, state.marks)


def plan_tail(pipeline: Pipeline, request: TailRequest, run_id: str) -> TailPlan:
    """Plan the tail from its committed position (the tables made, the cutover recorded, on its first run), once
    every place it writes its own files took a write (:func:`ensure_writable`); refused in one line while another
    tail of the pipeline runs (:mod:`tailfill.state.tail_claim`).

    A tail that runs to the broker's current end (``once``, or the ``available_now`` trigger) gets the
    cap tuned from measurements; the processing-time tail sizes its batches itself within the maximum.
    """
    cfg = pipeline.cfg
    ensure_writable(pipeline)
    check_free(pipeline.state, pipeline.name)  # one tail per pipeline: a second is refused before it is planned
    state = source_state(pipeline, pipeline.provision_tables())
    cutover = ensure_cutover(state)
    ensure_topic_ids(state)
    start = tail_start(state, cutover)
    notes = topic_notes(state)
    tuning = tuned_max_offsets(cfg, pipeline.state, "tail")
    if not request.once and cfg.tail.trigger == "processing_time":  # it sizes each batch itself, up to the maximum
        tuning = replace(tuning, max_offsets_per_batch=tuning.configured_max,
                         reason="the adaptive tail sizes each batch from its last one, up to the configured maximum")
    spec = JobSpec(cfg.ref, "tail", run_id, cutover=cutover, once=request.once,
                   stop_after_seconds=request.stop_after_seconds, max_offsets_per_batch=tuning.max_offsets_per_batch)
    return TailPlan(spec, tuning, start, state.marks.high, total(ranges_between(start, state.marks.high)), notes)


def new_topic_notes(state: SourceState) -> list[str]:
    """One line per topic that came after the cutover with records not yet read (the tail reads its history)."""
    lines = []
    for topic in new_and_gone_topics(state)[0]:
        parts = [tp for tp in state.marks.high if tp.topic == topic]
        offsets = sum(state.marks.high[tp] for tp in parts)
        if offsets:
            lines.append(f"new topic {topic} ({len(parts)} partition{'s' * (len(parts) != 1)}, {offsets:,} offsets): "
                         "the tail reads it from its earliest offset")
    return lines


def gone_topic_notes(state: SourceState) -> list[str]:
    """One line per topic gone from the broker whose rows the table keeps."""
    return [f"topic {topic} is gone from {state.cfg.source.bootstrap_servers}: its rows stay in the table, "
            "nothing more is read from it" for topic in new_and_gone_topics(state)[1]]


def topic_notes(state: SourceState) -> list[str]:
    """The tail's lines about its topics: new ones, then gone ones."""
    return new_topic_notes(state) + gone_topic_notes(state)


def backfill_spec(pipeline: Pipeline, start: PartitionOffsets | None = None, end: PartitionOffsets | None = None,
                  slices: int | None = None, run_id: str | None = None,
                  max_offsets_per_second: int | None = None) -> JobSpec | None:
    """A one-lane backfill of ``[start, end)`` (default ``[earliest, cutover)``); None if all is committed."""
    run_id = run_id or new_run_id("backfill")
    request = BackfillRequest(start, end, slices, max_offsets_per_second=max_offsets_per_second)
    specs = plan_backfill_lanes(pipeline, request, lambda _lane: run_id).specs
    return specs[0] if specs else None


def pending_offsets(state: SourceState) -> tuple[int, int | None]:
    """Uncommitted offsets a backfill and a tail would cover now, recording nothing.

    The backfill's: of ``[earliest, cutover)`` (all of history while no cutover is recorded); the
    tail's: from the cutover to the broker's end (None before a cutover is recorded).
    """
    committed = state.ledger.committed
    backfill = total(subtract(ranges_between(state.marks.low, state.cutover or state.marks.high), committed))
    tail = (total(subtract(ranges_between(state.cutover, state.marks.high), committed))
            if state.cutover is not None else None)
    return backfill, tail
