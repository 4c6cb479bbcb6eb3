"""Failure handling: the consecutive-failure budget, unreachable brokers, the processing-time tail."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest
from helpers import (
    QUERY_RUNS,
    assert_exactly_once,
    backfill,
    besides_infrastructure,
    committed,
    finished,
    high_watermarks,
    in_background,
    tables_of,
    tail,
    wait_until,
)

from tailfill import cli
from tailfill.dev.batches import commit_sample_batch
from tailfill.dev.sample import produce_sample
from tailfill.errors import IngestError
from tailfill.lake.ledger import read_ledger
from tailfill.offsets import OffsetRange, total
from tailfill.pipeline.handle import open_pipeline
from tailfill.run import spark_job as job
from tailfill.run.planner import backfill_spec
from tailfill.state.store import StateStore, read_health, request_stop, run_reports

pytestmark = pytest.mark.integration


def test_transient_batch_failures_within_budget_are_retried_from_the_checkpoint(spark, make_pipeline, arm_fault):
    cfg = make_pipeline(backfill__slices=1, backfill__max_consecutive_failures=2)
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 4_000, 4)
    arm_fault("before-commit", 2)

    result = backfill(spark, cfg)[0]

    injected = besides_infrastructure(result.causes)
    assert len(result.causes) == result.restarts and len(injected) == 2, result.causes
    assert all("InjectedFault" in cause for cause in injected)
    assert_exactly_once(cfg, high_watermarks(cfg))


def test_failures_beyond_the_budget_stop_the_job_with_the_cause(spark, make_pipeline, arm_fault, capsys):
    cfg = make_pipeline(backfill__slices=1, backfill__max_consecutive_failures=1)
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 2_000, 4)
    arm_fault("before-commit", 5)

    with pytest.raises(IngestError, match=r"2 consecutive failed attempts without committing any offset") as caught:
        backfill(spark, cfg)
    # The guard names the step the attempts kept failing at, with the batch's ranges.
    assert f"each at the same step: commit of batch 0 ({cfg.source.topic}[" in str(caught.value)

    arm_fault("before-commit", 5)
    assert job.main(backfill_spec(open_pipeline(cfg)).argv(), spark) == 2  # the spark-submit exit code
    err = capsys.readouterr().err
    assert "error:" in err and "InjectedFault: injected failure at before-commit" in err


def test_another_writers_commits_do_not_reset_a_stuck_runs_failure_budget(spark, make_pipeline, arm_fault,
                                                                          monkeypatch):
    """A backfill that fails at every commit stops after its budget, although another writer (the tail, here
    a synthetic batch after the backfill's range) commits to the same table while the first attempt fails:
    the budget counts the run's own batches, not the table's ledger, so a stuck run beside a busy tail does
    not retry forever."""
    cfg = make_pipeline(backfill__slices=1, backfill__max_consecutive_failures=2, backfill__restart_backoff_seconds=0)
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 2_000, 4)
    flags = Path(os.environ["TAILFILL_FAULT_DIR"])
    monkeypatch.setenv("TAILFILL_FAULT_PAUSE", "before-commit")  # the driver's commit runs in this process
    arm_fault("before-commit", 3)  # one more failure than the budget tolerates, and no more

    def other_writer() -> None:
        deadline = time.monotonic() + 300
        while not (flags / "before-commit").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        commit_sample_batch(open_pipeline(cfg), "other-writer", 0, [OffsetRange(cfg.source.topic, 0, 400, 450)])
        (flags / "before-commit.release").touch()

    writer = threading.Thread(target=other_writer, daemon=True)
    writer.start()
    try:
        with pytest.raises(IngestError, match=r"3 consecutive failed attempts without committing any offset"):
            backfill(spark, cfg, end={cfg.source.topic: {"0": 250, "1": 250, "2": 250, "3": 250}})
        writer.join(timeout=60)
    finally:
        for name in ("before-commit", "before-commit.release", "before-commit.arrivals"):
            (flags / name).unlink(missing_ok=True)
    data = tables_of(cfg).data
    data.refresh()
    assert total(read_ledger(data).committed) == 50, "only the other writer's batch is committed"


def test_unreachable_broker_is_a_clear_error(make_pipeline, capsys, refused_port):
    dead = f"127.0.0.1:{refused_port}"
    cfg = make_pipeline(source__bootstrap_servers=dead)

    assert cli.main(["status", cfg.path]) == 2
    err = capsys.readouterr().err
    assert f"cannot reach Kafka at {dead}" in err and cfg.source.topic in err


def test_missing_topic_and_wrong_partition_count_are_named(make_pipeline, capsys):
    cfg = make_pipeline()
    assert cli.main(["status", cfg.path]) == 2
    assert f"topic {cfg.source.topic!r} not found" in capsys.readouterr().err

    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 10, partitions=2)
    assert cli.main(["status", cfg.path]) == 2
    err = capsys.readouterr().err
    assert "source.partitions" in err and "has 2 partitions, the pipeline expects 4" in err


def test_a_backfill_past_the_topic_s_end_is_refused_before_any_job_starts(make_pipeline, capsys):
    """Asked up to 500,000 on a partition that ends at ~100, a backfill is refused with one line, and nothing
    runs (rather than waiting minutes per try for records that never come)."""
    cfg = make_pipeline()
    topic = cfg.source.topic
    produce_sample(cfg.source.bootstrap_servers, topic, 400, 4)
    high = high_watermarks(cfg)
    asked = {str(p): (500_000 if p == 0 else end) for p, end in high.items()}

    code = cli.main(["backfill", str(cfg.path), "--to", json.dumps({topic: asked})])

    out, err = capsys.readouterr()
    assert code == 2
    assert f"{topic}[0]: asked up to 500,000, the broker's end is {high[0]:,}" in err
    assert f"{topic}[1]" not in err.split("past the end", 1)[1]  # only the impossible partition is named
    assert "offsets (" not in out + err and committed(cfg) == 0  # no job ran, nothing was planned into the table

    assert cli.main(["backfill", str(cfg.path), "--to", json.dumps({topic: {"7": 10}})]) == 2
    assert f"{topic}[7] is not a partition of topic" in capsys.readouterr().err


def test_a_topic_that_went_backwards_is_named_before_anything_runs(make_pipeline, capsys):
    """The table holds offsets up to 500 of a partition whose broker end is 100 (a broker that lost its
    data, a topic created again): status, the tail and a backfill say so in one line; nothing is planned."""
    cfg = make_pipeline()
    topic = cfg.source.topic
    produce_sample(cfg.source.bootstrap_servers, topic, 400, 4)
    high = high_watermarks(cfg)
    commit_sample_batch(open_pipeline(cfg), "before-the-reset", 0, [OffsetRange(topic, 0, 0, 500)])

    for command in (["status"], ["tail", "--once"], ["backfill"]):
        assert cli.main([command[0], str(cfg.path), *command[1:]]) == 2, command
        err = capsys.readouterr().err
        assert f"topic {topic!r}" in err and "went backwards" in err, err
        assert f"{topic}[0] ends at {high[0]:,} but the table holds offsets up to 500" in err
    assert committed(cfg) == 500  # nothing more was planned or committed


def test_processing_time_tail_picks_up_records_as_they_arrive(spark, make_pipeline):
    """Two waves produced while a processing-time tail runs, the second only after the first is
    committed: both land, in separate batches, and the tail stops between batches when asked."""
    cfg = make_pipeline(tail__trigger="processing_time", tail__trigger_interval_seconds=1)
    bs, topic = cfg.source.bootstrap_servers, cfg.source.topic
    produce_sample(bs, topic, 4_000, 4)
    backfill(spark, cfg)  # history up to the cutover
    thread, out = in_background(tail, spark, cfg, False, 600)  # stop_after: only a bound if the stop is missed
    try:
        wait_until(lambda: (h := read_health(StateStore.of(cfg))) is not None and h.alive_at > 0, "the tail to start")
        for wave in (1, 2):
            produce_sample(bs, topic, 4_000, 4)
            wait_until(lambda n=wave: committed(cfg) >= 4_000 * (n + 1), f"wave {wave} to be committed", timeout=300)
    finally:
        request_stop(StateStore.of(cfg))
    [result] = finished(thread, out)
    assert result.offsets == 8_000 and result.batches >= 2
    assert_exactly_once(cfg, high_watermarks(cfg))


def test_batch_reader_reads_a_bounded_range_as_dataframe(spark, make_pipeline):
    cfg = make_pipeline()
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 400, 4)
    df = (
        spark.read.format("tailfill_kafka")
        .option("source", cfg.source.model_dump_json())
        .option("startingOffsets", f'{{"{cfg.source.topic}": {{"0": 10, "1": 0, "2": 0, "3": 100}}}}')
        .option("endingOffsets", f'{{"{cfg.source.topic}": {{"0": 60, "1": 5, "2": 0, "3": 100}}}}')
        .load()
    )
    assert df.rdd.getNumPartitions() == 2  # one input partition per non-empty range
    rows = df.select("kafka_partition", "kafka_offset", "kafka_timestamp", "kafka_headers", "kafka_value").collect()
    assert sorted((r.kafka_partition, r.kafka_offset) for r in rows) == (
        [(0, o) for o in range(10, 60)] + [(1, o) for o in range(5)]
    )
    assert all(r.kafka_timestamp is not None and r.kafka_value.startswith(b"{") for r in rows)
    assert all(r.kafka_headers == [] for r in rows)  # the sample producer sends none; the column is there


def test_preflight_passes_when_ready_and_names_what_is_not(make_pipeline, tmp_path, capsys, refused_port):
    cfg = make_pipeline()
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 100, 4)
    assert cli.main(["preflight", cfg.path, "--mode", "backfill"]) == 0
    out = capsys.readouterr().out
    assert "has 4 partitions" in out and "writable" in out and "ready" in out

    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    broken = make_pipeline(name="broken", source__topic=cfg.source.topic, target__warehouse=str(blocker / "warehouse"))
    assert cli.main(["preflight", broken.path]) == 1
    assert f"{blocker}/warehouse" in capsys.readouterr().out

    dead = make_pipeline(name="dead", source__bootstrap_servers=f"127.0.0.1:{refused_port}")
    assert cli.main(["preflight", dead.path]) == 1
    assert "cannot reach Kafka at 127.0.0.1:" in capsys.readouterr().out
    # A table per topic: the topics cannot even be listed, and the preflight fails the same way.
    routed = make_pipeline(name="deadrouted", source__bootstrap_servers=f"127.0.0.1:{refused_port}",
                           source__topic=None, source__topic_pattern=r"shop\..*", target__table="{topic.1}")
    assert cli.main(["preflight", routed.path]) == 1
    out = capsys.readouterr().out
    assert "preflight of deadrouted (" in out and ") FAILED: cannot reach Kafka at 127.0.0.1:" in out, out


@pytest.mark.parametrize("bounded", ["direct", QUERY_RUNS])
def test_a_restart_after_a_discarded_checkpoint_reads_no_offset_below_the_ledger(spark, make_pipeline, arm_fault,
                                                                                 monkeypatch, bounded):
    """The first batch commits, then fails; as if Spark refused the query's checkpoint, it is discarded. The restart
    reads from the ledger's position: the run's batches after it read exactly the offsets the failed attempt left,
    none it had committed (``query``: a streaming query, whose checkpoint is discarded; ``direct``: batches planned
    by the job, resumed from the batch that failed)."""
    from tailfill.run import checkpoint

    monkeypatch.setenv("TAILFILL_BOUNDED_RUNS", bounded)
    monkeypatch.setattr(checkpoint, "refused", lambda *_args: True)  # every failure: Spark refused the checkpoint
    cfg = make_pipeline(backfill__slices=1, backfill__max_offsets_per_batch=1_000, backfill__batch_seconds=None,
                        backfill__max_consecutive_failures=2, backfill__restart_backoff_seconds=0)
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 8_000, 4)
    arm_fault("after-commit", 1)  # batch 0 is in the ledger, its attempt fails

    [result] = backfill(spark, cfg)

    assert result.restarts >= 1 and any("InjectedFault" in cause for cause in result.causes), result.causes
    reports = run_reports(StateStore.of(cfg), result.run_id)
    read_after = sum(r.offsets for r in reports)  # every batch that reported came after the restart
    assert [r for r in reports if r.skipped] == [] and result.skipped_offsets == 0
    assert 0 < 8_000 - read_after <= 1_000  # what the failed attempt committed, read once, never again
    assert_exactly_once(cfg, high_watermarks(cfg))
