"""A tail and a backfill on two machines: different ``TAILFILL_HOME``s, one S3 warehouse and one Iceberg REST
catalog (SeaweedFS's, a real object store).

The backfill's governor sees the tail's health through the shared run state (beside the table on
S3), so it yields to a tail that misses its freshness objective exactly as on one machine, and
resumes when the tail is healthy again. Nothing of the run state is in either home.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import pytest
from helpers import assert_exactly_once, backfill, high_watermarks, tail

from tailfill.dev.sample import produce_sample
from tailfill.pipeline.load import load_pipeline
from tailfill.state.store import StateStore, read_health, run_ids, run_reports, write_health
from tailfill.values.freshness import Freshness

pytestmark = pytest.mark.integration

HISTORY, PARTITIONS = 4_000, 4  # the demo pipeline expects 4 partitions


def _wait_for(condition, what: str, running: threading.Thread | None = None, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert running is None or running.is_alive(), f"the backfill ended before {what}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_a_backfill_on_another_machine_yields_to_the_tail(spark, make_pipeline, seaweedfs, home, tmp_path,
                                                           monkeypatch, capsys):
    tail_home, backfill_home = home, tmp_path / "backfill-home"
    cfg = make_pipeline(rest=seaweedfs, backfill__slices=1, backfill__max_offsets_per_batch=1_000,
                        backfill__batch_seconds=None, backfill__when_tail_unknown="proceed",
                        tail__freshness_seconds=60)  # the published p95 of 95 s misses it
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, HISTORY, PARTITIONS)

    # The tail's machine: a real tail records the cutover and publishes its health to the shared state.
    tail(spark, cfg)
    monkeypatch.setenv("TAILFILL_HOME", str(backfill_home))
    on_backfill_host = load_pipeline(cfg.path)
    assert on_backfill_host.checkpoint_location.startswith(str(backfill_home))  # nothing local is shared
    stopped = read_health(StateStore.of(on_backfill_host))
    assert stopped is not None and not stopped.live(), "the backfill's host does not see the tail's health"
    assert StateStore.of(on_backfill_host).root.startswith("s3://")
    assert not [p for p in tail_home.rglob("*") if "health" in p.name or p.suffix == ".jsonl"]

    # The tail runs late: its host keeps publishing health that misses the objective.
    late = replace(stopped, freshness=Freshness(40.0, 95.0, 99.0, 1_000), caught_up=False)
    fresh = replace(late, freshness=Freshness(1.0, 2.0, 3.0, 1_000))
    beat, stop_beating = [late], threading.Event()

    def tail_host() -> None:
        while not stop_beating.is_set():
            write_health(StateStore.of(cfg), replace(beat[0], alive_at=time.time()))
            stop_beating.wait(0.5)

    write_health(StateStore.of(cfg), replace(late, alive_at=time.time()))
    beating = threading.Thread(target=tail_host, daemon=True)
    beating.start()
    results: list = []
    running = threading.Thread(target=lambda: results.extend(backfill(spark, on_backfill_host)), daemon=True)
    try:
        running.start()
        said: list[str] = []

        def says(text: str) -> bool:
            said.extend(capsys.readouterr().err.splitlines())
            return any(text in line for line in said)

        _wait_for(lambda: says("yielding to the tail: tail freshness p95 95s > objective"), "the backfill to yield",
                  running)
        store = StateStore.of(cfg)
        [run] = [r for r in run_ids(store) if r.startswith("backfill-")]
        paused_at = len(run_reports(store, run))  # read from the tail's side: the backfill's reports are shared
        assert 1 <= paused_at < HISTORY // 1_000, "the backfill did not pause between its batches"
        assert running.is_alive()

        beat[0] = fresh  # the tail catches up: the backfill resumes
        _wait_for(lambda: not running.is_alive(), "the backfill to finish")
    finally:
        stop_beating.set()
        beating.join(timeout=10)
        running.join(timeout=120)
    assert says("tail healthy again: backfill resumes")
    assert any("beside the live tail" in line or "paused for the tail" in line for line in said)
    [history] = results
    assert history.offsets == HISTORY and len(run_reports(StateStore.of(cfg), run)) > paused_at
    assert_exactly_once(cfg, high_watermarks(cfg))
