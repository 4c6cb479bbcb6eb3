"""Offsets from times: the first offset of each partition whose record's timestamp is at or after a moment, as the
broker's ``ListOffsets`` by timestamp answers it (``offsets_for_times``)."""

from __future__ import annotations

from datetime import UTC, datetime

from confluent_kafka import KafkaException
from confluent_kafka import TopicPartition as KTopicPartition

from tailfill.errors import ConfigError, SourceError
from tailfill.offsets import PartitionOffsets, TopicPartition
from tailfill.source.kafka import METADATA_TIMEOUT_S, OwnedConsumer, Watermarks


def parse_time(text: str, flag: str) -> datetime:
    """An ISO 8601 time (``2026-01-31T12:00:00Z``, or with an offset; none given: UTC); one line naming ``flag``
    when it is not one."""
    try:
        at = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ConfigError(f"{flag} {text!r} is not an ISO 8601 time (fix: e.g. 2026-01-31T12:00:00Z, or "
                          "2026-01-31T13:00:00+01:00)") from None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def offsets_at(conf: dict, at: datetime, marks: Watermarks) -> PartitionOffsets:
    """Per partition of ``marks``, the first offset whose record's timestamp is at or after ``at``; the partition's
    end (``marks.high``) when no record is that late. Never past the end, nor before the earliest offset."""
    millis = int(at.timestamp() * 1000)
    asked = [KTopicPartition(tp.topic, tp.partition, millis) for tp in marks.high]
    consumer = OwnedConsumer(conf)
    try:
        found = consumer.get().offsets_for_times(asked, timeout=METADATA_TIMEOUT_S)
    except KafkaException as exc:
        raise SourceError(f"cannot look up offsets at {at.isoformat()} on {conf['bootstrap.servers']}: {exc}") from exc
    finally:
        consumer.close()
    out = {}
    for k in found:
        tp = TopicPartition(k.topic, k.partition)
        if k.error is not None:
            raise SourceError(f"cannot look up the offset of {tp} at {at.isoformat()} on {conf['bootstrap.servers']}: "
                              f"{k.error}")
        high, low = marks.high[tp], marks.low.get(tp, 0) or 0
        out[tp] = high if k.offset < 0 else max(low, min(k.offset, high))
    return PartitionOffsets(out)
