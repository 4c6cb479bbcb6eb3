"""JSON pipelines whose ``format.fields`` change: nested types, and a field added between runs.

A field added to ``format.fields`` becomes a column before the first batch that carries it commits (not
pyiceberg's ``PyArrow table contains more columns`` inside Spark).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from helpers import assert_exactly_once, backfill, high_watermarks, tables_of, tail

from tailfill.dev.sample import _SampleProducer
from tailfill.pipeline.handle import open_pipeline
from tailfill.pipeline.load import load_pipeline
from tailfill.proof.validate import validate

pytestmark = pytest.mark.integration

FIELDS = [{"name": "event_id", "type": "string", "required": True},
          {"name": "device", "type": "struct<os: string, version: long>"},
          {"name": "tags", "type": "list<string>"},
          {"name": "scores", "type": "map<string, double>"},
          {"name": "price", "type": "decimal(12, 2)"},
          {"name": "day", "type": "date"}]


def send(cfg, docs: list[dict], first: int) -> None:
    out = _SampleProducer(cfg.source.bootstrap_servers, cfg.source.topic, 2)
    for i, doc in enumerate(docs, first):
        out.send(i, json.dumps(doc).encode())
    out.finish()


def event(i: int, **more) -> dict:
    return {"event_id": f"e{i}", "device": {"os": "ios", "version": i}, "tags": [f"t{i}"], "scores": {"q": i / 2},
            "price": f"{i}.25", "day": "2026-03-01", **more}


def test_nested_json_fields_then_a_new_field_becomes_a_column(spark, make_pipeline):
    cfg = make_pipeline(format={"type": "json", "fields": FIELDS}, expectations=[], source__partitions=2)
    send(cfg, [event(i) for i in range(300)] + [{"event_id": "bad", "tags": "x"}], 0)
    backfill(spark, cfg)
    data = tables_of(cfg).data
    row = next(r for r in data.scan().to_arrow().drop(["kafka_value"]).to_pylist() if r["event_id"] == "e3")
    assert row["device"] == {"os": "ios", "version": 3} and row["tags"] == ["t3"] and str(row["price"]) == "3.25"
    ids = {f.name: f.field_id for f in data.schema().fields}

    path = Path(cfg.path)
    spec = yaml.safe_load(path.read_text())
    spec["format"]["fields"].append({"name": "country", "type": "string"})
    path.write_text(yaml.safe_dump(spec))
    cfg = load_pipeline(path)
    send(cfg, [event(i, country="nl") for i in range(301, 501)], 301)
    tail(spark, cfg)

    data.refresh()
    assert {f.name: f.field_id for f in data.schema().fields if f.name in ids} == ids
    countries = {r["event_id"]: r["country"] for r in data.scan(selected_fields=("event_id", "country")).to_arrow()
                 .to_pylist()}
    assert all(countries[f"e{i}"] is None for i in range(300))
    assert all(countries[f"e{i}"] == "nl" for i in range(301, 501))
    _, bad = assert_exactly_once(cfg, high_watermarks(cfg))
    assert len(bad) == 1
    assert validate(open_pipeline(cfg), all_runs=True).success
