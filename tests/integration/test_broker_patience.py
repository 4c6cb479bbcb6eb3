"""A live tail waits out a broker that answers nothing, says so in one line, and goes on when it answers.

The broker's address goes away for longer than a read waits (connections reset, new ones refused), while a
processing-time tail runs with no failure budget at all (``max_consecutive_failures: 0``). The broker
answering nothing is not the batch's fault: the tail restarts with patience of its own, each restart one
line naming the broker and the request it did not answer, and goes on committing when the broker is back;
every offset exactly once.

A broker that never comes back is not waited out for ever: once the run has tried for its
``retry_ceiling_seconds`` without committing, it fails in one line with the cause, how long it tried and the
fix, and what it committed before stays, exactly once.

A reader whose broker was killed between two batches (an executor's consumer, which keeps the broker's metadata
from the batch before) names that broker: it answers nothing, with the patience that gets, not a bare client error.
"""

from __future__ import annotations

import re
import time
import uuid

import pytest
from helpers import (
    assert_exactly_once,
    backfill,
    besides_infrastructure,
    committed,
    finished,
    high_watermarks,
    in_background,
    tail,
    tail_spec,
    wait_until,
)
from tcp_outage import broker_behind_outage

from tailfill.cli import main as cli_main
from tailfill.dev.broker import EmbeddedBroker
from tailfill.dev.sample import produce_sample
from tailfill.errors import BrokerUnresponsive
from tailfill.offsets import OffsetRange
from tailfill.pipeline.handle import open_pipeline
from tailfill.run.spark_job import run, run_to_result
from tailfill.source.kafka import OwnedConsumer, read_ranges

pytestmark = pytest.mark.integration

OUTAGE_S = 25.0  # longer than a read or an offsets request waits (15 s, 10 s)


def test_a_tail_waits_out_a_broker_that_answers_nothing_and_goes_on(spark, make_pipeline):
    with broker_behind_outage() as (bootstrap, relay):
        cfg = make_pipeline(source__bootstrap_servers=bootstrap, tail__trigger="processing_time",
                            tail__trigger_interval_seconds=2, tail__max_consecutive_failures=0,
                            tail__restart_backoff_seconds=1, tail__min_offsets_per_batch=100,
                            tail__max_offsets_per_batch=2_000)
        topic = cfg.source.topic
        produce_sample(bootstrap, topic, 1_000, 4)
        spec = tail_spec(cfg, once=False)  # the cutover at 1,000: what follows is the tail's
        produce_sample(bootstrap, topic, 4_000, 4)
        lines: list[str] = []
        thread, out = in_background(run, spec, spark, lines.append)
        try:
            wait_until(lambda: committed(cfg) >= 4_000 or not thread.is_alive(), "the tail's first commits", 300)
            relay.down()
            time.sleep(OUTAGE_S)
            relay.up()
            produce_sample(bootstrap, topic, 4_000, 4)
            wait_until(lambda: committed(cfg) >= 8_000 or not thread.is_alive(), "commits after the outage", 600)
        finally:
            if not relay.is_up:
                relay.up()
            if thread.is_alive():
                cli_main(["stop-tail", cfg.path])
        [result] = finished(thread, out, timeout=600)
        restarts = [line for line in lines if "restarting from the checkpoint" in line]
        assert result.restarts >= 1 and len(restarts) == result.restarts, "\n".join(lines[-30:])
        # On a busy machine Spark's Python workers may also be too slow to start: a restart of its own kind.
        outage = besides_infrastructure(restarts)
        assert outage, "\n".join(restarts)
        for line in outage:
            assert "BrokerUnresponsive" in line and bootstrap in line, line
            assert any(said in line for said in ("no answer", "answered no", "accepted no connection")), line
            assert "\n" not in line and len(line) < 1_000, line
        assert result.offsets >= 8_000
        backfill(spark, cfg)
        tail(spark, cfg, once=True)
        assert_exactly_once(cfg, high_watermarks(cfg))


def test_a_broker_gone_for_good_fails_the_run_at_its_ceiling_in_one_line(spark, make_pipeline):
    with broker_behind_outage() as (bootstrap, relay):
        cfg = make_pipeline(source__bootstrap_servers=bootstrap, tail__trigger="processing_time",
                            tail__trigger_interval_seconds=2, tail__max_consecutive_failures=3,
                            tail__restart_backoff_seconds=1, tail__retry_ceiling_seconds=20,
                            tail__min_offsets_per_batch=100, tail__max_offsets_per_batch=2_000)
        topic = cfg.source.topic
        produce_sample(bootstrap, topic, 1_000, 4)
        spec = tail_spec(cfg, once=False)
        produce_sample(bootstrap, topic, 4_000, 4)
        lines: list[str] = []
        thread, out = in_background(run_to_result, spec, spark, lines.append, lambda event: None)
        try:
            wait_until(lambda: committed(cfg) >= 4_000 or not thread.is_alive(), "the tail's first commits", 300)
            relay.down()  # for good: the run must end by itself
            result = finished(thread, out, timeout=600)
        finally:
            if thread.is_alive():
                cli_main(["stop-tail", cfg.path])
        said = result.asstr()
        assert result.error is not None, said
        assert said.startswith("failed: ") and "\n" not in said, said
        assert "gave up after" in said and "retry_ceiling_seconds: 20;" in said, said
        assert f"(fix: {BrokerUnresponsive.fix})" in said, said
        assert bootstrap in said, said
        first_restart = next(i for i, line in enumerate(lines) if "restarting from the checkpoint" in line)
        progress = [line for line in lines[first_restart:] if line.startswith(f"[{cfg.name} tail] ")
                    and " batches" in line]
        assert progress and all("stalled: " in line and "rows/s" not in line for line in progress), \
            "\n".join(progress)
        kept = committed(cfg)
        assert kept >= 4_000
        relay.up()
        assert committed(cfg) == kept  # what the failed run committed is all there, nothing more
        backfill(spark, cfg)  # the history before the cutover, then the rest of the tail
        tail(spark, cfg, once=True)
        assert_exactly_once(cfg, high_watermarks(cfg))


def test_a_reader_whose_broker_was_killed_names_the_broker(make_pipeline):
    with EmbeddedBroker() as doomed:
        cfg = make_pipeline(source__bootstrap_servers=doomed.bootstrap_servers, source__topic=f"t-{uuid.uuid4().hex}")
        produce_sample(doomed.bootstrap_servers, cfg.source.topic, 100, 4)
        conf = open_pipeline(cfg).kafka
        consumer = OwnedConsumer(conf)  # as an executor keeps it across batches
        try:
            assert sum(b.num_rows for b in read_ranges(conf, [OffsetRange(cfg.source.topic, 0, 0, 10)],
                                                       with_markers=False, consumer=consumer)) == 10
            doomed.kill()
            with pytest.raises(BrokerUnresponsive, match=re.escape(f"the broker at {doomed.bootstrap_servers} ")):
                list(read_ranges(conf, [OffsetRange(cfg.source.topic, 0, 10, 20)], consumer=consumer))
        finally:
            consumer.close()
