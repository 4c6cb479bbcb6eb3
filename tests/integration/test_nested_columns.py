"""Nested columns in ``partition_by`` (``bucket(8, repo.id)``, ``day(payload.pushed_at)``) and in ``expectations``,
through a real backfill, the table's spec, its files and the proof."""

from __future__ import annotations

import json

import pytest
from helpers import (
    assert_exactly_once,
    assert_one_partition_value_per_file,
    backfill,
    github_event,
    high_watermarks,
    tables_of,
)

from tailfill.dev.sample import _SampleProducer
from tailfill.lake.data_files import spec_terms
from tailfill.pipeline.handle import open_pipeline
from tailfill.proof.validate import validate

pytestmark = pytest.mark.integration

FIELDS = [{"name": "id", "type": "string", "required": True},
          {"name": "repo", "type": "struct<id: long, name: string>"},
          {"name": "actor", "type": "struct<id: long, login: string>"},
          {"name": "payload", "type": "struct<size: long, pushed_at: timestamp>"},
          {"name": "created_at", "type": "timestamp"}]


def test_nested_partition_terms_and_expectations(spark, make_pipeline):
    spec = ["bucket(8, repo.id)", "day(payload.pushed_at)"]
    cfg = make_pipeline(format={"type": "json", "unknown_fields": "ignore", "fields": FIELDS},
                        target__partition_by=spec,
                        expectations=[{"column": "repo.id", "not_null": True, "min": 0, "max": 12},
                                      {"column": "actor.login", "not_null": True}])
    out = _SampleProducer(cfg.source.bootstrap_servers, cfg.source.topic, 4)
    for i in range(2_000):
        out.send(i, json.dumps(github_event(i)).encode())
    out.finish()

    backfill(spark, cfg)
    rows, bad = assert_exactly_once(cfg, high_watermarks(cfg))
    assert (len(rows), len(bad)) == (2_000, 0)
    data, _ = tables_of(cfg)
    assert spec_terms(data.spec(), data.schema()) == spec
    assert [f.name for f in data.spec().fields] == ["repo_id_bucket_8", "payload_pushed_at_day"]
    assert assert_one_partition_value_per_file(cfg, data) > 1
    with open_pipeline(cfg) as pipeline:
        result = validate(pipeline, all_runs=True)
    assert result.success, result.asstr()

    strict = make_pipeline("strict", format={"type": "json", "unknown_fields": "ignore", "fields": FIELDS},
                           source__topic=cfg.source.topic, target__table="strict_events",
                           expectations=[{"column": "repo.id", "max": 5}])
    backfill(spark, strict)
    with open_pipeline(strict) as pipeline:
        result = validate(pipeline, all_runs=True)
    assert not result.success
    assert "data expectation failed: repo.id" in result.asstr()
