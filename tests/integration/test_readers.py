"""The table as its readers see it: DuckDB's ``iceberg_scan`` (the extension wheels, loaded offline) and
pyiceberg count, per Kafka partition, exactly the rows and quarantined rows the proof counted."""

from __future__ import annotations

from collections import Counter

import pytest
from helpers import offline_duckdb, tables_of

from tailfill.dev.batches import commit_sample_batch
from tailfill.offsets import OffsetRange
from tailfill.pipeline.handle import open_pipeline
from tailfill.proof.validate import validate

pytestmark = pytest.mark.integration

PARTITIONS = 3


def test_duckdb_counts_per_kafka_partition_equal_the_proofs(make_pipeline):
    cfg = make_pipeline(target__partition_by=["day(created_at)", "bucket(4, user_id)"])
    for b in range(6):
        commit_sample_batch(open_pipeline(cfg), "run-r", b, [OffsetRange(cfg.source.topic, p, b * 25, (b + 1) * 25 + p)
                                              for p in range(PARTITIONS)], bad_every=9)
    proof = validate(open_pipeline(cfg), all_runs=True)
    assert proof.success, proof.problems
    proven_rows = {p["partition"]: p["rows"] for p in proof.partitions}
    proven_bad = {p["partition"]: p["quarantined"] for p in proof.partitions}
    assert sum(proven_bad.values()) > 0 and len(proven_rows) == PARTITIONS

    data, quarantine = tables_of(cfg)
    con = offline_duckdb()
    counts = []
    for table in (data, quarantine):
        table.refresh()
        counts.append(dict(con.execute(
            "SELECT kafka_partition, count(*) FROM iceberg_scan(?) GROUP BY kafka_partition",
            [table.metadata_location]).fetchall()))
    assert counts == [proven_rows, proven_bad]

    by_pyiceberg = Counter(data.scan(selected_fields=("kafka_partition",)).to_arrow()["kafka_partition"].to_pylist())
    assert dict(by_pyiceberg) == proven_rows
