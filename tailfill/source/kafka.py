"""Kafka access through confluent-kafka: client settings, partition discovery, true end offsets,
and reading one offset range as Arrow record batches.

The consumer is always assigned explicit offsets (no group, no auto-commit) and uses
``auto.offset.reset=error``: an offset that is no longer in the topic is an error naming the lost
range, never a silent jump to ``earliest`` or ``latest`` (which would skip data in silence).
"""

from __future__ import annotations

import bisect
import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KTopicPartition

from tailfill.config import EMBEDDED, SourceConfig
from tailfill.errors import BrokerUnresponsive, ConfigError, ExpiredOffsetsError, SourceError
from tailfill.offsets import OffsetRange, PartitionOffsets, TopicPartition, passed_over
from tailfill.redact import register_secret
from tailfill.source.kafka_log import logged
from tailfill.values.schema import HEADERS, RAW_SCHEMA, TIMESTAMP, RangeMarker

METADATA_TIMEOUT_S = 10.0
FAILOVER_WAIT_S = 20.0  # how long an offsets request retries while a partition's leader moves (measured: 3-10 s)
FAILOVER_POLL_S = 0.5
CONNECT_TIMEOUT_S = 5.0  # a broker that accepted no connection this long is unreachable: say so without waiting more
RECONNECT_TIMEOUT_S = 15.0  # how long a read waits for librdkafka to reconnect before the batch fails


def consumer_config(source: SourceConfig, **overrides: object) -> dict:
    """librdkafka settings for an assign-only consumer of ``source``; secrets come from the env.

    ``source.bootstrap_servers`` must be an address: the driver resolves ``embedded`` once
    (:func:`tailfill.source.embedded.resolved`) and ships the result to executors.
    """
    if source.bootstrap_servers == EMBEDDED:
        raise ConfigError("source.bootstrap_servers is still 'embedded': resolve it with "
                          "tailfill.source.embedded.resolved(cfg) before building a consumer")
    sec = source.security
    conf: dict[str, object] = {
        "bootstrap.servers": source.bootstrap_servers,
        "group.id": f"tailfill-{source.subscription}",  # assign-only, committing nothing: it names the reader
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "error",
        "isolation.level": source.isolation_level,
        "enable.partition.eof": False,
        "socket.timeout.ms": 10000,
        "queued.min.messages": 1000000,  # prefetch deeply
        "security.protocol": sec.protocol,
        "log.connection.close": False,  # consumers are kept open across tasks; a broker going away is not news
    }
    if sec.credential_env is not None:
        conf["sasl.mechanism"] = sec.sasl_mechanism
        for key, env in zip(("sasl.username", "sasl.password"), sec.credential_env, strict=True):
            if env not in os.environ:
                via = f" (filled from Airflow connection {sec.airflow_conn_id!r})" if sec.airflow_conn_id else ""
                raise ConfigError(f"source.security: environment variable {env}{via} is not set")
            conf[key] = os.environ[env]
        register_secret(conf["sasl.password"])  # also when it came through TAILFILL_KAFKA_PASSWORD
    conf.update(source.consumer)
    conf.update(overrides)
    return conf


def _consumer(conf: dict) -> Consumer:
    return Consumer(logged({**conf, "error_cb": _raise_fatal}))


class OwnedConsumer:
    """One consumer kept across calls by its owner (an executor context, a stream reader, the tail's pacer):
    made on first use, replaced after a failure left it in doubt, closed by its owner."""

    def __init__(self, conf: dict):
        self.conf = conf
        self._consumer: Consumer | None = None

    def get(self) -> Consumer:
        if self._consumer is None:
            self._consumer = _consumer(self.conf)
        return self._consumer

    def discard(self) -> None:
        """Close the consumer; the next use makes a fresh one."""
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            consumer.close()

    close = discard


@contextlib.contextmanager
def _borrowed(conf: dict, owned: OwnedConsumer | None) -> Iterator[Consumer]:
    """The owner's consumer (discarded if the work fails), else a new one closed afterwards."""
    if owned is None:
        own = _consumer(conf)
        try:
            yield own
        finally:
            own.close()
        return
    try:
        yield owned.get()
    except BaseException:
        owned.discard()
        raise


def _raise_fatal(err: KafkaError) -> None:
    # Transport errors are retried by librdkafka; only fatal ones end the client.
    if err.fatal():
        raise KafkaException(err)


def list_partitions(conf: dict, topic: str, consumer: OwnedConsumer | None = None) -> list[TopicPartition]:
    """The topic's partitions; a clear error if the broker is unreachable or the topic is missing."""
    with _borrowed(conf, consumer) as consumer:
        return _partitions_in(_topic_metadata(consumer, conf, topic), conf, topic)


def topics_on_broker(conf: dict, consumer: OwnedConsumer | None = None) -> set[str]:
    """The names of the topics the broker has now; a clear error if it cannot be reached."""
    with _borrowed(conf, consumer) as borrowed:
        return set(_topic_metadata(borrowed, conf, None).topics)


def subscribed_partitions(conf: dict, source: SourceConfig,
                          consumer: OwnedConsumer | None = None) -> list[TopicPartition]:
    """The partitions of every topic of ``source`` (its topic, its list, or those matching its pattern now),
    by topic, from one metadata request; a clear error naming the topic if one listed is missing, or the pattern
    if nothing matches."""
    if source.topic is not None:
        return list_partitions(conf, source.topic, consumer)
    with _borrowed(conf, consumer) as borrowed:
        md = _topic_metadata(borrowed, conf, None)
    names = source.topics if source.topics is not None else sorted(t for t in md.topics if source.matches(t))
    if not names:
        raise SourceError(f"no topic on {conf['bootstrap.servers']} matches source.topic_pattern "
                          f"{source.topic_pattern!r} (fix: create a matching topic, or correct the pattern; it "
                          "must match whole topic names)")
    return [tp for name in names for tp in _partitions_in(md, conf, name)]


def _partitions_in(md, conf: dict, topic: str) -> list[TopicPartition]:
    """``topic``'s partitions in the metadata ``md``; a clear error if it is missing there."""
    tmd = md.topics.get(topic)
    if tmd is None or tmd.error is not None or not tmd.partitions:
        reason = tmd.error if tmd is not None and tmd.error else "no partitions"
        raise SourceError(f"topic {topic!r} not found on {conf['bootstrap.servers']} ({reason})")
    return [TopicPartition(topic, p) for p in sorted(tmd.partitions)]


# What librdkafka answers when it could not connect at all: refused, dropped, or a name that does not resolve.
_NO_CONNECTION = frozenset({KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._RESOLVE})


def _topic_metadata(consumer: Consumer, conf: dict, topic: str | None):
    """The topic's metadata (``None``: every topic's). A broker that accepted no connection fails after
    :data:`CONNECT_TIMEOUT_S`; one that is connected but slow gets :data:`METADATA_TIMEOUT_S` more to answer."""
    what = f"topic {topic!r}" if topic is not None else "its topics"
    where = f"cannot reach Kafka at {conf['bootstrap.servers']} to read metadata of {what}"
    for timeout in (CONNECT_TIMEOUT_S, METADATA_TIMEOUT_S):
        try:
            return consumer.list_topics(topic, timeout=timeout)
        except KafkaException as exc:
            if (err := _no_answer(exc)) is None:
                raise SourceError(f"{where}: {exc}") from exc
            if err.code() in _NO_CONNECTION or timeout == METADATA_TIMEOUT_S:
                waited = "accepted no connection" if err.code() in _NO_CONNECTION else "gave no answer"
                raise BrokerUnresponsive(f"{where}: it {waited} within {timeout:.0f}s ({err.str()})") from None
    raise AssertionError("unreachable: the last attempt returns or raises")


@dataclass(frozen=True)
class Watermarks:
    """Earliest available and next-to-be-read offsets per partition.

    ``high`` is what the consumer's isolation level may read up to: the last stable offset under
    ``read_committed`` (records of a transaction still open are beyond it), the high watermark under
    ``read_uncommitted``. A range planned up to ``high`` can therefore always be read to its end.
    """

    low: PartitionOffsets
    high: PartitionOffsets


def watermarks(conf: dict, partitions: list[TopicPartition], consumer: OwnedConsumer | None = None) -> Watermarks:
    """Low and high watermarks from the broker (``ListOffsets``, at the isolation level of ``conf``)."""
    with _borrowed(conf, consumer) as consumer:
        listed = {tp: _listed_offsets(conf, consumer, tp) for tp in partitions}
        return Watermarks(low=PartitionOffsets({tp: lo for tp, (lo, _) in listed.items()}),
                          high=PartitionOffsets({tp: hi for tp, (_, hi) in listed.items()}))


def _listed_offsets(conf: dict, consumer: Consumer, tp: TopicPartition) -> tuple[int, int]:
    """:func:`watermark_offsets` of ``tp`` with its failure named: a request the broker did not answer (it is gone,
    unreachable, or its partitions unknown since) is :class:`BrokerUnresponsive` naming the broker, any other a
    :class:`SourceError`."""
    try:
        return watermark_offsets(consumer, tp)
    except KafkaException as exc:
        if (err := _no_answer(exc)) is not None:
            raise BrokerUnresponsive(
                f"the broker at {conf['bootstrap.servers']} answered no offsets request (ListOffsets) for {tp} "
                f"within {METADATA_TIMEOUT_S:.0f}s: {err.str()}") from None
        raise SourceError(f"cannot read offsets of {tp} from {conf['bootstrap.servers']}: {exc}") from exc


def watermark_offsets(consumer: Consumer, tp: TopicPartition) -> tuple[int, int]:
    """``(low, high)`` of ``tp`` (``ListOffsets``), through a leader's move: while the partition's leader is gone,
    being elected or still catching up (a broker of the cluster died), or while the consumer's metadata does not
    know the partition (added since librdkafka last refreshed it: every 5 minutes), the topic's metadata is read
    again and the request retried, for up to :data:`FAILOVER_WAIT_S`; then the last error is raised."""
    ktp = KTopicPartition(tp.topic, tp.partition)
    deadline = time.monotonic() + FAILOVER_WAIT_S
    while True:
        try:
            return consumer.get_watermark_offsets(ktp, timeout=METADATA_TIMEOUT_S)
        except KafkaException as exc:
            err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            if err is None or err.code() not in _LEADER_MOVING or time.monotonic() > deadline:
                raise
        with contextlib.suppress(KafkaException):
            consumer.list_topics(tp.topic, timeout=METADATA_TIMEOUT_S)  # the partition and its leader, as they are now
        time.sleep(FAILOVER_POLL_S)


def _batch(messages: list, topic: str, partition: int, offsets: list[int]) -> pa.RecordBatch:
    """Messages of one partition (and their offsets) as a batch of :data:`RAW_SCHEMA`: a timestamp no column can hold
    (:func:`record_times`) is null, and its record carries why in ``source_error``."""
    n = len(messages)
    stamps, errors = record_times(pa.array([m.timestamp()[1] for m in messages], pa.int64()))
    return pa.RecordBatch.from_arrays(
        [
            pa.array([topic] * n, pa.string()),
            pa.array([partition] * n, pa.int32()),
            pa.array(offsets, pa.int64()),
            stamps,
            pa.array([m.key() for m in messages], pa.binary()),
            pa.array([_headers(m) for m in messages], HEADERS),
            pa.array([m.value() for m in messages], pa.binary()),
            pa.nulls(n, pa.string()),
            errors,
        ],
        schema=RAW_SCHEMA,
    )


LAST_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z: the last millisecond a timestamp column holds


def record_times(millis: pa.Array) -> tuple[pa.Array, pa.Array]:
    """Kafka record timestamps (ms since the epoch; -1: none) as ``kafka_timestamp`` (µs), and per record why its
    timestamp cannot be one (null: it can). A value past the year 9999 (microseconds or nanoseconds sent as
    milliseconds) or below -1 is never multiplied into another time: its column is null and the reason names it."""
    fits = pc.and_(pc.greater_equal(millis, 0), pc.less_equal(millis, LAST_MS))
    stamps = pc.multiply_checked(pc.if_else(fits, millis, None), 1000).cast(TIMESTAMP)
    bad = pc.and_(pc.invert(fits), pc.not_equal(millis, -1))
    if not pc.any(bad).as_py():
        return stamps, pa.nulls(len(millis), pa.string())
    errors = [None if not wrong else (
        f"kafka_timestamp {ms} ms is after 9999-12-31 (a timestamp in microseconds or nanoseconds sent as "
        "milliseconds?): no timestamp column holds it" if ms > LAST_MS else
        f"kafka_timestamp {ms} ms is before 1970 and not -1 (no timestamp): Kafka gives no such timestamp")
        for ms, wrong in zip(millis.to_pylist(), bad.to_pylist(), strict=True)]
    return stamps, pa.array(errors, pa.string())


def _headers(message) -> list[dict]:
    """A message's headers as ``kafka_headers`` holds them (a key that is not UTF-8 is kept escaped)."""
    headers = message.headers()
    if not headers:
        return []
    return [{"key": k.decode("utf-8", "backslashreplace") if isinstance(k, bytes) else k,
             "value": v.encode() if isinstance(v, str) else v} for k, v in headers]


@dataclass
class _Cursor:
    """Where the reading of one range stands, and what of it was read, expired or passed over."""

    rng: OffsetRange
    pos: int
    isolation: str
    records: int = 0
    lost: list[OffsetRange] = field(default_factory=list)
    absent: list[OffsetRange] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return self.pos >= self.rng.end

    def skip_expired(self, earliest: int, on_expired: str) -> None:
        """Move past offsets below ``earliest`` (recorded as lost with ``record_gap``), or raise."""
        if self.pos < earliest and not self.done:
            gone = self.rng.with_bounds(self.pos, min(earliest, self.rng.end))
            if on_expired != "record_gap":
                raise ExpiredOffsetsError(gone, earliest)
            self.lost.append(gone)
            self.pos = gone.end

    def read(self, offsets: list[int]) -> None:
        """Records at ``offsets`` (ascending, inside the range, from ``pos`` on) were delivered: the offsets passed
        over to reach them are absent."""
        self.absent += [self.rng.with_bounds(s, e) for s, e in passed_over(self.pos, offsets)]
        self.records += len(offsets)
        self.pos = offsets[-1] + 1

    def pass_to_end(self) -> None:
        """The broker delivers nothing more inside the range (the consumer's position, or a record it delivered,
        is at or past its end): what is left of it is absent."""
        if not self.done:
            self.absent.append(self.rng.with_bounds(self.pos, self.rng.end))
            self.pos = self.rng.end

    def marker(self) -> RangeMarker:
        return RangeMarker(self.rng, self.records, tuple(self.lost), tuple(self.absent), self.isolation)


def read_ranges(
    conf: dict,
    ranges: list[OffsetRange],
    on_expired: str = "fail",
    batch_size: int = 20000,
    idle_timeout_s: float = 60.0,
    with_markers: bool = True,
    consumer: OwnedConsumer | None = None,
) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``ranges`` (one range per topic-partition) as Arrow batches of
    :data:`~tailfill.values.schema.RAW_SCHEMA`, then (optionally) one marker row per range.

    The partitions are read together by one consumer (one fetch serves them all). Offsets inside a range that
    the broker does not deliver (transaction markers; records of aborted transactions under ``read_committed``;
    offsets log compaction removed) are listed in the marker's ``absent``, with the isolation level read under:
    those passed over between two records, and the end of a range that the consumer's position (or a record past
    the range) moved beyond. A range is done only once every offset of it is read, absent or lost, so the
    marker accounts for every offset. Offsets below the earliest available one raise
    :class:`ExpiredOffsetsError` unless ``on_expired == "record_gap"``, in which case they are
    listed in the marker's ``lost``. A ``consumer`` passed in (:class:`OwnedConsumer`) is
    reassigned and left open; otherwise one is made and closed here.
    """
    if len({r.tp for r in ranges}) != len(ranges):
        raise ValueError(f"read_ranges takes one range per topic-partition, got {ranges}")
    isolation = str(conf.get("isolation.level", "read_committed"))  # librdkafka's default
    cursors = {r.tp: _Cursor(r, r.start, isolation) for r in ranges}
    with _borrowed(conf, consumer) as consumer:

        def earliest(c: _Cursor) -> int:
            return _listed_offsets(conf, consumer, c.rng.tp)[0]

        for c in cursors.values():
            c.skip_expired(earliest(c), on_expired)
        live = {tp: c for tp, c in cursors.items() if not c.done}
        assignment = [KTopicPartition(tp.topic, tp.partition, c.pos) for tp, c in live.items()]
        # Never pause(): librdkafka can leave a partition paused for good when a shared consumer's
        # paused partition is assigned again and resumed (confluentinc/librdkafka#5591; seen here as
        # a retried batch reading nothing for 60 s). A finished partition leaves the assignment instead.
        consumer.assign(assignment)

        def finish(tp: TopicPartition) -> None:
            live.pop(tp)
            consumer.incremental_unassign([KTopicPartition(tp.topic, tp.partition)])

        last_progress = time.monotonic()
        lost: str | None = None  # a connection error seen since the last progress
        while live:
            # consume() waits out its timeout unless it gets all it asked for: never ask for more than is left.
            left = sum(c.rng.end - c.pos for c in live.values())
            msgs = consumer.consume(num_messages=min(batch_size, left), timeout=0.5)
            if not msgs:
                positions = consumer.position([KTopicPartition(tp.topic, tp.partition) for tp in live])
                for pos in positions:
                    c = live[TopicPartition(pos.topic, pos.partition)]
                    if pos.offset >= c.rng.end:  # nothing delivered up to the end: absent
                        c.pass_to_end()
                        finish(c.rng.tp)
            if any(m.error() is not None for m in msgs):
                msgs, error = _handle_errors(msgs, live, consumer, on_expired, earliest, finish)
                lost = lost or error
            good = False
            for tp, part in _by_partition(msgs, live):
                c = live[tp]
                offsets = [m.offset() for m in part]
                lo = bisect.bisect_left(offsets, c.pos)  # fetched before a seek
                hi = bisect.bisect_left(offsets, c.rng.end)  # past the range: fetched ahead
                if hi > lo:
                    c.read(offsets[lo:hi])
                    good = True
                    yield _batch(part[lo:hi], tp.topic, tp.partition, offsets[lo:hi])
                if hi < len(offsets) or c.done:  # a record past the range: nothing more inside it
                    c.pass_to_end()
                    finish(tp)
            if good:
                last_progress, lost = time.monotonic(), None
            elif live:
                _check_idle(conf, live, time.monotonic() - last_progress, idle_timeout_s, lost)
        if with_markers:
            for c in cursors.values():
                yield c.marker().to_batch()


def _by_partition(msgs: list, live: dict) -> Iterator[tuple[TopicPartition, list]]:
    """The messages of each live topic-partition, in offset order (error-free messages only), in one pass."""
    groups: dict[TopicPartition, list] = {}
    for m in msgs:
        groups.setdefault(TopicPartition(m.topic(), m.partition()), []).append(m)
    for tp, part in groups.items():
        if tp in live:
            yield tp, part


# Connection-level errors librdkafka reports while it reconnects (a broker restarting, a leader moving; a new
# leader answers OFFSET_NOT_AVAILABLE until its high watermark has caught up).
_TRANSIENT = frozenset({KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT,
                        KafkaError._RESOLVE, KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION,
                        KafkaError.REQUEST_TIMED_OUT, KafkaError.NETWORK_EXCEPTION, KafkaError.OFFSET_NOT_AVAILABLE})


def _transient(err: KafkaError) -> bool:
    return not err.fatal() and err.code() in _TRANSIENT


# What librdkafka answers for a request the broker did not answer: down, unreachable, timed out, no metadata yet (so
# the partition is unknown locally), or the client torn down mid-request.
_NO_ANSWER = _TRANSIENT | {KafkaError._UNKNOWN_PARTITION, KafkaError._DESTROY_BROKER}
# What an offsets request meets, answered at once, while a partition's leader moves (or its metadata is stale): worth
# asking again after a metadata refresh. A request that timed out is not retried here (one that waited
# METADATA_TIMEOUT_S says the broker is unresponsive: BrokerUnresponsive's own patience takes over).
_LEADER_MOVING = frozenset({KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                            KafkaError.OFFSET_NOT_AVAILABLE, KafkaError._UNKNOWN_PARTITION,
                            KafkaError._DESTROY_BROKER})


def _no_answer(exc: KafkaException) -> KafkaError | None:
    """The error of ``exc`` when it says the broker did not answer; None for any other error."""
    err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    return err if err is not None and not err.fatal() and err.code() in _NO_ANSWER else None


def _check_idle(conf: dict, live: dict, waited: float, idle_timeout_s: float, lost: str | None) -> None:
    """Fail a read that made no progress for too long: ``idle_timeout_s``, or less once the connection
    failed (a consumer that has not recovered by then is replaced by a fresh one when the batch restarts)."""
    limit = min(idle_timeout_s, RECONNECT_TIMEOUT_S) if lost else idle_timeout_s
    if waited > limit:
        where = ", ".join(f"{c.rng} at {c.pos}" for c in live.values())
        why = f" since the connection failed ({lost})" if lost else ""
        raise BrokerUnresponsive(f"the broker at {conf['bootstrap.servers']} answered no fetch for {limit:.0f}s{why}, "
                                 f"reading {where}")


def _handle_errors(msgs: list, live: dict, consumer: Consumer, on_expired: str, earliest,
                   finish) -> tuple[list, str | None]:
    """Act on the error events among ``msgs`` (offsets expired while reading, or fatal ones).

    Returns the messages without errors, and the last transient connection error (librdkafka
    reconnects by itself; the read's idle check bounds how long it may take).
    """
    out, lost = [], None
    for m in msgs:
        err = m.error()
        if err is None:
            out.append(m)
            continue
        c = live.get(TopicPartition(m.topic(), m.partition())) if m.topic() and m.partition() is not None else None
        if c is not None and err.code() in (KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET):
            low = earliest(c)
            if c.pos >= low:
                raise SourceError(f"reading {c.rng}: offset {c.pos} is out of range: {err}")
            c.skip_expired(low, on_expired)  # expired while reading
            if c.done:
                finish(c.rng.tp)
            else:
                consumer.seek(KTopicPartition(c.rng.topic, c.rng.partition, c.pos))
            continue
        if err.code() == KafkaError._PARTITION_EOF:
            continue
        if _transient(err):
            lost = err.str()
            continue
        where = f"{c.rng} at offset {c.pos}" if c is not None else "the partitions"
        raise SourceError(f"reading {where}: {err}")
    return out, lost


def read_range(conf: dict, rng: OffsetRange, on_expired: str = "fail", with_marker: bool = True,
               consumer: OwnedConsumer | None = None) -> Iterator[pa.RecordBatch]:
    """:func:`read_ranges` of one range."""
    return read_ranges(conf, [rng], on_expired, with_markers=with_marker, consumer=consumer)
