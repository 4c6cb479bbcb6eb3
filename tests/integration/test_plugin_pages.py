"""What the plugin's quarantine page reads from the tables: counts per partition and the quarantined records."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "plugins"))
from tailfill_airflow.views import table_contents  # noqa: E402

from tailfill.dev.batches import commit_sample_batch  # noqa: E402
from tailfill.offsets import OffsetRange, TopicPartition  # noqa: E402
from tailfill.pipeline.handle import open_pipeline  # noqa: E402

pytestmark = pytest.mark.integration


def test_the_quarantine_page_counts_every_partition_and_lists_the_newest_bad_records(make_pipeline):
    cfg = make_pipeline()
    topic = cfg.source.topic
    commit_sample_batch(open_pipeline(cfg), "r1", 0, [OffsetRange(topic, p, 0, 100) for p in range(2)], bad_every=10)

    counts, records = table_contents(open_pipeline(cfg), limit=3)

    # Every 10th offset of 0-99 is malformed (0, 10, ..., 90): 10 quarantined, 90 rows per partition.
    assert counts == {TopicPartition(topic, p): {"committed": 100, "rows": 90, "quarantined": 10} for p in range(2)}
    assert [(r["kafka_offset"], r["run_id"]) for r in records] == [(90, "r1"), (90, "r1"), (80, "r1")]
    assert all(r["error"].startswith("malformed JSON") and r["kafka_value"] == b"{not json" for r in records)


def test_the_table_preview_shows_the_first_rows_with_every_column(make_pipeline):
    from tailfill_airflow.views import table_preview

    cfg = make_pipeline()
    assert table_preview(open_pipeline(cfg), 5) == ([], [])  # never made: nothing, and nothing made
    topic = cfg.source.topic
    commit_sample_batch(open_pipeline(cfg), "r1", 0, [OffsetRange(topic, 0, 0, 40)], bad_every=10)
    columns, rows = table_preview(open_pipeline(cfg), 5)
    assert {"event_id", "user_id", "kafka_topic", "kafka_partition", "kafka_offset"} <= set(columns), columns
    assert len(rows) == 5 and all(r["kafka_topic"] == topic and r["event_id"] for r in rows), rows
