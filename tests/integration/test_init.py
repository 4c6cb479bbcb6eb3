"""``tailfill init``: a pipeline YAML from a sampled nested JSON topic, or from an Avro subject, that backfills and
validates as written (real broker, registry, Spark, catalog)."""

from __future__ import annotations

import json
import uuid

import pytest
from helpers import assert_exactly_once, backfill, github_event, high_watermarks

from tailfill.cli import main
from tailfill.dev.format_samples import produce_format_sample
from tailfill.dev.registry import DevRegistry
from tailfill.dev.sample import _SampleProducer
from tailfill.pipeline.handle import open_pipeline
from tailfill.pipeline.load import load_pipeline
from tailfill.proof.validate import validate
from tailfill.source.topics import ensure_topic

pytestmark = pytest.mark.integration


@pytest.fixture
def pipelines(tmp_path, monkeypatch):
    folder = tmp_path / "pipelines"
    monkeypatch.setenv("TAILFILL_PIPELINES", str(folder))
    return folder


def test_init_samples_a_nested_json_topic_and_the_yaml_backfills_and_validates(spark, broker, home, pipelines, capsys):
    topic = f"gh-{uuid.uuid4().hex[:8]}"
    out = _SampleProducer(broker.bootstrap_servers, topic, 3)
    for i in range(3_000):
        out.send(i, json.dumps(github_event(i)).encode())
    out.finish()

    assert main(["init", "gh", "--topic", topic, "--bootstrap-servers", broker.bootstrap_servers]) == 0
    assert f"wrote {pipelines / 'gh.yaml'}" in capsys.readouterr().out
    cfg = load_pipeline(pipelines / "gh.yaml")
    types = {f.name: f.type for f in cfg.format.fields}
    assert types == {
        "id": "string", "type": "string", "public": "boolean",
        "actor": "struct<id: long, login: string>",  # display_login: only nulls, left out (a note says so)
        "repo": "struct<id: long, name: string>",
        "payload": "struct<size: long, pushed_at: timestamp, commits: list<struct<sha: string, message: string, "
                   "distinct: boolean>>>",
        "created_at": "timestamp", "score": "double", "org": "struct<id: long, login: string>"}
    assert "actor.display_login: only nulls were seen: not declared" in (pipelines / "gh.yaml").read_text()
    assert cfg.source.partitions == 3 and cfg.target.partition_by == ("day(created_at)",)
    assert cfg.tail.trigger == "processing_time"  # `tailfill tail` on what init wrote tails live
    assert cfg.target.table == topic.replace("-", "_")
    assert main(["init", "gh", "--topic", topic, "--bootstrap-servers", broker.bootstrap_servers]) == 2
    assert "exists already (fix: another name, or --force" in capsys.readouterr().err

    backfill(spark, cfg)  # as written
    rows, bad = assert_exactly_once(cfg, high_watermarks(cfg))
    assert (len(rows), len(bad)) == (3_000, 0)
    with open_pipeline(cfg) as pipeline:
        assert validate(pipeline, all_runs=True).success
        table = pipeline.open_tables().data
        first = next(r for r in table.scan(row_filter="id = '10004'").to_arrow().to_pylist())
    assert first["payload"]["commits"][0]["message"] == "change 4" and first["actor"]["login"] == "user4"
    assert first["created_at"].isoformat() == "2026-01-02T04:00:00+00:00"


def test_init_reads_an_avro_subject_and_the_yaml_backfills_and_validates(spark, broker, home, pipelines, capsys):
    topic = f"orders-{uuid.uuid4().hex[:8]}"
    with DevRegistry() as registry:
        produce_format_sample(broker.bootstrap_servers, topic, registry.url, "avro", 1_000, 2)
        assert main(["init", "orders", "--topic", topic, "--format", "avro", "--bootstrap-servers",
                     broker.bootstrap_servers, "--registry-url", registry.url]) == 0
        text = (pipelines / "orders.yaml").read_text()
        assert "#   created_at: timestamp[us, tz=UTC]" in text and "#   device: struct<" in text
        cfg = load_pipeline(pipelines / "orders.yaml")
        assert cfg.format.schema_registry.subject == f"{topic}-value"
        assert cfg.target.partition_by == ("day(created_at)",) and cfg.source.partitions == 2

        backfill(spark, cfg)
        rows, bad = assert_exactly_once(cfg, high_watermarks(cfg))
        assert (len(rows), len(bad)) == (1_000, 0)
        with open_pipeline(cfg) as pipeline:
            assert validate(pipeline, all_runs=True).success

        bare = f"bare-{uuid.uuid4().hex[:8]}"  # a topic whose value subject was never registered
        ensure_topic(broker.bootstrap_servers, bare, 1)
        capsys.readouterr()
        assert main(["init", "missing", "--topic", bare, "--format", "avro", "--bootstrap-servers",
                     broker.bootstrap_servers, "--registry-url", registry.url]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"{bare}-value" in err[0], err
        assert not (pipelines / "missing.yaml").exists()
