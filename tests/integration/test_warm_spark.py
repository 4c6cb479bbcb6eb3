"""The warm Spark server: jobs run on one long-lived driver, exactly once, and stop with their caller.

One server per module (a JVM of its own, as a ``spark-submit`` would be), on a free loopback port,
stopped at the end. Runs are told apart by their run ids; every offset must land exactly once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from helpers import (
    assert_exactly_once,
    high_watermarks,
    on_runner,
    one_batch_backfill,
    read_before_commit,
    tables_of,
    wait_until,
)

from tailfill.dev.sample import produce_sample
from tailfill.lake.ledger import read_ledger
from tailfill.offsets import total
from tailfill.pipeline.handle import open_pipeline
from tailfill.run import runtime, warm_spark
from tailfill.run.contract import new_run_id
from tailfill.run.planner import BackfillRequest, TailRequest, plan_backfill_lanes, plan_tail
from tailfill.run.runners import Outcome, WarmServerRunner

pytestmark = pytest.mark.integration

TAILFILL = str(Path(sys.executable).parent / "tailfill")


def warm(spec, env, on_line, home) -> Outcome:
    """Run ``spec`` on the warm Spark server of ``home``, as a caller with ``env`` asks."""
    return WarmServerRunner(env, home=home).submit(spec, on_line).wait()


def what_happened(lines: list[str], home: Path) -> str:
    """The job's last lines and the end of the server's log (Spark's own account of a failed task)."""
    log = home / "logs" / "spark-server.log"
    return "\n".join(lines[-30:]) + "\n--- the server's log:\n" + (log.read_text()[-6000:] if log.exists() else "")


@pytest.fixture(scope="module")
def server_home(tmp_path_factory):
    home = tmp_path_factory.mktemp("warm") / "home"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TAILFILL_HOME", str(home))
        runtime.code_archive()  # a home where a spark-submit ran has the code archive: the server must not import it
        status = warm_spark.spark_server_up(home)
        try:
            yield home, status
        finally:
            assert warm_spark.spark_server_down(home), "the warm Spark server was not running at the end"


@pytest.fixture
def warm_pipeline(server_home, make_pipeline, monkeypatch):
    """Make a pipeline whose state lives in the server's home (the server runs jobs of that home only)."""
    home, _ = server_home
    monkeypatch.setenv("TAILFILL_HOME", str(home))
    def make(**changes):
        name = f"warm_{uuid.uuid4().hex[:6]}"  # its own table, too: the tests share the server's home
        return make_pipeline(name=name, target__table=name, **changes)

    return make


def test_backfill_and_tail_run_on_the_server_exactly_once(server_home, warm_pipeline):
    home, status = server_home
    cfg = warm_pipeline()
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 6_000, cfg.source.partitions, bad_every=500)
    run_id = new_run_id("backfill")
    specs = plan_backfill_lanes(open_pipeline(cfg), BackfillRequest(slices=2, lanes=2), lambda _lane: run_id).specs
    lines: list[str] = []
    with ThreadPoolExecutor(max_workers=2) as pool:  # two lanes at once, as the backfill DAG runs them
        runs = list(pool.map(lambda spec: warm(spec, os.environ, lines.append, home), specs))
    assert [run.code for run in runs] == [0, 0], what_happened(lines, home)
    assert lines.count(f"{warm_spark.SERVED_BY} pid {status['pid']}, job {run_id}") == 2, lines  # not a spark-submit
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 2_000, cfg.source.partitions, bad_every=500)
    tail = plan_tail(open_pipeline(cfg), TailRequest(once=True), new_run_id("tail")).spec
    outcome = warm(tail, os.environ, lines.append, home)
    assert outcome.code == 0 and outcome.result is not None, lines
    assert sum(r.offsets for run in runs for r in run.result.results) == 6_000
    assert sum(r.offsets for r in outcome.result.results) == 2_000
    assert_exactly_once(cfg, high_watermarks(cfg))
    assert warm_spark.server_status(status)["pid"] == status["pid"]  # the same server throughout


def test_a_single_batch_backfill_shows_what_its_task_read_on_the_server_before_the_commit(
        server_home, warm_pipeline, paused_batches):
    cfg, spec = one_batch_backfill(warm_pipeline, 60_000)
    read_before_commit(cfg, 60_000, paused_batches, on_runner(WarmServerRunner(os.environ, home=server_home[0]), spec))
    assert_exactly_once(cfg, high_watermarks(cfg))


def test_a_job_whose_caller_is_killed_stops_and_the_next_run_resumes(server_home, warm_pipeline):
    home, status = server_home
    cfg = warm_pipeline(tail__trigger="processing_time", tail__trigger_interval_seconds=2)
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 4_000, cfg.source.partitions)
    with open_pipeline(cfg) as pipeline:  # records the cutover
        history = plan_backfill_lanes(pipeline, BackfillRequest(), lambda _lane: new_run_id("backfill")).specs
    first: list[str] = []
    assert warm(history[0], os.environ, first.append, home).code == 0, what_happened(first, home)
    # An open-ended processing-time tail would run for ever: only its caller going away stops it.
    caller = subprocess.Popen([TAILFILL, "tail", str(cfg.path), "--spark", "warm"], env=dict(os.environ),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_until(lambda: warm_spark.server_status(status)["running"], "the tail to run on the server")
        produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 2_000, cfg.source.partitions)
        wait_until(lambda: total(read_ledger(tables_of(cfg).data).committed) >= 6_000, "the tail's batches")
    finally:
        os.killpg(caller.pid, signal.SIGKILL)
        caller.wait()
    wait_until(lambda: not warm_spark.server_status(status)["running"], "the server to cancel the orphaned job",
               timeout=120)
    log = (home / "logs" / "spark-server.log").read_text()
    assert "caller went away: cancelling its job" in log
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 1_000, cfg.source.partitions)
    done = subprocess.run([TAILFILL, "tail", str(cfg.path), "--once", "--spark", "warm"], env=dict(os.environ),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert warm_spark.SERVED_BY in done.stderr, done.stderr[-3000:]
    assert_exactly_once(cfg, high_watermarks(cfg))


def test_a_job_with_other_settings_is_refused_by_name(server_home, warm_pipeline):
    home, _ = server_home
    cfg = warm_pipeline()
    secret = "s3cr3t-value-never-printed"
    env = dict(os.environ, TAILFILL_KAFKA_PASSWORD=secret)
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 100, cfg.source.partitions)
    spec = plan_tail(open_pipeline(cfg), TailRequest(once=True), new_run_id("tail")).spec
    with pytest.raises(warm_spark.Refused) as refused:
        warm(spec, env, lambda _line: None, home)
    assert "TAILFILL_KAFKA_PASSWORD" in str(refused.value) and secret not in str(refused.value)
    assert secret not in (home / "logs" / "spark-server.log").read_text()
    assert secret not in json.dumps(warm_spark.job_env_digests(env))
