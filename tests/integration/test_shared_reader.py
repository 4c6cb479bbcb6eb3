"""One consumer per Spark worker reads batch after batch: a batch read again must get its records.

Spark reuses its Python workers, so one shared consumer reads every batch a worker gets — and
after a failed commit the same ranges again. A reader that paused each partition it finished and
resumed it on the next read could have librdkafka leave such a partition paused for good
(confluentinc/librdkafka#5591), and a retried batch would then read nothing until its 60 s idle
timeout; Tailfill's reader never pauses. The race needs a busy machine to show, so this test reads
many batches back to back, repeats and overlaps included, each with a short idle timeout.
"""

from __future__ import annotations

import uuid

import pytest

from tailfill.dev.sample import produce_sample
from tailfill.offsets import OffsetRange
from tailfill.source.kafka import OwnedConsumer, read_ranges

pytestmark = pytest.mark.integration

PARTITIONS, PER_PARTITION, SLICE = 4, 1_000, 250


def test_a_shared_consumer_reads_every_batch_again_and_again(broker):
    topic = f"t-{uuid.uuid4().hex[:10]}"
    produce_sample(broker.bootstrap_servers, topic, PARTITIONS * PER_PARTITION, PARTITIONS)
    conf = {"bootstrap.servers": broker.bootstrap_servers, "group.id": f"tailfill-{topic}",
            "enable.auto.commit": False, "auto.offset.reset": "error", "enable.partition.eof": False}
    starts = [0, 0, 250, 250, 500, 0, 750, 750, 500, 250] * 3  # repeats (a retried batch) and jumps back
    shared = OwnedConsumer(conf)  # as an executor's context keeps one across its tasks
    for i, start in enumerate(starts):
        partitions = range(PARTITIONS) if i % 3 else range(i % PARTITIONS, PARTITIONS)
        ranges = [OffsetRange(topic, p, start, start + SLICE) for p in partitions]
        batches = list(read_ranges(conf, ranges, idle_timeout_s=15, consumer=shared,
                                   with_markers=False))
        got = {(p, o) for b in batches for p, o in zip(b.column("kafka_partition").to_pylist(),
                                                       b.column("kafka_offset").to_pylist(), strict=True)}
        assert got == {(r.partition, o) for r in ranges for o in range(r.start, r.end)}, f"read {i}: {ranges}"
    shared.close()
