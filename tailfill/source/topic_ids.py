"""Topic ids: the UUID Kafka gives every topic when it is created, read with one ``DescribeTopics`` request.

A topic deleted and created again under the same name gets a new id and starts its offsets at 0 again; offsets
alone cannot always tell (the new topic may already hold more records than the old one did), its id always can.
"""

from __future__ import annotations

from confluent_kafka import KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient

from tailfill.errors import SourceError, TopicRecreatedError
from tailfill.source.kafka import METADATA_TIMEOUT_S
from tailfill.source.kafka_log import logged

# Client settings an admin client shares with the pipeline's consumer: where the brokers are and how to reach them.
SHARED_PREFIXES = ("bootstrap.servers", "security.", "sasl.", "ssl.", "enable.ssl", "socket.", "broker.", "client.",
                   "api.version", "oauthbearer", "log.connection.close", "error_cb")


def admin_config(conf: dict) -> dict:
    """The settings of an admin client reaching the brokers as the consumer settings ``conf`` do (its consumer-only
    settings left out: librdkafka would warn that each is ignored)."""
    return {k: v for k, v in conf.items() if k.startswith(SHARED_PREFIXES)}


def topic_ids(conf: dict, topics: list[str]) -> dict[str, str]:
    """The id of each of ``topics`` (base64, as Kafka's tools print it), from one request to the brokers of
    ``conf`` (consumer settings)."""
    if not topics:
        return {}
    admin = AdminClient(logged(admin_config(conf)))
    futures = admin.describe_topics(TopicCollection(sorted(topics)), request_timeout=METADATA_TIMEOUT_S)
    out = {}
    for topic, future in futures.items():
        try:
            out[topic] = str(future.result(timeout=METADATA_TIMEOUT_S).topic_id)
        except KafkaException as exc:
            raise SourceError(f"cannot describe topic {topic!r} on {conf['bootstrap.servers']}: {exc}") from exc
    return out


def check_same_topics(recorded: dict[str, str], now: dict[str, str], seen: dict[str, str], where: str, table: str,
                      pipeline: str) -> None:
    """Refuse a topic whose id is not the one ``table`` recorded: it was deleted and created again. ``seen`` says, per
    topic, what the broker holds now and what the table holds (for the message); ``where``: the brokers."""
    changed = sorted(t for t in now if t in recorded and recorded[t] != now[t])
    if not changed:
        return
    topic = changed[0]
    raise TopicRecreatedError(
        f"topic {topic!r} on {where} was deleted and created again: its topic id is now {now[topic]}, table {table} "
        f"recorded {recorded[topic]} ({seen.get(topic, 'nothing committed yet')}); its offsets would be new records "
        "under old numbers, so nothing was planned (fix: find out what happened to the topic; to ingest the new "
        f"topic from its start, `tailfill reset {pipeline}` or point the pipeline at a new table)")
