"""Jobs on Spark Connect: this home's local server (Spark's own, supervised by Tailfill), exactly once.

One local server per module (a JVM of its own), on a free loopback port, stopped at the end. Runs are
told apart by their run ids; every offset must land exactly once through lanes side by side, a caller
killed mid-tail, and a server killed mid-job.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from helpers import (
    assert_exactly_once,
    committed,
    high_watermarks,
    ingested,
    on_runner,
    one_batch_backfill,
    read_before_commit,
    tables_of,
    tail_spec,
    wait_until,
)
from processes import kill_marked, processes_with

from tailfill.dev.sample import produce_sample
from tailfill.errors import SparkServerError
from tailfill.lake.ledger import read_ledger
from tailfill.offsets import total
from tailfill.pipeline.handle import open_pipeline
from tailfill.run import connect_server
from tailfill.run.contract import new_run_id
from tailfill.run.planner import BackfillRequest, TailRequest, plan_backfill_lanes, plan_tail
from tailfill.run.runners import SERVED_BY, ConnectRunner, Outcome

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("connect_leaves_no_trace")]

TAILFILL = str(Path(sys.executable).parent / "tailfill")


def on_connect(spec, on_line, home, env=None) -> Outcome:
    """Run ``spec`` on the local Connect server of ``home``."""
    return ConnectRunner(None, env, home=home).submit(spec, on_line).wait()


def what_failed(lines: list[str]) -> str:
    """The jobs' error lines, then their last lines (whole: a list's repr would be cut short)."""
    errors = [ln for ln in lines if ln.startswith("error:") or ('"error": {' in ln)]
    return "\n".join([*errors, "...", *lines[-30:]])


def ctrl_c_not_ignored() -> None:
    """In a child before it starts: SIGINT as a terminal delivers it (a test run from a script in the background
    inherits it ignored, and a Python started so never raises KeyboardInterrupt)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


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
    assert [run.code for run in runs] == [0, 0], what_failed(lines)
    served = [ln for ln in lines if ln.startswith(SERVED_BY)]
    assert len(served) == 2 and all(state["url"] in ln for ln in served), served
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 2_000, cfg.source.partitions, bad_every=500)
    tail = plan_tail(open_pipeline(cfg), TailRequest(once=True), new_run_id("tail")).spec
    outcome = on_connect(tail, lines.append, home)
    assert outcome.code == 0 and outcome.result is not None, what_failed(lines)
    assert sum(r.offsets for run in runs for r in run.result.results) == 6_000
    assert sum(r.offsets for r in outcome.result.results) == 2_000
    assert all(r.freshness for r in outcome.result.results)  # the records' latencies, measured on the server
    assert_exactly_once(cfg, high_watermarks(cfg))
    assert connect_server.server_state(home)["pid"] == state["pid"]  # the same server throughout
    sessions = {ln.split(", session ")[1].split(",")[0] for ln in lines if ln.startswith(SERVED_BY)}
    assert len(sessions) == 1, sessions  # both lanes and the tail on one session: the tail took the lanes' workers


def test_a_shared_session_the_server_closed_is_replaced_by_a_new_one(server_home):
    """A home's jobs share one session on its local server; once the server has closed it (idle past its timeout,
    or released), the next job takes a new one instead of failing on the old one's id."""
    from tailfill.run.spark_connect import connect_session

    home, state = server_home
    fingerprint = "test-" + uuid.uuid4().hex[:8]  # a code version of this test's own: a session of its own
    first = connect_server.shared_session(home, state, fingerprint)
    assert connect_server.shared_session(home, state, fingerprint) == first  # kept while server and code are
    released = connect_session(state["url"], None, lambda _closed: first)
    released.release_session_on_close = True
    released.stop()  # as the server's idle timeout would: the id cannot be taken again
    asked: list[str | None] = []

    def shared(closed: str | None) -> str:
        asked.append(closed)
        return connect_server.shared_session(home, state, fingerprint, closed)

    spark = connect_session(state["url"], None, shared)
    try:
        assert asked == [None, first]
        assert spark.session_id not in (None, first)
        assert spark.range(3).count() == 3  # a working session
        assert connect_server.shared_session(home, state, fingerprint) == spark.session_id  # kept for the next job
    finally:
        spark.stop()  # not released: a shared session stays for the next job


def test_a_single_batch_backfill_shows_what_its_task_read_on_the_server_before_the_commit(
        server_home, connect_pipeline, paused_batches):
    cfg, spec = one_batch_backfill(connect_pipeline, 60_000)
    read_before_commit(cfg, 60_000, paused_batches, on_runner(ConnectRunner(None, None, home=server_home[0]), spec))
    assert_exactly_once(cfg, high_watermarks(cfg))


ORPHAN_STOPPED = ("its client has not renewed its lease", "since the session has timed out")


def server_log(home: Path) -> str:
    return (home / "logs" / "connect-server.log").read_text(errors="replace")


def finished(command: list[str], home: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    """``command`` run to its end; if it has not ended after ``timeout`` seconds (a hang, not a slow machine), the
    failure shows its output, the server log's end and the server's Java threads that run queries or batches."""
    try:
        return subprocess.run(command, env=dict(os.environ), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as hung:
        state = connect_server.server_state(home) or {}
        threads = subprocess.run(["jstack", str(state.get("pid", 0))], capture_output=True, text=True).stdout
        busy = [t for t in threads.split("\n\n") if "stream execution" in t or "ForeachBatch" in t or "Python" in t]
        out = (hung.stderr or b"").decode(errors="replace") if isinstance(hung.stderr, bytes) else hung.stderr or ""
        pytest.fail(f"{command[1]} did not end in {timeout:.0f}s\n--- its output ---\n{out[-4000:]}"
                    f"\n--- the server log ---\n{server_log(home)[-4000:]}\n--- the server's threads ---\n"
                    + "\n\n".join(busy)[-8000:])


def test_ctrl_c_on_a_backfill_with_lanes_stops_every_lane_between_batches_and_the_next_backfill_completes_it(
        server_home, connect_pipeline):
    home, _ = server_home
    cfg = connect_pipeline(backfill__max_offsets_per_batch=1_000, backfill__batch_seconds=None)
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 40_000, cfg.source.partitions)
    command = [TAILFILL, "backfill", str(cfg.path), "--spark", "connect", "--lanes", "2", "--slices", "2"]
    # At 5 offsets/s, each lane's pacer on the server waits minutes after its first batch of 1,000.
    caller = subprocess.Popen([*command, "--max-rate", "5"], env=dict(os.environ), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, preexec_fn=ctrl_c_not_ignored)
    try:
        wait_until(lambda: committed(cfg) > 0, "the lanes' first batches", timeout=300)
        caller.send_signal(signal.SIGINT)  # as Ctrl-C: to the command only, not to anything it started
        try:
            out, _ = caller.communicate(timeout=150)  # the stop cuts the server's wait short: not 200 s and more
        except subprocess.TimeoutExpired:
            caller.kill()
            pytest.fail(f"the backfill did not end within 150 s of Ctrl-C:\n{caller.communicate()[0][-3000:]}")
    finally:
        caller.kill()
    assert caller.returncode == 130, out[-3000:]
    assert out.count("stopped between batches (its command got SIGINT)") == 2, out[-3000:]  # each lane
    assert out.strip().splitlines()[-1].startswith(f"backfill of {cfg.name} stopped on SIGINT after its batch in "
                                                   "flight: "), out[-3000:]
    assert connect_server.busy(home) == []  # both lanes' jobs ended with the command
    stopped_at = committed(cfg)
    assert 0 < stopped_at < 40_000  # the lanes were far from done: they stopped, not finished
    time.sleep(5)
    assert committed(cfg) == stopped_at  # no query went on on the server
    done = finished(command, home)
    assert done.returncode == 0, done.stderr[-3000:]
    assert_exactly_once(cfg, high_watermarks(cfg))


def test_a_tail_whose_caller_is_killed_stops_on_the_server_and_the_next_run_resumes(server_home, connect_pipeline):
    home, _ = server_home
    cfg = connect_pipeline(tail__trigger="processing_time", tail__trigger_interval_seconds=2)
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 4_000, cfg.source.partitions)
    with open_pipeline(cfg) as pipeline:  # records the cutover
        history = plan_backfill_lanes(pipeline, BackfillRequest(), lambda _lane: new_run_id("backfill")).specs
    assert on_connect(history[0], lambda _line: None, home).code == 0
    # An open-ended processing-time tail runs until stopped: only its caller going away ends it here.
    caller = subprocess.Popen([TAILFILL, "tail", str(cfg.path), "--spark", "connect"], env=dict(os.environ),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 2_000, cfg.source.partitions)
        wait_until(lambda: total(read_ledger(tables_of(cfg).data).committed) >= 6_000, "the tail's batches",
                   timeout=300)
    finally:
        os.killpg(caller.pid, signal.SIGKILL)
        caller.wait()
    # The query outlives its client on the server: with records arriving, a batch soon finds the client's lease
    # unrenewed and stops the query (a quiet one ends with its session).
    deadline = time.monotonic() + 240
    while not any(why in server_log(home) for why in ORPHAN_STOPPED):
        assert time.monotonic() < deadline, "the server did not stop the orphaned query"
        produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 100, cfg.source.partitions)
        time.sleep(2)
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 1_000, cfg.source.partitions)
    done = finished([TAILFILL, "tail", str(cfg.path), "--once", "--spark", "connect"], home)
    assert done.returncode == 0, done.stderr[-3000:]
    assert SERVED_BY in done.stderr, done.stderr[-3000:]
    assert_exactly_once(cfg, high_watermarks(cfg))


def test_a_busy_server_with_other_settings_refuses_by_name_never_printing_the_secret(server_home):
    home, state = server_home
    secret = "s3cr3t-value-never-printed"
    env = dict(os.environ, TAILFILL_KAFKA_PASSWORD=secret)
    running = connect_server.job_file(home, "busy-run")  # a job of this home runs on it
    running.parent.mkdir(parents=True, exist_ok=True)
    running.touch()
    try:
        with pytest.raises(SparkServerError) as refused:
            connect_server.connect_server_up(home, env)
    finally:
        running.unlink()
    assert "TAILFILL_KAFKA_PASSWORD" in str(refused.value) and secret not in str(refused.value)
    assert connect_server.server_state(home)["pid"] == state["pid"]  # not replaced under a running job
    assert secret not in server_log(home) and secret not in connect_server.state_file(home).read_text()


def test_a_server_that_dies_mid_job_fails_it_in_one_line_and_the_retry_resumes_on_a_new_one(
        server_home, connect_pipeline):
    home, _ = server_home
    cfg = connect_pipeline(backfill__max_offsets_per_batch=1_000)
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 20_000, cfg.source.partitions)
    spec = plan_backfill_lanes(open_pipeline(cfg), BackfillRequest(), lambda _lane: new_run_id("backfill")).specs[0]
    lines: list[str] = []
    run = ConnectRunner(None, None, home=home).submit(spec, lines.append)
    wait_until(lambda: total(read_ledger(tables_of(cfg).data).committed) > 0, "a first batch", timeout=300)
    victim = connect_server.server_state(home)["pid"]
    os.killpg(victim, signal.SIGKILL)  # the JVM and its Python workers, as a lost machine would
    outcome = run.wait()
    errors = [ln for ln in lines if ln.startswith("error:")]
    assert outcome.code == 2 and len(errors) == 1, lines[-30:]
    assert "Spark Connect server went away" in errors[0] and "\n" not in errors[0], errors
    retry = on_connect(spec, lines.append, home)
    assert retry.code == 0, lines[-30:]
    assert connect_server.server_state(home)["pid"] != victim  # a new server took the retry
    assert_exactly_once(cfg, high_watermarks(cfg))


def test_a_server_that_dies_under_the_command_is_one_line_on_its_terminal_and_no_traceback(server_home,
                                                                                         connect_pipeline, tmp_path):
    home, _ = server_home
    cfg = connect_pipeline(backfill__max_offsets_per_batch=1_000, backfill__batch_seconds=None)
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 20_000, cfg.source.partitions)
    out, err = tmp_path / "out", tmp_path / "err"
    with out.open("w") as stdout, err.open("w") as stderr:
        caller = subprocess.Popen([TAILFILL, "backfill", str(cfg.path), "--spark", "connect", "--max-rate", "500"],
                                  env=dict(os.environ), stdout=stdout, stderr=stderr, start_new_session=True)
    try:
        wait_until(lambda: committed(cfg) > 0 or caller.poll() is not None, "a first batch", timeout=300)
        os.killpg(connect_server.server_state(home)["pid"], signal.SIGKILL)  # the JVM and its Python workers
        code = caller.wait(timeout=300)
    finally:
        if caller.poll() is None:
            os.killpg(caller.pid, signal.SIGKILL)
            caller.wait()
    terminal = out.read_text() + err.read_text()
    assert code == 2, terminal[-3000:]
    assert "Traceback" not in terminal and "\tat " not in terminal, terminal[-3000:]
    last = err.read_text().strip().splitlines()[-1]
    assert last.startswith(f"backfill of {cfg.name} failed: ConnectServerError: ") and "(fix: run it again" in last, \
        terminal[-3000:]
    done = finished([TAILFILL, "backfill", str(cfg.path), "--spark", "connect"], home)  # on a new local server
    assert done.returncode == 0, done.stderr[-3000:]
    assert_exactly_once(cfg, high_watermarks(cfg))


def test_a_caller_killed_while_the_server_starts_leaves_no_server_nobody_knows_of(tmp_path):
    """The starting caller is SIGKILLed before the server answers: the server it started is recorded all the same,
    so ``connect-server down`` (or the next caller) finds and stops it; no JVM is left running for ever."""
    home, tag = tmp_path / "home", uuid.uuid4().hex
    marker = f"TAILFILL_TEST_MARKER={tag}".encode()  # the server inherits the caller's environment
    start = "from tailfill.run.connect_server import connect_server_up; connect_server_up()"
    caller = subprocess.Popen([sys.executable, "-c", start], env=dict(os.environ, TAILFILL_HOME=str(home),
                              TAILFILL_TEST_MARKER=tag), start_new_session=True)
    try:
        wait_until(lambda: set(processes_with(marker)) - {caller.pid}, "the caller to start the server")
        seen = time.monotonic()  # killed once the server is recorded, or 2 s after it started (before it answers)
        wait_until(lambda: connect_server.state_file(home).exists() or time.monotonic() - seen > 2, "a moment")
        os.killpg(caller.pid, signal.SIGKILL)  # the caller alone: the server has a session of its own
        caller.wait()
        assert processes_with(marker), "the server did not outlive its caller (nothing to find)"
        assert connect_server.connect_server_down(home), "the server the killed caller started was not recorded"
        wait_until(lambda: not processes_with(marker), "the server to stop")
    finally:
        kill_marked(marker)


def test_an_idle_server_with_the_daemons_past_queries_left_is_replaced_on_its_port(server_home, connect_pipeline,
                                                                                  monkeypatch):
    """Spark (4.1, 4.2) keeps a Python daemon per query until the server stops: once an idle server has as many as the
    limit, the next job gets a new server on the same address, and runs there."""
    home, _ = server_home
    cfg = connect_pipeline()
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 100, cfg.source.partitions)
    tail_spec(cfg)  # the cutover: the tails below read what comes after
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 500, cfg.source.partitions)
    lines: list[str] = []
    assert on_connect(tail_spec(cfg), lines.append, home).code == 0, lines[-30:]
    before = connect_server.server_state(home)
    left = connect_server.leftover_daemons(before["pid"])
    assert left >= 1  # the query's planner daemon outlives it
    monkeypatch.setenv(connect_server.RECYCLE_ENV, str(left))
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 500, cfg.source.partitions)
    assert on_connect(tail_spec(cfg), lines.append, home).code == 0, lines[-30:]
    after = connect_server.server_state(home)
    assert after["pid"] != before["pid"] and after["url"] == before["url"]
    assert "Python daemons left by its past jobs" in after["started_because"]
    rows, bad = ingested(cfg)  # both tails' offsets after the cutover, each once
    assert committed(cfg) == 1_000 and sum((rows + bad).values()) == len(rows + bad) == 1_000
