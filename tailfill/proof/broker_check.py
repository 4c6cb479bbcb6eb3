"""Absent offsets checked against the broker: is each offset a batch recorded as not delivered really one the broker
does not deliver, and why?

A batch records the offsets of its ranges that its consumer was not delivered, and the isolation level it read
under (:class:`~tailfill.lake.batch_summary.BatchSummary`). :func:`verify_absent` reads those offsets again, with a
consumer of its own (not the ingest's reader), one pass per isolation level, each partition read sequentially from
its first recorded offset, seeking only across a jump of more than :data:`JUMP` offsets:

1. under the level the batch read with: a record delivered there was wrongly passed over (a failure naming it);
2. under ``read_uncommitted`` (after a ``read_committed`` batch): a record delivered only there belongs to an
   aborted transaction;
3. delivered under neither: a transaction marker, or, on a compacted topic, a marker or an offset compaction
   removed.

Offsets below the partition's earliest offset by now (retention removed them since) cannot be verified: they are
accepted and reported as such. Offsets at or past the partition's end on the broker are failures (the broker never
had them). Nothing is read when nothing is absent; a broker that cannot be reached when something is fails with one
line naming it and how many offsets wait.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
from confluent_kafka import Consumer, KafkaError
from confluent_kafka import TopicPartition as KTopicPartition

from tailfill.errors import BrokerUnresponsive, SourceError
from tailfill.offsets import OffsetRange, by_partition, intersect_all, merge, subtract, total
from tailfill.proof.completeness import RangeCheck, islands
from tailfill.source.kafka import METADATA_TIMEOUT_S, topics_on_broker, watermarks
from tailfill.source.kafka_log import logged
from tailfill.source.topics import compacted_topics

ABORTED = "aborted transaction"
MARKER = "transaction marker"
MARKER_OR_COMPACTED = "transaction marker or compacted"
EXPIRED = "expired since; not verifiable"
UNRECORDED = ("not delivered, as the batch's count of records read says (committed before batches recorded which "
              "offsets; accepted with completeness.absent_offsets: allowed, not checked on the broker)")
JUMP = 100_000  # offsets between two absent ones beyond which a seek is cheaper than reading on
IDLE_S = 30.0  # a pass that gets nothing this long from a broker that answered its metadata fails
CHECK_SETTINGS = {"enable.partition.eof": False, "auto.offset.reset": "error", "enable.auto.commit": False}


@dataclass(frozen=True)
class BrokerVerdict:
    """What the broker says of recorded absent offsets: the confirmed ones by reason, and the refuted ones by the
    isolation level they were recorded under, each with why."""

    reasons: dict[str, list[OffsetRange]] = field(default_factory=dict)
    refuted: dict[str, list[tuple[list[OffsetRange], str]]] = field(default_factory=dict)

    def apply(self, checks: Iterable[RangeCheck]) -> list[RangeCheck]:
        """``checks`` with the absent offsets the broker refuted moved out of their accepted ones."""
        out = []
        for c in checks:
            for ranges, why in self.refuted.get(c.absent_under or "", []):
                c = c.refute(ranges, why)
            out.append(c)
        return out


def account_absent(checks: list[RangeCheck], setting: str,
                   conf: Callable[[], dict]) -> tuple[list[RangeCheck], dict[str, list[OffsetRange]]]:
    """``checks`` with the absent offsets the broker refuted taken out of the accepted ones (``setting`` is
    ``completeness.absent_offsets``: only ``verified`` asks the broker, with the consumer settings ``conf()``), and
    the accepted absent offsets by reason."""
    by_reason: dict[str, list[OffsetRange]] = defaultdict(list)
    todo: dict[str, list[OffsetRange]] = defaultdict(list)
    for c in checks:
        if c.absent_under is None:
            by_reason[UNRECORDED] += c.absent
        elif setting == "verified":
            todo[c.absent_under] += c.absent
        else:
            by_reason[f"not delivered under {c.absent_under}, as its batch recorded (not checked on the broker)"] += (
                c.absent)
    if any(todo.values()):
        verdict = verify_absent(conf(), todo)
        checks = verdict.apply(checks)
        for reason, ranges in verdict.reasons.items():
            by_reason[reason] += ranges
    return checks, {reason: merge(ranges) for reason, ranges in by_reason.items() if ranges}


def verify_absent(conf: dict, absent: Mapping[str, list[OffsetRange]]) -> BrokerVerdict:
    """Check ``absent`` (recorded absent offsets by the isolation level they were not delivered under) against the
    broker of the consumer settings ``conf``; see the module's docstring."""
    todo = {level: merge(ranges) for level, ranges in absent.items() if ranges}
    if not todo:
        return BrokerVerdict()
    try:
        return _verify(conf, todo)
    except SourceError as exc:
        waiting = sum(total(ranges) for ranges in todo.values())
        kind = BrokerUnresponsive if isinstance(exc, BrokerUnresponsive) else SourceError
        raise kind(f"cannot verify {waiting:,} absent offsets on the broker at {conf['bootstrap.servers']}: "
                   f"{(str(exc).splitlines() or [''])[0]} (fix: make the broker reachable and validate again, or set "
                   "completeness.absent_offsets: allowed to accept them on their batches' record)") from exc


def _verify(conf: dict, todo: dict[str, list[OffsetRange]]) -> BrokerVerdict:
    every = merge(r for ranges in todo.values() for r in ranges)
    present = topics_on_broker(conf)
    partitions = sorted({r.tp for r in every if r.topic in present})
    low = watermarks(conf, partitions).low.offsets if partitions else {}
    reasons: dict[str, list[OffsetRange]] = defaultdict(list)
    reasons[EXPIRED] += [r for r in every if r.topic not in present]  # the topic was deleted since
    reasons[EXPIRED] += [r.with_bounds(r.start, min(r.end, low[r.tp])) for r in every
                         if r.tp in low and r.start < low[r.tp]]
    compacted = compacted_topics(conf, {tp.topic for tp in partitions}) if partitions else set()
    refuted: dict[str, list[tuple[list[OffsetRange], str]]] = {}
    for level, ranges in sorted(todo.items()):
        rest = subtract(ranges, reasons[EXPIRED])
        if not rest:
            continue
        high = watermarks({**conf, "isolation.level": level}, sorted({r.tp for r in rest})).high.offsets
        beyond = [(r.with_bounds(max(r.start, high[r.tp]), r.end), high[r.tp]) for r in rest if r.end > high[r.tp]]
        delivered, gone = _delivered(conf, subtract(rest, [r for r, _ in beyond]), level)
        refuted[level] = [(delivered, f"the broker delivers a record there under {level}"),
                          *(([r], f"the broker's partition ends at {end:,}") for r, end in beyond)]
        rest = subtract(rest, [*(r for r, _ in beyond), *delivered, *gone])
        reasons[EXPIRED] += gone
        if level == "read_committed":  # what read_uncommitted delivers there was aborted
            aborted, gone = _delivered(conf, rest, "read_uncommitted")
            rest = subtract(rest, [*aborted, *gone])
            reasons[ABORTED] += aborted
            reasons[EXPIRED] += gone
        for r in rest:
            reasons[MARKER if compacted is not None and r.topic not in compacted else MARKER_OR_COMPACTED].append(r)
    return BrokerVerdict({reason: merge(rs) for reason, rs in reasons.items() if rs},
                         {level: [(rs, why) for rs, why in pairs if rs] for level, pairs in refuted.items()})


def _delivered(conf: dict, ranges: list[OffsetRange], level: str) -> tuple[list[OffsetRange], list[OffsetRange]]:
    """The parts of ``ranges`` where a consumer under isolation ``level`` is delivered a record, and the parts that
    went below their partition's earliest offset while it read; one consumer, each partition read in turn."""
    if not ranges:
        return [], []
    consumer = Consumer(logged({**conf, **CHECK_SETTINGS, "isolation.level": level}))
    found: list[OffsetRange] = []
    gone: list[OffsetRange] = []
    try:
        for rs in by_partition(ranges).values():
            for window in _windows(rs):
                offsets, expired = _read(consumer, conf, window)
                found += intersect_all(islands(window.tp, _inside(offsets, rs)), rs)
                gone += intersect_all(expired, rs)
    finally:
        consumer.close()
    return merge(found), merge(gone)


def _windows(ranges: list[OffsetRange]) -> list[OffsetRange]:
    """One partition's sorted ``ranges`` as the spans to read: a new span after a jump of more than :data:`JUMP`."""
    out = [ranges[0]]
    for r in ranges[1:]:
        if r.start - out[-1].end > JUMP:
            out.append(r)
        else:
            out[-1] = out[-1].with_bounds(out[-1].start, r.end)
    return out


def _inside(offsets: np.ndarray, ranges: list[OffsetRange]) -> np.ndarray:
    """The ``offsets`` (ascending) that lie in one of ``ranges`` (one partition's, sorted and disjoint)."""
    starts = np.array([r.start for r in ranges], np.int64)
    ends = np.array([r.end for r in ranges], np.int64)
    at = np.searchsorted(starts, offsets, "right") - 1
    return offsets[(at >= 0) & (offsets < ends[np.clip(at, 0, None)])]


def _read(consumer: Consumer, conf: dict, window: OffsetRange) -> tuple[np.ndarray, list[OffsetRange]]:
    """The offsets delivered inside ``window``, read from its start until the consumer's position passes its end,
    and the part of it that went below the partition's earliest offset meanwhile."""
    ktp = KTopicPartition(window.topic, window.partition, window.start)
    consumer.assign([ktp])
    pos, got, gone = window.start, [], []
    progress = time.monotonic()
    while pos < window.end:
        msgs = consumer.consume(num_messages=min(10_000, window.end - pos), timeout=0.5)
        if not msgs and consumer.position([ktp])[0].offset >= window.end:
            break  # nothing more is delivered inside the window
        before = pos
        for m in msgs:
            err = m.error()
            if err is None and (m.topic(), m.partition()) != (window.topic, window.partition):
                continue  # fetched for the partition read before
            if err is not None and err.code() in (KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET):
                earliest = consumer.get_watermark_offsets(ktp, timeout=METADATA_TIMEOUT_S)[0]
                if earliest <= pos:
                    raise SourceError(f"reading {window} again: offset {pos} is out of range: {err.str()}")
                gone.append(window.with_bounds(pos, min(earliest, window.end)))
                pos = earliest
                if pos < window.end:
                    consumer.seek(KTopicPartition(window.topic, window.partition, pos))
                break
            if err is not None:  # librdkafka reconnects by itself; the idle bound below ends a wait that lasts
                if err.fatal():
                    raise SourceError(f"reading {window} again at offset {pos}: {err.str()}")
                continue
            if m.offset() >= window.end:
                pos = window.end
                break
            if m.offset() >= pos:  # not one fetched before a seek
                got.append(m.offset())
                pos = m.offset() + 1
        if pos > before:
            progress = time.monotonic()
        elif time.monotonic() - progress > IDLE_S:
            raise BrokerUnresponsive(f"the broker at {conf['bootstrap.servers']} delivered nothing of {window} for "
                                     f"{IDLE_S:.0f}s (at offset {pos})")
    return np.array(got, np.int64), gone
