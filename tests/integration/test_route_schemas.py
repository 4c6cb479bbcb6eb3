"""Five routed topics with fields of their own (shaped like nycflights13's tables) into a table each.

On the real broker: ``tailfill init --topic-pattern`` samples each topic and writes one pipeline with a route per
table, no ``unknown_fields: evolve``; the planes route, made keyed by hand, applies its tombstones; every table's
columns are in the order its records hold them; every offset lands once, and ``validate --all`` passes. The tables
of one run commit on their own: one held at its commit holds no other.
"""

from __future__ import annotations

import json
import os
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from helpers import assert_each_offset_once, backfill, committed, finished, in_background, tail, wait_until

from tailfill.cli import main
from tailfill.dev.sample import _SampleProducer
from tailfill.pipeline.handle import open_pipeline
from tailfill.pipeline.load import load_pipeline
from tailfill.run.contract import together_argv
from tailfill.run.planner import backfill_spec
from tailfill.run.routed import routes_for
from tailfill.run.spark_job import main as job_main
from tailfill.values.schema import CHANGE_COLUMNS, RESERVED_PREFIX

pytestmark = pytest.mark.integration

T0 = datetime(2013, 1, 1, 5, tzinfo=UTC)
CARRIERS = ["9E", "AA", "AS", "B6", "DL", "EV", "F9", "FL", "HA", "MQ", "OO", "UA", "US", "VX", "WN", "YV"]


def flight(i: int) -> dict:
    return {"year": 2013, "month": 1 + i % 12, "day": 1 + i % 28, "dep_time": 500 + i % 1800,
            "carrier": CARRIERS[i % 16], "flight": 100 + i, "tailnum": f"N{i % 40:03d}", "origin": "JFK",
            "dest": "LAX", "air_time": 300.5 + i % 7, "time_hour": (T0 + timedelta(hours=i)).isoformat()}


def airline(i: int) -> dict:
    return {"carrier": CARRIERS[i], "name": f"Airline {CARRIERS[i]} Inc."}


def airport(i: int) -> dict:
    return {"faa": f"A{i:02d}", "name": f"Airport {i}", "lat": 40.5 + i / 10, "lon": -73.5 - i / 10, "alt": 10 + i,
            "tz": -5, "dst": "A"}


def plane(i: int, year: int = 2000) -> dict:
    return {"tailnum": f"N{i:03d}", "year": year + i % 10, "type": "Fixed wing multi engine",
            "manufacturer": "EMBRAER", "model": "EMB-145XR", "engines": 2, "seats": 55}


def weather(i: int) -> dict:
    return {"origin": "EWR", "year": 2013, "month": 1, "day": 1 + i // 24, "hour": i % 24, "temp": 39.02 + i % 5,
            "humid": 59.37, "wind_speed": 10.35, "precip": 0.0, "time_hour": (T0 + timedelta(hours=i)).isoformat()}


SHAPES = {"flights": flight, "airlines": airline, "airports": airport, "planes": plane, "weather": weather}


def produce(bootstrap: str, topic: str, rows: list[tuple[bytes | None, dict | None]], partitions: int) -> None:
    """``rows`` (key, value; a None value is a tombstone) to ``topic``, a key always to the same partition."""
    out = _SampleProducer(bootstrap, topic, partitions)
    for i, (key, value) in enumerate(rows):
        out.send(i if key is None else 0, None if value is None else json.dumps(value).encode(), key)
    out.finish()


def test_five_routed_topics_land_with_their_own_columns_and_the_keyed_one_applies_its_tombstones(
        spark, broker, home, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TAILFILL_PIPELINES", str(tmp_path / "pipelines"))
    bootstrap, p = broker.bootstrap_servers, f"nyc{uuid.uuid4().hex[:8]}"
    counts = {"flights": 300, "airlines": 16, "airports": 30, "weather": 72}
    for name, count in counts.items():
        produce(bootstrap, f"{p}.{name}", [(None, SHAPES[name](i)) for i in range(count)], 2)
    produce(bootstrap, f"{p}.planes", [(f"N{i:03d}".encode(), plane(i)) for i in range(40)], 1)

    assert main(["init", "nyc", "--topic-pattern", rf"{p}\..*", "--bootstrap-servers", bootstrap]) == 0
    path = tmp_path / "pipelines" / "nyc.yaml"
    text = path.read_text()
    assert "evolve" not in text.replace("unknown_fields: ignore", "") and "table: '{topic.1}'" in text
    data = yaml.safe_load(text)
    assert sorted(data["routes"]) == sorted(SHAPES)
    assert data["routes"]["flights"]["partition_by"] == ["day(time_hour)"]
    data["routes"]["planes"].update(mode="upsert", key=["tailnum"])  # a keyed table among appending ones
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    cfg = load_pipeline(path)

    routes, _ = routes_for(cfg, "backfill")
    assert [r.table for r in routes] == sorted(SHAPES)
    for route in routes:
        backfill(spark, route.cfg)

    # later: more flights, planes updated and deleted (tombstones, their key only)
    produce(bootstrap, f"{p}.flights", [(None, flight(i)) for i in range(300, 350)], 2)
    changes = [(f"N{i:03d}".encode(), plane(i, year=2010)) for i in range(5)]
    changes += [(f"N{i:03d}".encode(), None) for i in range(30, 40)]
    produce(bootstrap, f"{p}.planes", changes, 1)
    routes, _ = routes_for(cfg, "tail")
    for route in routes:
        tail(spark, route.cfg)

    for route in routes:
        with open_pipeline(route.cfg) as pipeline:
            tables = pipeline.open_tables()
            columns = [n for n in tables.data.schema().column_names
                       if not n.startswith(RESERVED_PREFIX) and n not in CHANGE_COLUMNS.names]
            assert columns == list(SHAPES[route.table](1)), route.table  # as the records hold them, not by name
            assert tables.quarantine.scan().to_arrow().num_rows == 0, route.table  # the tombstones too: applied
        landed = assert_each_offset_once(route.cfg, list(route.topics))
        assert landed == {f"{p}.{route.table}": {**counts, "flights": 350, "planes": 55}[route.table]}

    planes = next(r.cfg for r in routes if r.table == "planes")
    assert planes.target.keyed and not next(r.cfg for r in routes if r.table == "flights").target.keyed
    with open_pipeline(planes) as pipeline:
        state = pipeline.open_state_table().scan(selected_fields=("tailnum", "year")).to_arrow().to_pylist()
    assert {r["tailnum"]: r["year"] for r in state} == {
        f"N{i:03d}": (2010 if i < 5 else 2000) + i % 10 for i in range(30)}

    capsys.readouterr()
    assert main(["validate", str(path), "--all"]) == 0
    assert "validate of nyc: 5 of 5 table(s) ok" in capsys.readouterr().out


def test_a_table_held_at_its_commit_holds_no_other_table_of_the_run(spark, broker, home, tmp_path, monkeypatch):
    monkeypatch.setenv("TAILFILL_PIPELINES", str(tmp_path / "pipelines"))
    bootstrap, p = broker.bootstrap_servers, f"hold{uuid.uuid4().hex[:8]}"
    counts = {"flights": 400, "airlines": 16, "airports": 30}
    for name, count in counts.items():
        produce(bootstrap, f"{p}.{name}", [(None, SHAPES[name](i)) for i in range(count)], 2)
    assert main(["init", "hold", "--topic-pattern", rf"{p}\..*", "--bootstrap-servers", bootstrap]) == 0
    cfg = load_pipeline(tmp_path / "pipelines" / "hold.yaml")
    routes, _ = routes_for(cfg, "backfill")
    specs = []
    for route in routes:
        with open_pipeline(route.cfg) as pipeline:
            specs.append(backfill_spec(pipeline, slices=1))
    flights = next(r.cfg for r in routes if r.table == "flights")
    faults, held = Path(os.environ["TAILFILL_FAULT_DIR"]), f"before-commit@{flights.name}"
    (faults / f"pause-{held}").touch()
    try:
        job = in_background(job_main, together_argv(specs), spark)  # the tables' jobs together, as spark-submit
        wait_until((faults / held).exists, "the flights table's batch, prepared, held before its commit")
        for route in routes:
            if route.table != "flights":
                wait_until(lambda r=route: committed(r.cfg) == counts[r.table], f"table {route.table}'s commits")
        assert committed(flights) == 0  # held all along
    finally:
        (faults / f"pause-{held}").unlink(missing_ok=True)
        (faults / f"{held}.release").touch()
    assert finished(*job) == 0
    for route in routes:
        assert assert_each_offset_once(route.cfg, list(route.topics)) == {f"{p}.{route.table}": counts[route.table]}
