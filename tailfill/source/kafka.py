"""Kafka access through confluent-kafka: client settings, partition discovery, true end offsets,
and reading one offset range as Arrow record batches.

The consumer is always assigned explicit offsets (no group, no auto-commit) and uses
``auto.offset.reset=error``: an offset that is no longer in the topic is an error naming the lost
range, never a silent jump to ``earliest`` or ``latest`` (the failure in seed 000).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KTopicPartition

from tailfill.config import EMBEDDED, SourceConfig
from tailfill.errors import ConfigError, ExpiredOffsetsError, SourceError
from tailfill.offsets import OffsetRange, PartitionOffsets, TopicPartition
from tailfill.schema import RAW_SCHEMA, TIMESTAMP, RangeMarker

METADATA_TIMEOUT_S = 10.0

def consumer_config(source: SourceConfig, **overrides: object) -> dict:
    """librdkafka settings for an assign-only consumer of ``source``; secrets come from the env.

    ``source.bootstrap_servers`` must be an address: the driver resolves ``embedded`` once
    (:func:`tailfill.dev.broker.resolved`) and ships the result to executors.
    """
    if source.bootstrap_servers == EMBEDDED:
        raise ConfigError("source.bootstrap_servers is still 'embedded': resolve it with "
                          "tailfill.dev.broker.resolved(cfg) before building a consumer")
    sec = source.security
    conf: dict[str, object] = {
        "bootstrap.servers": source.bootstrap_servers,
        "group.id": f"tailfill-{source.topic}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "error",
        "isolation.level": source.isolation_level,
        "enable.partition.eof": False,
        "socket.timeout.ms": 10000,
        "queued.min.messages": 200000,
        "fetch.wait.max.ms": 10,
        "security.protocol": sec.protocol,
    }
    if sec.credential_env is not None:
        conf["sasl.mechanism"] = sec.sasl_mechanism
        for key, env in zip(("sasl.username", "sasl.password"), sec.credential_env, strict=True):
            if env not in os.environ:
                via = f" (filled from Airflow connection {sec.airflow_conn_id!r})" if sec.airflow_conn_id else ""
                raise ConfigError(f"source.security: environment variable {env}{via} is not set")
            conf[key] = os.environ[env]
    conf.update(source.consumer)
    conf.update(overrides)
    return conf


def _consumer(conf: dict) -> Consumer:
    return Consumer({**conf, "error_cb": _raise_fatal})


def _raise_fatal(err: KafkaError) -> None:
    # Transport errors are retried by librdkafka; only fatal ones end the client.
    if err.fatal():
        raise KafkaException(err)


def list_partitions(conf: dict, topic: str) -> list[TopicPartition]:
    """The topic's partitions; a clear error if the broker is unreachable or the topic is missing."""
    consumer = _consumer(conf)
    try:
        try:
            md = consumer.list_topics(topic, timeout=METADATA_TIMEOUT_S)
        except KafkaException as exc:
            raise SourceError(
                f"cannot reach Kafka at {conf['bootstrap.servers']} to read metadata of topic {topic!r}: {exc}"
            ) from exc
        tmd = md.topics.get(topic)
        if tmd is None or tmd.error is not None or not tmd.partitions:
            reason = tmd.error if tmd is not None and tmd.error else "no partitions"
            raise SourceError(f"topic {topic!r} not found on {conf['bootstrap.servers']} ({reason})")
        return [TopicPartition(topic, p) for p in sorted(tmd.partitions)]
    finally:
        consumer.close()


@dataclass(frozen=True)
class Watermarks:
    """Earliest available and next-to-be-written offsets per partition."""

    low: PartitionOffsets
    high: PartitionOffsets


def watermarks(conf: dict, partitions: list[TopicPartition], probe_timeout_s: float = 5.0) -> Watermarks:
    """Low and high watermarks, the high ones confirmed by a fetch.

    ``ListOffsets(latest)`` is what Kafka clients use, but some Kafka-protocol brokers (tansu)
    answer with the start of the last record batch + 1. The high watermark in a fetch response
    is right everywhere, so each non-empty partition is fetched once from just below the listed
    end and the larger of the two values wins.
    """
    consumer = _consumer(conf)
    try:
        listed = {}
        for tp in partitions:
            try:
                listed[tp] = consumer.get_watermark_offsets(
                    KTopicPartition(tp.topic, tp.partition), timeout=METADATA_TIMEOUT_S
                )
            except KafkaException as exc:
                raise SourceError(f"cannot read offsets of {tp} from {conf['bootstrap.servers']}: {exc}") from exc
        probe = {tp: hi for tp, (lo, hi) in listed.items() if hi > lo}
        high = {tp: hi for tp, (_, hi) in listed.items()}
        if probe:
            consumer.assign([KTopicPartition(tp.topic, tp.partition, hi - 1) for tp, hi in probe.items()])
            deadline = time.monotonic() + probe_timeout_s
            confirmed: set[TopicPartition] = set()
            while confirmed != set(probe) and time.monotonic() < deadline:
                consumer.consume(num_messages=len(probe), timeout=0.2)
                for tp in set(probe) - confirmed:
                    _, cached = consumer.get_watermark_offsets(KTopicPartition(tp.topic, tp.partition), cached=True)
                    if cached >= 0:
                        high[tp] = max(high[tp], cached)
                        confirmed.add(tp)
        return Watermarks(
            low=PartitionOffsets({tp: lo for tp, (lo, _) in listed.items()}),
            high=PartitionOffsets(high),
        )
    finally:
        consumer.close()


def _batch(messages: list, topic: str, partition: int) -> pa.RecordBatch:
    n = len(messages)
    stamps = []
    for m in messages:
        ts_type, ts = m.timestamp()
        stamps.append(ts * 1000 if ts_type != 0 and ts >= 0 else None)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([topic] * n, pa.string()),
            pa.array([partition] * n, pa.int32()),
            pa.array([m.offset() for m in messages], pa.int64()),
            pa.array(stamps, TIMESTAMP),
            pa.array([m.key() for m in messages], pa.binary()),
            pa.array([m.value() for m in messages], pa.binary()),
            pa.nulls(n, pa.string()),
        ],
        schema=RAW_SCHEMA,
    )


def read_range(
    conf: dict,
    rng: OffsetRange,
    on_expired: str = "fail",
    batch_size: int = 20000,
    idle_timeout_s: float = 60.0,
    with_marker: bool = True,
) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``rng`` as Arrow batches, then (optionally) one marker row.

    Offsets absent on the broker inside the range (transaction markers, compaction) are simply
    not returned; the marker's ``records`` tells how many were. Offsets below the earliest
    available one raise :class:`ExpiredOffsetsError` unless ``on_expired == "record_gap"``, in
    which case they are listed in the marker's ``lost``.
    """
    topic, partition = rng.topic, rng.partition
    ktp = KTopicPartition(topic, partition)
    consumer = _consumer(conf)
    records, lost = 0, []
    try:
        pos = rng.start
        earliest, _ = consumer.get_watermark_offsets(ktp, timeout=METADATA_TIMEOUT_S)
        while pos < rng.end:
            if pos < earliest:
                gone = rng.with_bounds(pos, min(earliest, rng.end))
                if on_expired != "record_gap":
                    raise ExpiredOffsetsError(gone, earliest)
                lost.append([gone.start, gone.end])
                pos = gone.end
                continue
            consumer.assign([KTopicPartition(topic, partition, pos)])
            last_progress = time.monotonic()
            while pos < rng.end:
                msgs = consumer.consume(num_messages=batch_size, timeout=0.5)
                if not msgs:
                    position = consumer.position([ktp])[0].offset
                    if position >= rng.end:  # only markers/compacted offsets were left
                        pos = rng.end
                    elif time.monotonic() - last_progress > idle_timeout_s:
                        raise SourceError(
                            f"reading {rng}: no records past offset {pos} for {idle_timeout_s:.0f}s "
                            f"from {conf['bootstrap.servers']}"
                        )
                    continue
                good = []
                for m in msgs:
                    err = m.error()
                    if err is not None:
                        if err.code() in (KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET):
                            earliest, _ = consumer.get_watermark_offsets(ktp, timeout=METADATA_TIMEOUT_S)
                            if pos >= earliest:
                                raise SourceError(f"reading {rng}: offset {pos} is out of range: {err}")
                            break
                        if err.code() == KafkaError._PARTITION_EOF:
                            continue
                        raise SourceError(f"reading {rng} at offset {pos}: {err}")
                    if m.offset() >= rng.end:
                        pos = rng.end
                        break
                    good.append(m)
                    pos = m.offset() + 1
                if good:
                    records += len(good)
                    last_progress = time.monotonic()
                    yield _batch(good, topic, partition)
                if pos < earliest:  # expired while reading: handled by the outer loop
                    break
        if with_marker:
            yield RangeMarker(rng, records, tuple(rng.with_bounds(s, e) for s, e in lost)).to_batch()
    finally:
        consumer.close()
