"""A command owns its job under ``spark-submit``: SIGINT and SIGTERM stop it between batches and say so in one line,
a command killed outright takes its job with it, a second tail of a pipeline is refused naming the running one, and a
full disk ends a backfill at once in one line. Each command runs as a user runs it (``tailfill …``, started the way a
script starts it in the background, SIGINT ignored), with a marker in its environment that every process of its job
inherits: none may be left 5 s after the command exits."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from helpers import (
    assert_exactly_once,
    backfill,
    committed,
    high_watermarks,
    small_disk,
    tail,
    tail_spec,
    wait_until,
)
from processes import kill_marked, processes_with

from tailfill.dev.sample import produce_sample
from tailfill.run.spark_job import run as run_job

pytestmark = pytest.mark.integration

TAILFILL = str(Path(sys.executable).parent / "tailfill")
GONE_WITHIN_S = 5.0  # no process of a job may be left this long after its command exits


def as_in_a_script() -> None:
    """In the command's process before it starts: SIGINT ignored, as ``tailfill … &`` in a shell script leaves it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class Command:
    """``tailfill args`` running, its stdout and stderr in files, its job's processes known by their marker."""

    def __init__(self, args: list[str], tmp_path: Path):
        tag = uuid.uuid4().hex
        self.marker = f"TAILFILL_TEST_MARKER={tag}".encode()
        self.out, self.err = tmp_path / f"{tag}.out", tmp_path / f"{tag}.err"
        with self.out.open("w") as out, self.err.open("w") as err:
            self.proc = subprocess.Popen([TAILFILL, *args], env=dict(os.environ, TAILFILL_TEST_MARKER=tag),
                                         stdout=out, stderr=err, start_new_session=True, preexec_fn=as_in_a_script)

    def output(self) -> str:
        return self.out.read_text() + self.err.read_text()

    def ended(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the command did not end within {timeout:.0f}s:\n{self.output()[-4000:]}")

    def assert_no_process_left(self) -> None:
        deadline = time.monotonic() + GONE_WITHIN_S
        while left := processes_with(self.marker):
            assert time.monotonic() < deadline, f"processes of the job still running {GONE_WITHIN_S:.0f}s after its " \
                                                f"command exited: {left}\n{self.output()[-3000:]}"
            time.sleep(0.1)

    def cleanup(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        kill_marked(self.marker)


def assert_nothing_commits_any_more(cfg) -> None:
    held = committed(cfg)
    time.sleep(4)
    assert committed(cfg) == held, "a job went on committing after its command ended"


def live_pipeline(make_pipeline, command: str):
    """A pipeline whose ``command`` runs for a minute or more, batch after batch: a rate-limited backfill of 20,000
    offsets, or a live tail with 20,000 offsets after its cutover, 500 a batch."""
    cfg = make_pipeline(backfill__slices=1, backfill__max_offsets_per_batch=500, backfill__batch_seconds=None,
                        tail__trigger="processing_time", tail__trigger_interval_seconds=2,
                        tail__min_offsets_per_batch=500, tail__max_offsets_per_batch=500)
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 400 if command == "tail" else 20_000, 4)
    if command == "tail":
        tail_spec(cfg)  # records the cutover: the tail reads what comes next
        produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 20_000, 4)
    args = [command, str(cfg.path), "--spark", "submit"] + (["--max-rate", "300"] if command == "backfill" else [])
    return cfg, args


@pytest.mark.parametrize(("command", "sig"), [("backfill", signal.SIGTERM), ("backfill", signal.SIGINT),
                                              ("tail", signal.SIGTERM), ("tail", signal.SIGINT)],
                         ids=["backfill-SIGTERM", "backfill-SIGINT", "tail-SIGTERM", "tail-SIGINT"])
def test_a_signal_stops_the_job_between_batches_in_one_line_and_leaves_no_process(spark, make_pipeline, tmp_path,
                                                                                 command, sig):
    cfg, args = live_pipeline(make_pipeline, command)
    started = committed(cfg)
    run = Command(args, tmp_path)
    try:
        wait_until(lambda: committed(cfg) > started or run.proc.poll() is not None, "the job's first batch", 300)
        assert run.proc.poll() is None, run.output()[-3000:]
        run.proc.send_signal(sig)  # to the command alone, as `kill` does
        code = run.ended(timeout=180)
        run.assert_no_process_left()
    finally:
        run.cleanup()
    name = signal.Signals(sig).name
    output = run.output()
    assert code == 128 + sig, output[-3000:]
    last = run.err.read_text().strip().splitlines()[-1]
    assert last.startswith(f"{command} of {cfg.name} stopped on {name} after its batch in flight: "), output[-3000:]
    assert f"stopped between batches (its command got {name})" in output, output[-3000:]
    assert "Traceback" not in output and "\tat " not in output, output[-3000:]
    assert committed(cfg) < 20_000, "the job ran to its end instead of stopping"
    assert_nothing_commits_any_more(cfg)
    backfill(spark, cfg)
    tail(spark, cfg)
    assert_exactly_once(cfg, high_watermarks(cfg))


def test_a_tail_killed_outright_takes_its_job_with_it_and_a_second_tail_is_refused_meanwhile(spark, make_pipeline,
                                                                                           tmp_path):
    cfg, args = live_pipeline(make_pipeline, "tail")
    started = committed(cfg)
    run = Command(args, tmp_path)
    try:
        wait_until(lambda: committed(cfg) > started or run.proc.poll() is not None, "the tail's first batch", 300)
        assert run.proc.poll() is None, run.output()[-3000:]
        second = subprocess.run([TAILFILL, *args[:2], "--once", "--spark", "submit"], capture_output=True, text=True,
                                timeout=300)
        assert second.returncode == 2, second.stdout + second.stderr
        [line] = second.stderr.strip().splitlines()
        assert line.startswith(f"error: a tail of {cfg.name} is running already, on host {socket.gethostname()}, "
                               "pid "), line
        assert " since " in line and " ago), run tail-" in line, line
        status = subprocess.run([TAILFILL, "status", args[1]], capture_output=True, text=True, timeout=300).stdout
        assert f"tail: running on host {socket.gethostname()}, pid " in status, status
        run.proc.kill()  # SIGKILL: the command cannot say anything; the kernel takes its job
        run.proc.wait()
        run.assert_no_process_left()
    finally:
        run.cleanup()
    assert_nothing_commits_any_more(cfg)
    status = subprocess.run([TAILFILL, "status", args[1]], capture_output=True, text=True, timeout=300).stdout
    assert "tail: not running (the last one, on host " in status, status
    backfill(spark, cfg)
    lines: list[str] = []
    run_job(tail_spec(cfg), spark, lines.append)  # the next tail takes the killed one's claim over, and says so
    assert any("took over the claim of a tail that is gone" in line for line in lines), lines
    assert_exactly_once(cfg, high_watermarks(cfg))


def test_a_full_disk_mid_backfill_ends_at_once_in_one_line_without_a_traceback(make_pipeline, tmp_path):
    with small_disk(tmp_path / "disk", "1m") as disk:
        cfg = make_pipeline(target__warehouse=str(disk / "warehouse"), target__catalog__uri=f"sqlite:///{disk}/c.db",
                            backfill__slices=1, backfill__max_offsets_per_batch=2_000, backfill__batch_seconds=None,
                            backfill__max_consecutive_failures=3)
        produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 40_000, 4)
        run = Command(["backfill", str(cfg.path), "--spark", "submit"], tmp_path)
        try:
            code = run.ended(timeout=600)
            run.assert_no_process_left()
        finally:
            run.cleanup()
        output = run.output()
        assert code == 2, output[-3000:]
        assert "Traceback" not in output and "\tat " not in output, output[-3000:]
        assert "restarting" not in output, output[-3000:]  # no restart: space does not come back by waiting
        [line] = [ln for ln in output.splitlines() if "disk is full" in ln or "DiskFullError" in ln]
        assert line == run.err.read_text().strip().splitlines()[-1]
        assert line.startswith(f"backfill of {cfg.name} failed: DiskFullError: ") and "(fix: free space" in line, line
        log = Path(line.rsplit("the full output: ", 1)[1])
        assert "DiskFullError" in log.read_text()  # the whole story, tracebacks and all, is in the log file
        assert 0 < committed(cfg) < 40_000
