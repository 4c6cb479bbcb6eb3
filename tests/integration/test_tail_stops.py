"""A live tail ends only when asked, and says so; a tail that stops committing is a failure, not a quiet hang.

- Stopped in the middle of a batch (``tailfill stop-tail`` after the stop's patience ran out), the tail ends
  cleanly, says the batch in flight did not commit, and the next run replays it: each offset exactly once.
  (A long traceback from the interrupted batch once overflowed Spark's stop check; the stream thread died
  without a cause and the run looked finished.)
- A batch that never finishes is a stall: after ``tail.stall_timeout_seconds`` the query is stopped and
  restarted as a failure, and past the failure budget the run fails naming where it was stuck.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml
from helpers import (
    assert_exactly_once,
    backfill,
    finished,
    high_watermarks,
    in_background,
    set_dotted,
    tail,
    tail_spec,
)

from tailfill.cli import main as cli_main
from tailfill.dev.sample import produce_sample
from tailfill.errors import QueryFailed
from tailfill.pipeline.load import load_pipeline
from tailfill.run import poll
from tailfill.run.spark_job import run

pytestmark = pytest.mark.integration

def _live_tail(make_pipeline, **changes):
    cfg = make_pipeline(tail__trigger="processing_time", tail__trigger_interval_seconds=2,
                        tail__min_offsets_per_batch=100, tail__max_offsets_per_batch=5_000, **changes)
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 2_000, 4)
    spec = tail_spec(cfg, once=False)  # records the cutover at the current end: the tail reads what comes next
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 4_000, 4)
    return cfg, spec


def _wait_for(condition, what: str, thread, out: dict, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if not thread.is_alive():
            finished(thread, out)  # raises the job's error
            raise AssertionError(f"the tail ended before {what}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _catch_up_and_prove(spark, cfg) -> None:
    """The next runs, with the tail's default patience (the tight stall settings were for the tail each test stops:
    on a busy machine a catch-up batch may well take longer than they allow), then the proof."""
    path = Path(cfg.path)
    path.write_text(yaml.safe_dump(set_dotted(yaml.safe_load(path.read_text()), {
        "tail__stall_timeout_seconds": 300, "tail__max_consecutive_failures": 3}, drop_none=False)))
    cfg = load_pipeline(path)
    backfill(spark, cfg)
    tail(spark, cfg, once=True)
    assert_exactly_once(cfg, high_watermarks(cfg))


def test_a_tail_stopped_in_the_middle_of_a_batch_ends_cleanly_and_the_next_run_replays_it(
        spark, make_pipeline, paused_batches, monkeypatch):
    monkeypatch.setattr(poll, "STOP_BETWEEN_BATCHES_S", 1.0)  # stop the batch in flight instead of waiting for it
    cfg, spec = _live_tail(make_pipeline)
    lines: list[str] = []
    paused_batches.arm()
    thread, out = in_background(run, spec, spark, lines.append)
    _wait_for(paused_batches.reached, "a batch in flight", thread, out)
    assert cli_main(["stop-tail", cfg.path]) == 0
    try:
        results = finished(thread, out, timeout=300)
    finally:
        paused_batches.release()
    assert [(r.batches, r.offsets, r.restarts) for r in results] == [(0, 0, 0)]
    assert any("stopped; the batch in flight did not commit, the next run replays it" in line for line in lines), \
        "\n".join(lines[-20:])
    _catch_up_and_prove(spark, cfg)


def test_a_tail_whose_batch_never_finishes_fails_naming_where_it_was_stuck(
        spark, make_pipeline, paused_batches):
    cfg, spec = _live_tail(make_pipeline, tail__stall_timeout_seconds=10, tail__max_consecutive_failures=1,
                           tail__restart_backoff_seconds=0)
    lines: list[str] = []
    paused_batches.arm()
    thread, out = in_background(run, spec, spark, lines.append)
    try:
        with pytest.raises(QueryFailed) as failed:
            finished(thread, out, timeout=600)
    finally:
        paused_batches.release()
    message = str(failed.value)
    assert "committed nothing for" in message and "while busy" in message, message
    assert "at prepare (read, parse, write on the executors) of batch 0" in message, message
    assert any("restart" in line.lower() and "committed nothing for" in line for line in lines), "\n".join(lines)
    _catch_up_and_prove(spark, cfg)
