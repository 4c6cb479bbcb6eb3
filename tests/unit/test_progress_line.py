"""The job's progress line: a tail that reads past the end it started at never shows 8510%."""

from __future__ import annotations

import time
from pathlib import Path

from tailfill.offsets import PartitionOffsets, TopicPartition
from tailfill.run.plan import IngestRequest
from tailfill.run.poll import progress_line
from tailfill.run.query_state import QueryState, Tally

TP = TopicPartition("t", 0)


def request(end: int | None, trigger: str = "available_now", target_end: int | None = None) -> IngestRequest:
    return IngestRequest(label="p tail", start=PartitionOffsets({TP: 0}),
                         end=PartitionOffsets({TP: end}) if end is not None else None,
                         max_offsets_per_batch=100, max_consecutive_failures=1, restart_backoff_seconds=1,
                         checkpoint=Path("/nowhere/x"), run_id="r", trigger=trigger,
                         target_end=PartitionOffsets({TP: target_end}) if target_end is not None else None)


def done(offsets: int) -> Tally:
    return Tally(batches=3, offsets=offsets, rows=offsets)


def test_a_backfill_shows_its_share_of_the_plan():
    line = progress_line(request(end=1_000), done(250), time.monotonic() - 1)
    assert "250/1,000 offsets (25%)" in line and "ETA" in line


def test_a_processing_time_tail_shows_what_it_did_and_its_backlog_not_a_stale_total():
    line = progress_line(request(end=None, trigger="processing_time", target_end=409), done(34_805),
                         time.monotonic() - 1, "backlog 1,200 offsets")
    assert "[p tail] 34,805 offsets " in line and "%" not in line and "backlog 1,200 offsets" in line


def test_an_available_now_tail_past_its_start_time_end_stays_at_100_percent():
    line = progress_line(request(end=None, target_end=409), done(420), time.monotonic() - 1)
    assert "420/420 offsets (100%)" in line


def test_after_a_failure_the_line_says_stalled_with_its_cause_not_a_rate_and_an_eta_until_a_batch_commits():
    state = QueryState(done(250))
    state.failed("BrokerUnresponsive: the broker at 127.0.0.1:9092 answered no fetch for 15s")
    line = progress_line(request(end=1_000), state.tally, time.monotonic() - 1, stalled=state.stalled())
    assert line.endswith("250/1,000 offsets (25%) 3 batches, stalled: BrokerUnresponsive: the broker at "
                         "127.0.0.1:9092 answered no fetch for 15s")
    assert "rows/s" not in line and "ETA" not in line
    state.tally = Tally(batches=4, offsets=300, rows=300)  # a batch committed: moving again
    assert state.stalled() is None
    assert "ETA" in progress_line(request(end=1_000), state.tally, time.monotonic() - 1, stalled=state.stalled())
