"""The tail comes first: a backfill beside a live, processing-time tail never starves it.

History on the broker, a producer writing live events, a processing-time tail and then a backfill
started beside it, each its own ``spark-submit`` as a user runs them. While the backfill runs, every
tail batch ends inside its trigger interval and its records' produce-to-commit latency (p95) stays
within 2 × the interval; the backfill completes; every offset lands exactly once.

What the machine can do is measured in the same run: the tail's batches before the backfill starts. On a busy
machine, where the tail alone comes near the objective or misses it, the tail beside the backfill is held to the
tail alone instead (at most :data:`BESIDE_OVER_ALONE` × its worst batch): the backfill must not be what makes it late.

The backfill is rate-limited to :data:`BACKFILL_RATE`, so that it spans several of the tail's intervals on any
machine: on a fast one, an unlimited backfill of the history ends inside one interval and leaves nothing to
measure beside it. Where the machine is slower than the limit, the backfill runs at full speed.
"""

from __future__ import annotations

import subprocess
import threading
import time
import uuid

import pytest
from helpers import assert_exactly_once, high_watermarks, kill_job_tree, tail, tail_spec

from tailfill.cli import main as cli_main
from tailfill.dev.sample import produce_live, produce_sample
from tailfill.pipeline.handle import open_pipeline
from tailfill.proof.validate import validate
from tailfill.run.planner import backfill_spec
from tailfill.run.submit import spark_submit_command, submit_env
from tailfill.state.store import StateStore, read_health, run_ids, run_reports

# Its assertions are timings (batches inside their interval, freshness): it runs with the machine to itself.
pytestmark = [pytest.mark.integration, pytest.mark.solo]

INTERVAL = 10
HISTORY = 200_000
LIVE_PER_SECOND = 500
ALONE_BATCHES = 3  # the tail's batches measured alone, before the backfill starts
BESIDE_OVER_ALONE = 1.5  # the tail beside the backfill against the tail alone, on a machine that misses the objective
BACKFILL_RATE = HISTORY // (4 * INTERVAL)  # offsets/s: the backfill lasts about four tail intervals


def _start(cmd: list[str], env: dict, log_path) -> subprocess.Popen:
    return subprocess.Popen(cmd, env=env, stdout=log_path.open("w"), stderr=subprocess.STDOUT, start_new_session=True)


def _wait(condition, timeout: float, what: str, proc: subprocess.Popen, log_path) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert proc.poll() is None, f"{what}: the job ended early:\n{log_path.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"{what}: timed out:\n{log_path.read_text()[-3000:]}"
        time.sleep(0.5)


def test_backfill_beside_a_live_tail_keeps_the_tail_fresh(spark, make_pipeline, home, tmp_path, request):
    # ``--demo-settings``: the shipped demo pipeline's slices and tail batch bounds, not this test's smaller ones.
    demo = request.config.getoption("--demo-settings")
    sizes = {} if demo else {"tail__min_offsets_per_batch": 500, "tail__max_offsets_per_batch": 50_000,
                             "backfill__slices": 2}
    cfg = make_pipeline(tail__trigger="processing_time", tail__trigger_interval_seconds=INTERVAL,
                        tail__freshness_seconds=2 * INTERVAL, backfill__max_offsets_per_second=BACKFILL_RATE, **sizes)
    bootstrap, topic = cfg.source.bootstrap_servers, cfg.source.topic
    produce_sample(bootstrap, topic, HISTORY, 4, bad_every=1_001)
    marker = f"TAILFILL_TEST_MARKER={uuid.uuid4().hex}"
    env = submit_env() | {"TAILFILL_HOME": str(home), "TAILFILL_TEST_MARKER": marker.split("=", 1)[1]}
    stop_producing = threading.Event()
    producer = threading.Thread(target=produce_live, args=(bootstrap, topic, LIVE_PER_SECOND, stop_producing))
    tail_log, backfill_log = tmp_path / "tail.log", tmp_path / "backfill.log"
    # Planning the tail records the cutover: the history is the backfill's, the live events the tail's.
    tail_proc = _start(spark_submit_command(tail_spec(cfg, once=False)), env, tail_log)
    backfill_proc = None
    try:
        _wait(lambda: read_health(StateStore.of(cfg)) is not None, 240, "the tail's start", tail_proc, tail_log)
        producer.start()
        _wait(lambda: (h := read_health(StateStore.of(cfg))) is not None and h.batch_at is not None, 120,
              "the tail's first batch", tail_proc, tail_log)
        first = read_health(StateStore.of(cfg)).batch_at
        alone_from = first + INTERVAL / 2  # the first batch read the backlog of the tail's start
        _wait(lambda: sum(b.at > alone_from for b in _tail_batches(cfg)) >= ALONE_BATCHES, 60 + 6 * INTERVAL,
              "the tail's batches alone", tail_proc, tail_log)
        spec = backfill_spec(open_pipeline(cfg))
        assert spec is not None
        backfill_started = time.time()
        backfill_proc = _start(spark_submit_command(spec), env, backfill_log)
        assert backfill_proc.wait(timeout=600) == 0, backfill_log.read_text()[-3000:]
        backfill_ended = time.time()
        time.sleep(INTERVAL)
        stop_producing.set()
        producer.join(timeout=60)
        assert cli_main(["stop-tail", str(cfg.path)]) == 0  # as a user stops it: between batches
        assert tail_proc.wait(timeout=120) == 0, tail_log.read_text()[-3000:]
    finally:
        stop_producing.set()
        for proc in (tail_proc, backfill_proc):
            if proc is not None:
                kill_job_tree(proc, marker.encode())  # whatever is left of either job

    batches = _tail_batches(cfg)
    alone = [b for b in batches if alone_from < b.at < backfill_started]
    beside = [b for b in batches if backfill_started <= b.at <= backfill_ended + INTERVAL]
    log = tail_log.read_text()[-4000:]
    assert len(alone) >= ALONE_BATCHES, f"only {len(alone)} tail batches before the backfill:\n{log}"
    assert len(beside) >= 2, f"only {len(beside)} tail batches while the backfill ran:\n{log}"
    seconds_limit = _limit(INTERVAL, [b.seconds for b in alone])
    p95_limit = _limit(2 * INTERVAL, [b.freshness["p95"] for b in alone])
    alone_text = ", ".join(f"{b.seconds:.1f} s (p95 {b.freshness['p95']:.1f} s)" for b in alone)
    too_long = [(b.batch_id, b.seconds) for b in beside if b.seconds > seconds_limit]
    assert not too_long, (f"tail batches longer than {seconds_limit:.1f}s beside the backfill: {too_long} "
                          f"(alone: {alone_text})")
    stale = [(b.batch_id, b.freshness) for b in beside if b.freshness["p95"] > p95_limit]
    assert not stale, f"tail freshness p95 above {p95_limit:.1f}s beside the backfill: {stale} (alone: {alone_text})"
    backfill_text = backfill_log.read_text()
    slices = cfg.backfill.slices
    assert f"backfill slices 1-{slices}/{slices}" in backfill_text and "beside the live tail" in backfill_text, \
        backfill_text[-3000:]
    print(f"\ntail batches alone: {alone_text}; limits {seconds_limit:.1f} s per batch, p95 {p95_limit:.1f} s")
    print(f"tail batches beside the backfill ({'demo settings' if demo else 'test settings'}): "
          + ", ".join(f"{b.seconds:.1f} s (p95 {b.freshness['p95']:.1f} s)" for b in beside)
          + f"; backfill {backfill_ended - backfill_started:.1f} s")

    tail(spark, cfg, once=True)  # what the stopped tail had not reached yet
    assert_exactly_once(cfg, high_watermarks(cfg))
    assert validate(open_pipeline(cfg), all_runs=True).success


def _tail_batches(cfg) -> list:
    """The batch reports of the pipeline's one tail run (none yet: empty)."""
    store = StateStore.of(cfg)
    runs = [r for r in run_ids(store) if r.startswith("tail-")]
    assert len(runs) <= 1, f"more than one tail run: {runs}"
    return run_reports(store, runs[0]) if runs else []


def _limit(objective: float, alone: list[float]) -> float:
    """The objective, or the tail alone's worst × :data:`BESIDE_OVER_ALONE` where that is more (a busy machine)."""
    return max(objective, BESIDE_OVER_ALONE * max(alone))
