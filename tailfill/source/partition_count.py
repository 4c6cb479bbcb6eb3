"""``source.partitions``: the partition count every topic of a pipeline must have, checked by each plan and by a
running tail's every batch.

Kafka only ever adds partitions to a topic (``CreatePartitions``); a topic with fewer than before was deleted and
created again. Either way a pipeline that pins the count stops with one line naming both counts and the fix.
"""

from __future__ import annotations

from collections import Counter

from tailfill.config import SourceConfig
from tailfill.errors import ConfigError
from tailfill.offsets import TopicPartition


def check_partition_counts(source: SourceConfig, parts: list[TopicPartition], where: str | None = None) -> None:
    """Refuse a topic whose partition count is not ``source.partitions`` (when it is set); ``where`` names the
    pipeline's file when it is known."""
    expected = source.partitions
    if expected is None:
        return
    for topic, count in sorted(Counter(tp.topic for tp in parts).items()):
        if count == expected:
            continue
        fix = (f"partitions were added to the topic: set source.partitions to {count}, or remove it to follow the "
               "topic's partitions; the tail reads a new partition from its first offset" if count > expected else
               f"set source.partitions to {count}; Kafka never removes partitions, so if the topic had "
               f"{expected}, it was deleted and created again")
        raise ConfigError(f"{where + ': ' if where else ''}source.partitions: topic {topic!r} has {count} partitions, "
                          f"the pipeline expects {expected} (fix: {fix})")
