"""The checks a plan makes of the topics themselves: the partition count, the topic ids, the times asked."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tailfill.config import SourceConfig
from tailfill.errors import ConfigError, TopicRecreatedError
from tailfill.offsets import TopicPartition
from tailfill.source.partition_count import check_partition_counts
from tailfill.source.times import parse_time
from tailfill.source.topic_ids import admin_config, check_same_topics


def source(partitions: int | None) -> SourceConfig:
    return SourceConfig(bootstrap_servers="127.0.0.1:9092", topic="orders", partitions=partitions)


def parts(count: int) -> list[TopicPartition]:
    return [TopicPartition("orders", p) for p in range(count)]


def test_a_pinned_count_names_both_counts_and_what_to_change():
    check_partition_counts(source(None), parts(5))  # not pinned: anything goes
    check_partition_counts(source(4), parts(4))
    with pytest.raises(ConfigError) as more:
        check_partition_counts(source(4), parts(5), "p.yaml")
    assert str(more.value).startswith("p.yaml: source.partitions: topic 'orders' has 5 partitions, the pipeline "
                                      "expects 4 (fix: partitions were added to the topic: set source.partitions to 5")
    with pytest.raises(ConfigError) as fewer:
        check_partition_counts(source(4), parts(2))
    assert "set source.partitions to 2; Kafka never removes partitions" in str(fewer.value)
    assert "\n" not in str(more.value) + str(fewer.value)


def test_a_changed_topic_id_is_one_line_naming_both_ids_and_the_fix():
    check_same_topics({}, {"orders": "new"}, {}, "b:9092", "ns.t", "p")  # nothing recorded yet: nothing to compare
    check_same_topics({"orders": "a"}, {"orders": "a", "later": "x"}, {}, "b:9092", "ns.t", "p")
    with pytest.raises(TopicRecreatedError) as err:
        check_same_topics({"orders": "old"}, {"orders": "new"}, {"orders": "it has 1 partition ending at 7"},
                          "b:9092", "ns.t", "p")
    text = str(err.value)
    assert text.startswith("topic 'orders' on b:9092 was deleted and created again: its topic id is now new, "
                           "table ns.t recorded old (it has 1 partition ending at 7)")
    assert "`tailfill reset p`" in text and "\n" not in text and not err.value.retryable


def test_an_admin_client_gets_only_the_settings_that_reach_the_brokers():
    conf = {"bootstrap.servers": "b:9092", "security.protocol": "SASL_SSL", "sasl.username": "u", "group.id": "g",
            "isolation.level": "read_committed", "ssl.ca.location": "/ca", "auto.offset.reset": "error"}
    assert admin_config(conf) == {"bootstrap.servers": "b:9092", "security.protocol": "SASL_SSL",
                                  "sasl.username": "u", "ssl.ca.location": "/ca"}


def test_times_are_iso_8601_and_utc_without_a_zone():
    assert parse_time("2026-01-31T12:00:00Z", "--from-time") == datetime(2026, 1, 31, 12, tzinfo=UTC)
    assert parse_time("2026-01-31T12:00:00", "--to-time") == datetime(2026, 1, 31, 12, tzinfo=UTC)
    assert parse_time("2026-01-31T13:00:00+01:00", "--to-time") == datetime(2026, 1, 31, 12, tzinfo=UTC)
    with pytest.raises(ConfigError, match=r"^--from-time 'last week' is not an ISO 8601 time \(fix: e.g. "):
        parse_time("last week", "--from-time")
