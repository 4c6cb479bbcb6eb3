"""Topics on a broker: list them with their partitions and records, create one (``tailfill broker topics``,
the sample producers), say which are compacted (the proof's reasons for offsets the broker does not deliver)."""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

from tailfill.config import SourceConfig
from tailfill.errors import SourceError
from tailfill.offsets import TopicPartition
from tailfill.source.kafka import METADATA_TIMEOUT_S, OwnedConsumer, consumer_config, watermarks
from tailfill.source.kafka_log import logged


@dataclass(frozen=True)
class TopicInfo:
    name: str
    partitions: int
    records: int  # offsets between each partition's earliest and end, summed


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient(logged({"bootstrap.servers": bootstrap}))


def _topic_names(admin: AdminClient, bootstrap: str) -> dict:
    try:
        return admin.list_topics(timeout=METADATA_TIMEOUT_S).topics
    except KafkaException as exc:
        raise SourceError(f"cannot reach Kafka at {bootstrap}: {exc}") from exc


def list_topics(bootstrap: str) -> list[TopicInfo]:
    """Every topic on ``bootstrap`` but the broker's internal ones, by name (one consumer reads them all, every
    topic's ends confirmed in one go)."""
    topics = {name: [TopicPartition(name, p) for p in sorted(meta.partitions)]
              for name, meta in sorted(_topic_names(_admin(bootstrap), bootstrap).items()) if not name.startswith("__")}
    # assign-only and committing nothing: the group id names the reader, whichever topic it reads
    conf = consumer_config(SourceConfig(bootstrap_servers=bootstrap, topic="*"), **{"group.id": "tailfill-topics"})
    owned = OwnedConsumer(conf)
    try:
        marks = watermarks(conf, [tp for parts in topics.values() for tp in parts], consumer=owned)
    finally:
        owned.close()
    return [TopicInfo(name, len(parts), sum(marks.high[tp] - marks.low[tp] for tp in parts))
            for name, parts in topics.items()]


def ensure_topic(bootstrap: str, topic: str, partitions: int) -> bool:
    """Create ``topic`` with ``partitions`` partitions unless it exists (replicated as the broker's
    ``default.replication.factor`` says); True if it was created."""
    admin = _admin(bootstrap)
    if topic in _topic_names(admin, bootstrap):
        return False
    for fut in admin.create_topics([NewTopic(topic, partitions, -1)]).values():
        try:
            fut.result(timeout=METADATA_TIMEOUT_S)
        except KafkaException as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise SourceError(f"cannot create topic {topic!r} on {bootstrap}: {exc}") from exc
            return False
    return True


# Settings of an assign-only consumer that an admin client has no use for (it would warn about each).
_CONSUMER_ONLY = frozenset({"group.id", "enable.auto.commit", "enable.auto.offset.store", "auto.offset.reset",
                            "isolation.level", "enable.partition.eof", "queued.min.messages"})


def compacted_topics(conf: dict, topics: set[str]) -> set[str] | None:
    """Which of ``topics`` log compaction cleans (``cleanup.policy`` holds ``compact``), asked with the consumer
    settings ``conf`` (its security included); None when the broker does not say (no answer, not allowed)."""
    admin = AdminClient(logged({k: v for k, v in conf.items() if k not in _CONSUMER_ONLY}))
    try:
        asked = admin.describe_configs([ConfigResource(ResourceType.TOPIC, t) for t in sorted(topics)])
        found = {resource.name: future.result(timeout=METADATA_TIMEOUT_S) for resource, future in asked.items()}
    except (KafkaException, TimeoutError):
        return None
    return {name for name, configs in found.items()
            if "compact" in str(getattr(configs.get("cleanup.policy"), "value", "") or "")}
