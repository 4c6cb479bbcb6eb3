"""The embedded broker of ``tailfill broker up`` (Apache Kafka): topics and port kept across ``down``/``up``, a
second ``up`` that finds it running, a clean start with ``tailfill reset``, the demo twice in one home, and an
unreachable broker said in one line."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from helpers import assert_exactly_once, backfill, high_watermarks, noise

from tailfill.cli import main
from tailfill.dev.broker import broker_down, broker_up
from tailfill.dev.sample import produce_sample
from tailfill.errors import BrokerError
from tailfill.pipeline.handle import open_pipeline
from tailfill.plumbing.detached import alive
from tailfill.proof.reports import read_latest
from tailfill.proof.validate import validate

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
TAILFILL = str(Path(sys.executable).parent / "tailfill")


def values(bootstrap: str, topic: str, partitions: int, expected: int) -> list[bytes | None]:
    """Every value of ``topic`` (``expected`` of them, read from offset 0), sorted."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "t", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[bytes | None] = []
    try:
        for _ in range(240):
            if len(out) >= expected:
                break
            out += [m.value() for m in consumer.consume(10_000, 0.5) if m.error() is None]
    finally:
        consumer.close()
    return sorted(out, key=lambda v: b"" if v is None else b"+" + v)  # a tombstone (None) first


def processes(home: Path) -> list[int]:
    """Pids the broker's state file of ``home`` names that are still alive."""
    files = [home / "broker.json"]
    return [s["pid"] for f in files if f.exists() for s in [json.loads(f.read_text())] if alive(s["pid"])]


def test_the_broker_keeps_its_topics_and_port_across_down_and_up(tmp_path):
    home = tmp_path / "home"
    try:
        first = broker_up(home)
        assert broker_up(home) == first  # a second `up` finds it running
        produce_sample(first["bootstrap_servers"], "kept", 5_000, 4, bad_every=1_000)
        before = values(first["bootstrap_servers"], "kept", 4, 5_000)
        assert len(before) == 5_000
        assert broker_down(home)
        assert processes(home) == [] and not alive(first["pid"]), "broker down left the broker running"
        assert not broker_down(home)  # nothing left to stop

        again = broker_up(home)
        assert again["port"] == first["port"] and again["pid"] != first["pid"]
        assert values(again["bootstrap_servers"], "kept", 4, 5_000) == before
    finally:
        broker_down(home)
    assert processes(home) == []


def test_a_broker_killed_outright_starts_again_with_its_topics(tmp_path):
    home = tmp_path / "home"
    try:
        first = broker_up(home)
        produce_sample(first["bootstrap_servers"], "crashed", 2_000, 2)
        os.kill(first["pid"], signal.SIGKILL)
        for _ in range(100):
            if not alive(first["pid"]):
                break
            time.sleep(0.05)
        again = broker_up(home)  # the state file names a dead process: a new broker on the same log
        assert again["pid"] != first["pid"] and again["port"] == first["port"]
        assert len(values(again["bootstrap_servers"], "crashed", 2, 2_000)) == 2_000
    finally:
        broker_down(home)
    assert processes(home) == []


def test_a_kept_port_in_use_is_one_clear_error(tmp_path):
    home = tmp_path / "home"
    port = broker_up(home)["port"]
    broker_down(home)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        with pytest.raises(BrokerError, match=rf"127\.0\.0\.1:{port} .*another process listens there "
                                              r"\(fix: .*TAILFILL_BROKER_PORT\)"):
            broker_up(home)
    assert processes(home) == []


def test_reset_asks_first_then_gives_a_clean_start(spark, make_pipeline, monkeypatch, capsys):
    cfg = make_pipeline(backfill__max_offsets_per_batch=5_000)
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 4_000, 4, bad_every=500)
    backfill(spark, cfg)
    assert_exactly_once(cfg, high_watermarks(cfg))
    with open_pipeline(cfg) as pipeline:
        assert validate(pipeline, all_runs=True).success  # validation results and Data Docs to remove too

    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    assert main(["reset", str(cfg.path)]) == 1  # nobody to ask: nothing removed
    assert "no terminal to ask (fix: --yes)" in capsys.readouterr().out
    with open_pipeline(cfg) as pipeline:
        assert pipeline.open_tables() is not None

    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    monkeypatch.setattr("builtins.input", lambda _prompt: "not-the-name")
    assert main(["reset", str(cfg.path)]) == 1
    with open_pipeline(cfg) as pipeline:
        assert pipeline.open_tables() is not None

    monkeypatch.setattr("builtins.input", lambda _prompt: cfg.name)
    assert main(["reset", str(cfg.path)]) == 0
    out = capsys.readouterr().out
    assert f"table tailfill.{cfg.target.table} (its rows and files)" in out
    assert f"_validation/{cfg.name}" in out
    with open_pipeline(cfg) as pipeline:
        assert pipeline.open_tables() is None
        assert pipeline.state.list("runs") == []
        assert read_latest(pipeline) is None
    assert not (Path(cfg.checkpoint_location) / cfg.name).exists()
    assert main(["reset", str(cfg.path), "--yes"]) == 0
    assert "nothing to reset" in capsys.readouterr().out

    backfill(spark, cfg)  # from the topic's beginning again: every offset once, the proof passes
    assert_exactly_once(cfg, high_watermarks(cfg))
    with open_pipeline(cfg) as pipeline:
        assert validate(pipeline, all_runs=True).success


def test_an_unreachable_broker_is_one_line(tmp_path):
    spec = (REPO / "pipelines" / "demo.yaml").read_text().replace("${TAILFILL_BOOTSTRAP_SERVERS:-embedded}",
                                                                  "127.0.0.1:1")
    (tmp_path / "pipelines").mkdir()
    (tmp_path / "pipelines" / "demo.yaml").write_text(spec)
    env = {**os.environ, "TAILFILL_HOME": str(tmp_path / "home"), "TAILFILL_PIPELINES": str(tmp_path / "pipelines")}
    for command in (["status", "demo"], ["backfill", "demo"]):
        done = subprocess.run([TAILFILL, *command], env=env, capture_output=True, text=True, timeout=300)
        lines = (done.stdout + done.stderr).splitlines()
        assert done.returncode == 2
        assert len(lines) == 1 and re.match(r"error: cannot reach Kafka at 127\.0\.0\.1:1 ", lines[0]), lines[:5]
        assert "accepted no connection within 5s" in lines[0]  # refused: said without waiting out the metadata timeout


def test_the_demo_runs_twice_in_one_home(tmp_path):
    env = {**os.environ, "TAILFILL_HOME": str(tmp_path / "home"), "TAILFILL_PIPELINES": str(REPO / "pipelines")}
    env.pop("TAILFILL_BROKER_PORT", None)
    outputs = []
    try:
        for _ in range(2):
            done = subprocess.run([TAILFILL, "demo", "--count", "3000", "--tail-count", "1000", "--bad-every", "500"],
                                  env=env, capture_output=True, text=True, timeout=1200, cwd=tmp_path)
            outputs.append(done.stdout)
            assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
            assert noise(done.stdout + done.stderr) == [], (done.stdout + done.stderr)[-3000:]  # a quiet success
            for service in ("broker", "connect-server"):  # as `make demo` ends
                subprocess.run([TAILFILL, service, "down"], env=env, check=True, timeout=120)
    finally:
        for service in ("broker", "connect-server"):
            subprocess.run([TAILFILL, service, "down"], env=env, timeout=120)
    assert "COMPLETE (4,000 offsets checked" in outputs[0]
    assert "COMPLETE (8,000 offsets checked" in outputs[1]  # the first demo's events were kept
    assert processes(tmp_path / "home") == []
