"""The pipeline on an Iceberg REST catalog and a real object store: SeaweedFS (``weed mini``), end to end.

Backfill and tail through Spark into a table the REST catalog holds in its table bucket, then
``validate --all``, ``maintain`` (compaction, expiry with the audit kept, orphans) and ``status``
through the CLI, with the catalog credential given only by an environment variable's name.
"""

from __future__ import annotations

import os

import pytest
from helpers import assert_exactly_once, backfill, high_watermarks, tables_of, tail

from tailfill import cli
from tailfill.dev.sample import produce_sample

pytestmark = pytest.mark.integration

PARTITIONS = 4


def test_backfill_tail_validate_maintain_status_on_seaweedfs_rest_and_s3(spark, make_pipeline, seaweedfs, capfd):
    cfg = make_pipeline(rest=seaweedfs, target__partition_by=["hour(kafka_timestamp)"],
                        maintenance__target_file_bytes=1 << 20)
    assert cfg.target.catalog.type == "rest" and cfg.target.s3.endpoint == seaweedfs.s3_endpoint
    bs, topic = cfg.source.bootstrap_servers, cfg.source.topic
    produce_sample(bs, topic, 4_000, PARTITIONS, bad_every=97)
    backfill(spark, cfg, slices=2)
    produce_sample(bs, topic, 1_000, PARTITIONS, bad_every=97)
    tail(spark, cfg)
    high = high_watermarks(cfg)
    assert_exactly_once(cfg, high)

    data, _ = tables_of(cfg)
    assert data.location().startswith("s3://warehouse/")  # where the REST catalog put it: its table bucket
    files_before = len(list(data.scan().plan_files()))
    assert cli.main(["validate", cfg.path, "--all"]) == 0
    assert cli.main(["maintain", cfg.path, "--expire-older-than", "0s", "--keep-last", "1"]) == 0
    data.refresh()
    assert len(data.snapshots()) == 1 and len(list(data.scan().plan_files())) < files_before
    assert cli.main(["validate", cfg.path, "--all"]) == 0  # every offset proven after upkeep
    assert cli.main(["status", cfg.path]) == 0
    assert_exactly_once(cfg, high)

    out, err = capfd.readouterr()
    assert "COMPLETE" in out and f"{sum(high.values())}" in out.replace(",", "")
    assert os.environ["TAILFILL_TEST_REST_CREDENTIAL"] not in out + err
