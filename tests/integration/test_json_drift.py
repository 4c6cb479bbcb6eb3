"""JSON fields the producers add without telling: counted and named (ignore), then columns (evolve).

Records 200-299 carry an undeclared ``org`` object (and 250-299 a ``device.model`` inside the declared struct);
with ``unknown_fields: ignore`` the backfill's result and ``tailfill status`` name both with their counts and first
offsets. Switched to ``evolve``, the next run adds ``org`` as a column, fills it for the records that carry it, and
sends the one record whose ``org`` is a string to the quarantine naming both types; its batch fails once after the
table changed and before its commit, and the replay commits every offset exactly once.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from helpers import assert_exactly_once, backfill, besides_infrastructure, high_watermarks, tables_of, tail

from tailfill import cli
from tailfill.dev.sample import _SampleProducer
from tailfill.pipeline.handle import open_pipeline
from tailfill.pipeline.load import load_pipeline
from tailfill.proof.validate import validate
from tailfill.run.contract import JobResult

pytestmark = pytest.mark.integration

FIELDS = [{"name": "event_id", "type": "string", "required": True},
          {"name": "device", "type": "struct<os: string, version: long>"}]


def send(cfg, docs: dict[int, dict]) -> None:
    """Record ``i`` to partition ``i % 2`` (so, on a new topic, at offset ``i // 2``)."""
    out = _SampleProducer(cfg.source.bootstrap_servers, cfg.source.topic, 2)
    for i, doc in docs.items():
        out.send(i, json.dumps(doc).encode())
    out.finish()


def event(i: int) -> dict:
    doc: dict = {"event_id": f"e{i}", "device": {"os": "ios", "version": i}}
    if i >= 200:
        doc["org"] = {"login": f"o{i}", "id": i}
    if 250 <= i < 300:
        doc["device"]["model"] = "x1"
    return doc


def test_undeclared_fields_are_counted_then_evolve_into_a_column(spark, make_pipeline, capsys, arm_fault):
    cfg = make_pipeline(format={"type": "json", "fields": FIELDS, "unknown_fields": "ignore"}, expectations=[],
                        source__partitions=2)
    send(cfg, {i: event(i) for i in range(300)})
    results = backfill(spark, cfg)
    unknown = {path: seen for r in results for path, seen in r.unknown_fields.items()}
    assert unknown == {"org": [100, 0, 100], "device.model": [50, 0, 125]}  # i=200 → 0:100, i=250 → 0:125
    assert "fields not declared: org (100 records, first at 0:100), device.model (50 records, first at 0:125)" \
        in JobResult(results).asstr()
    assert "org" not in tables_of(cfg).data.schema().column_names  # ignored: the table is as declared
    capsys.readouterr()
    cli.main(["status", cfg.path])
    status = capsys.readouterr().out
    assert f"fields not declared, latest run {results[0].run_id}: org (100 records, first at 0:100), " \
           "device.model (50 records, first at 0:125)" in status

    path = Path(cfg.path)
    spec = yaml.safe_load(path.read_text())
    spec["format"]["unknown_fields"] = "evolve"
    path.write_text(yaml.safe_dump(spec))
    cfg = load_pipeline(path)
    send(cfg, {**{i: event(i) for i in range(300, 400)}, 400: {"event_id": "e400", "org": "acme"}})
    arm_fault("before-commit", 1)  # the batch evolves the table, then fails: its replay finds the column there
    results = tail(spark, cfg)
    assert len(besides_infrastructure(results[0].causes)) == 1 and results[0].unknown_fields == {"org": [101, 0, 150]}

    data = tables_of(cfg).data
    data.refresh()
    org = data.schema().find_field("org").field_type
    assert [(f.name, str(f.field_type), f.required) for f in org.fields] == [("login", "string", False),
                                                                           ("id", "long", False)]
    orgs = {r["event_id"]: r["org"] for r in data.scan(selected_fields=("event_id", "org")).to_arrow().to_pylist()}
    assert all(orgs[f"e{i}"] == {"login": f"o{i}", "id": i} for i in range(300, 400))
    assert all(orgs[f"e{i}"] is None for i in range(300))  # ingested before the column was there
    _, bad = assert_exactly_once(cfg, high_watermarks(cfg))
    assert sum(bad.values()) == 1
    reasons = tables_of(cfg).quarantine.scan(selected_fields=("error",)).to_arrow().column("error").to_pylist()
    assert reasons == ["field 'org': the table has struct<login: string, id: long>, this record has string"]
    assert validate(open_pipeline(cfg), all_runs=True).success
