"""Looking without Python: ``tailfill pipelines``, ``show``, ``preview`` and ``broker topics [create]`` on a
real broker, Spark and catalog."""

from __future__ import annotations

import re
import uuid

import pytest
from helpers import backfill

from tailfill.cli import main
from tailfill.dev.sample import produce_sample
from tailfill.pipeline.handle import open_pipeline
from tailfill.proof.validate import validate

pytestmark = pytest.mark.integration


@pytest.fixture
def ingested(spark, make_pipeline, monkeypatch, tmp_path):
    """A pipeline (the only one in its folder) with 2,000 records backfilled, 4 of them quarantined, validated."""
    cfg = make_pipeline("look")
    monkeypatch.setenv("TAILFILL_PIPELINES", str(tmp_path))
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 2_000, 4, bad_every=500)
    backfill(spark, cfg)
    with open_pipeline(cfg) as pipeline:
        assert validate(pipeline, all_runs=True).success
    return cfg


def test_pipelines_lists_topic_table_position_lag_and_the_last_verdict(ingested, make_pipeline, capsys):
    never_cfg = make_pipeline("never_run", target__table="never_events")  # its topic was never made either
    assert main(["pipelines"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:5] == ["pipeline", "topic", "table", "committed", "lag"]
    look = next(line for line in lines if line.startswith("look "))
    assert re.search(rf"{ingested.source.topic}\s+tailfill\.demo_events\s+2,000\s+0\s+backfill-\S+, complete "
                     r"\(all runs, ", look), look
    at = next(i for i, line in enumerate(lines) if line.startswith("never_run "))
    assert re.search(r"tailfill\.never_events \(not made\)\s+\?\s+\?\s+no run yet, not validated yet", lines[at])
    assert f"topic {never_cfg.source.topic!r} not found" in lines[at + 1]  # why there is no position


def test_show_prints_settings_schema_and_spec(ingested, capsys):
    assert main(["show", str(ingested.path)]) == 0
    out = capsys.readouterr().out
    assert f"topic: {ingested.source.topic}" in out
    assert "max_offsets_per_batch:" in out  # defaults filled in
    assert re.search(r"table tailfill\.demo_events: 1,996 rows", out)
    assert re.search(r"quarantine table tailfill\.\S+: 4 rows", out)
    for column in ("event_id: optional string", "user_id", "created_at", "kafka_offset"):
        assert column in out
    assert "partition spec:" in out


def test_preview_shows_rows_filtered_and_limited(ingested, capsys):
    assert main(["preview", str(ingested.path), "--limit", "3", "--where", "kind = 'view' and user_id >= 0",
                 "--columns", "event_id,kind,kafka_offset"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["event_id", "kind", "kafka_offset"]
    rows = lines[2:-1]
    assert len(rows) == 3 and all(r.split()[1] == "view" for r in rows), rows
    assert lines[-1] == "(3 rows)"

    assert main(["preview", str(ingested.path), "--quarantine"]) == 0
    out = capsys.readouterr().out
    assert out.strip().endswith("(4 rows)")
    assert "kafka_offset" in out and "error" in out

    assert main(["preview", str(ingested.path), "--where", "no_such_column = 1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --where 'no_such_column = 1' on tailfill.demo_events:"), err


def test_broker_topics_lists_and_creates(broker, capsys):
    name = f"made-{uuid.uuid4().hex[:8]}"
    args = ["--bootstrap-servers", broker.bootstrap_servers]
    assert main(["broker", "topics", "create", name, "--partitions", "3", *args]) == 0
    assert f"topic {name} created with 3 partitions" in capsys.readouterr().out
    assert main(["broker", "topics", "create", name, *args]) == 0
    assert f"topic {name} exists already" in capsys.readouterr().out
    produce_sample(broker.bootstrap_servers, name, 30, 3)
    assert main(["broker", "topics", *args]) == 0
    out = capsys.readouterr().out
    assert re.search(rf"^  {name}\s+3 partitions\s+30 records$", out, re.M), out
