"""Jobs on Spark Connect: this home's local server (Spark's own, supervised by Tailfill), exactly once.

One local server per module (a JVM of its own), on a free loopback port, stopped at the end. Runs are
told apart by their run ids; every offset must land exactly once through lanes side by side, a caller
killed mid-tail, and a server killed mid-job.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from helpers import assert_exactly_once, high_watermarks, tables_of, wait_until

from tailfill.dev.sample import produce_sample
from tailfill.errors import SparkServerError
from tailfill.lake.ledger import read_ledger
from tailfill.offsets import total
from tailfill.pipeline.handle import open_pipeline
from tailfill.plumbing.detached import alive
from tailfill.run import connect_server
from tailfill.run.contract import new_run_id
from tailfill.run.planner import BackfillRequest, TailRequest, plan_backfill_lanes, plan_tail
from tailfill.run.runners import SERVED_BY, ConnectRunner, Outcome

pytestmark = pytest.mark.integration

TAILFILL = str(Path(sys.executable).parent / "tailfill")


def on_connect(spec, on_line, home, env=None) -> Outcome:
    """Run ``spec`` on the local Connect server of ``home``."""
    return ConnectRunner(None, env, home=home).submit(spec, on_line).wait()


@pytest.fixture(scope="module")
def server_home(tmp_path_factory):
    home = tmp_path_factory.mktemp("connect") / "home"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TAILFILL_HOME", str(home))
        state = connect_server.connect_server_up(home)
        try:
            yield home, state
        finally:
            connect_server.connect_server_down(home)


@pytest.fixture
def connect_pipeline(server_home, make_pipeline, monkeypatch):
    """Make a pipeline whose state lives in the server's home."""
    home, _ = server_home
    monkeypatch.setenv("TAILFILL_HOME", str(home))

    def make(**changes):
        name = f"sc_{uuid.uuid4().hex[:6]}"
        return make_pipeline(name=name, target__table=name, **changes)

    return make


def test_lanes_and_the_tail_run_on_one_connect_server_exactly_once(server_home, connect_pipeline):
    home, state = server_home
    cfg = connect_pipeline()
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 6_000, cfg.source.partitions, bad_every=500)
    run_id = new_run_id("backfill")
    specs = plan_backfill_lanes(open_pipeline(cfg), BackfillRequest(slices=2, lanes=2), lambda _lane: run_id).specs
    lines: list[str] = []
    with ThreadPoolExecutor(max_workers=2) as pool:  # two lanes at once, as the backfill DAG runs them
        runs = list(pool.map(lambda spec: on_connect(spec, lines.append, home), specs))
    assert [run.code for run in runs] == [0, 0], lines[-40:]
    served = [ln for ln in lines if ln.startswith(SERVED_BY)]
    assert len(served) == 2 and all(state["url"] in ln for ln in served), served
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 2_000, cfg.source.partitions, bad_every=500)
    tail = plan_tail(open_pipeline(cfg), TailRequest(once=True), new_run_id("tail")).spec
    outcome = on_connect(tail, lines.append, home)
    assert outcome.code == 0 and outcome.result is not None, lines[-40:]
    assert sum(r.offsets for run in runs for r in run.result.results) == 6_000
    assert sum(r.offsets for r in outcome.result.results) == 2_000
    assert_exactly_once(cfg, high_watermarks(cfg))
    assert connect_server.server_state(home)["pid"] == state["pid"]  # the same server throughout
