"""A successful run is quiet: ``tailfill backfill`` and ``tailfill tail``, run as a user runs them, print their own
lines and no Python traceback, no exception, no Spark or JVM log line (on ``spark-submit`` and on this home's Spark
Connect server alike); all of that stays in the run's log file. ``tailfill stop-tail`` ends a live tail that is
behind (batches back to back) within its interval, in one line, and the next run goes on from its ledger."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml
from helpers import (
    assert_exactly_once,
    backfill,
    committed,
    high_watermarks,
    noise,
    set_dotted,
    tail,
    tail_spec,
    wait_until,
)

from tailfill.dev.sample import produce_sample
from tailfill.pipeline.load import load_pipeline

pytestmark = pytest.mark.integration

TAILFILL = str(Path(sys.executable).parent / "tailfill")


def run_cli(args: list[str], timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([TAILFILL, *args], capture_output=True, text=True, timeout=timeout)


def job_logs(home: Path, name: str, what: str) -> list[Path]:
    return sorted((home / "logs" / name).glob(f"*/tailfill-{what}.log"))


@pytest.fixture
def connect_down(home):
    """This home's local Spark Connect server, stopped after the test if one was started."""
    yield
    from tailfill.run.connect_server import connect_server_down

    connect_server_down(home)


@pytest.mark.parametrize("spark_mode", ["submit", "connect"])
def test_a_successful_backfill_and_tail_print_no_traceback_and_keep_sparks_log(spark, make_pipeline, home,
                                                                               connect_down, spark_mode):
    cfg = make_pipeline(backfill__slices=2, tail__trigger="processing_time", tail__trigger_interval_seconds=2)
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 4_000, 4, bad_every=500)
    done = run_cli(["backfill", str(cfg.path), "--spark", spark_mode])
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert noise(output) == [], output[-3000:]
    assert "backfill of itest: summary" in done.stdout, output[-3000:]

    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 2_000, 4, bad_every=500)
    ran = run_cli(["tail", str(cfg.path), "--stop-after", "15", "--spark", spark_mode])
    output = ran.stdout + ran.stderr
    assert ran.returncode == 0, output[-3000:]
    assert noise(output) == [], output[-3000:]
    assert "tail of itest: summary" in ran.stdout, output[-3000:]
    assert committed(cfg) == 6_000

    for what in ("backfill", "tail"):  # the whole output of each run is in its log, what Spark and the JVM said too
        [log] = job_logs(home, "itest", what)
        text = log.read_text()
        assert f"[itest {what}" in text and "TAILFILL_RESULT " in text, text[-3000:]
        jvm = (home / "logs" / "connect-server.log").read_text() if spark_mode == "connect" else text
        assert "Using incubator modules: jdk.incubator.vector" in jvm, jvm[-3000:]


STOP_WITHIN_S = 60.0  # the batch in flight (seconds), the job's and its JVM's end, a busy machine


@pytest.mark.solo
def test_stop_tail_ends_a_tail_that_is_behind_within_its_interval_in_one_line(spark, make_pipeline, home, tmp_path):
    # Every batch takes longer than the interval, so the next starts as soon as one ends: the tail is behind.
    cfg = make_pipeline(tail__trigger="processing_time", tail__trigger_interval_seconds=0.5,
                        tail__min_offsets_per_batch=500, tail__max_offsets_per_batch=500)
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 400, 4)
    tail_spec(cfg)  # records the cutover at 400: the live tail reads what comes next
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 10_000, 4)  # 20 batches: back to back
    out = tmp_path / f"{uuid.uuid4().hex}.out"
    with out.open("w") as sink:
        proc = subprocess.Popen([TAILFILL, "tail", str(cfg.path), "--spark", "submit"], stdout=sink,
                                stderr=subprocess.STDOUT, start_new_session=True, env=dict(os.environ))
    try:
        wait_until(lambda: committed(cfg) >= 1_000 or proc.poll() is not None, "the tail's second batch", 300)
        assert proc.poll() is None, out.read_text()[-3000:]
        asked = time.monotonic()
        stop = run_cli(["stop-tail", str(cfg.path)], timeout=120)
        assert stop.returncode == 0 and stop.stdout.strip() == \
            "asked the tail of itest to stop after its current batch", stop.stdout + stop.stderr
        code = proc.wait(timeout=180)
        took = time.monotonic() - asked
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    output = out.read_text()
    assert code == 0, output[-3000:]
    assert noise(output) == [], output[-3000:]
    stops = [line for line in output.splitlines() if "stopp" in line]
    assert stops == ["[itest tail] stopped between batches as asked (tailfill stop-tail)"], output[-3000:]
    print(f"the tail stopped {took:.1f}s after stop-tail was started")
    assert took < STOP_WITHIN_S, f"the tail took {took:.0f}s to stop:\n{output[-3000:]}"
    assert 1_000 <= committed(cfg) < 10_000, output[-3000:]  # stopped on the way
    path = Path(cfg.path)  # the next run, in larger batches, goes on from the ledger
    larger = set_dotted(yaml.safe_load(path.read_text()), {"tail__max_offsets_per_batch": 20_000})
    path.write_text(yaml.safe_dump(larger))
    cfg = load_pipeline(path)
    tail(spark, cfg)
    assert committed(cfg) == 10_000
    backfill(spark, cfg)  # the history before the cutover
    assert_exactly_once(cfg, high_watermarks(cfg))
