"""A command owns its jobs: a signal asks them to stop between batches, a second one kills them, and a job started
through ``spark-submit``'s runner dies with its caller however the caller dies (here with stand-in jobs: no Spark)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tailfill.plumbing.detached import alive
from tailfill.run.job_stop import StopAsked, stop_of_job
from tailfill.run.owner import JobOwner, Signalled
from tailfill.run.runners import SparkSubmitRun

LINUX = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups and PR_SET_PDEATHSIG")

# A stand-in job: a child of its own that dies with it (as the JVM starts the Python driver, which asks to die with
# it: spark_jobs/ingest.py), then it waits for its stop file.
JOB = textwrap.dedent("""
    import os, subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", "from tailfill.plumbing.detached import die_with_parent; "
                              "die_with_parent(); print('ready', flush=True); import time; time.sleep(300)"],
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "ready"
    print(f"[job] pids {os.getpid()} {child.pid}", flush=True)
    stop = os.environ["TAILFILL_STOP_FILE"]
    while not os.path.exists(stop):
        time.sleep(0.1)
    print(f"[job] stopped between batches ({open(stop).read()})", flush=True)
""")


class FakeRun:
    def __init__(self) -> None:
        self.asked: list[str] = []
        self.killed = 0

    def stop(self, why: str) -> None:
        self.asked.append(why)

    def kill(self) -> None:
        self.killed += 1


def wait_for(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_signal_asks_each_job_to_stop_once_and_a_second_one_kills_them():
    said: list[str] = []
    runs = [FakeRun(), FakeRun()]
    with JobOwner("the backfill of demo", said.append) as owner:
        for run in runs:
            owner.track(run)
        os.kill(os.getpid(), signal.SIGTERM)
        assert [run.asked for run in runs] == [["its command got SIGTERM"]] * 2 and not any(r.killed for r in runs)
        os.kill(os.getpid(), signal.SIGINT)
        assert all(run.killed == 1 for run in runs)
    assert owner.exit_code == 128 + signal.SIGTERM
    assert said == ["SIGTERM: stopping the backfill of demo after its batch in flight (a second signal kills it now)",
                    "SIGINT again: killing the backfill of demo now (what it committed stays)"]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the command's handlers end with it


def test_a_signal_before_any_job_ends_the_command_and_a_stop_that_takes_too_long_kills():
    with pytest.raises(Signalled) as stopped, JobOwner("the tail of demo", lambda _line: None):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1)
    assert stopped.value.signum == signal.SIGTERM
    run = FakeRun()
    with JobOwner("the tail of demo", lambda _line: None, patience_s=0.2) as owner:
        owner.track(run)
        os.kill(os.getpid(), signal.SIGINT)  # handled although a background start may have left SIGINT ignored
        wait_for(lambda: run.killed == 1)
    assert run.asked == ["its command got SIGINT"]


def test_a_job_process_stops_when_its_stop_file_appears_or_it_gets_sigterm(tmp_path):
    path = tmp_path / "stop"
    with stop_of_job(path) as stop:
        assert not stop.wait(0.6)
        path.write_text("its command got SIGTERM")
        assert stop.wait(5) and stop.why == "its command got SIGTERM"
    with stop_of_job(None) as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.wait(5) and stop.why == "its process got SIGTERM"
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # put back
    asked = StopAsked()
    asked.ask("first")
    asked.ask("second")
    assert asked.why == "first"


@LINUX
def test_a_submitted_job_is_stopped_by_its_file_and_leaves_no_process(tmp_path):
    lines: list[str] = []
    run = SparkSubmitRun([sys.executable, "-c", JOB], dict(os.environ), lines.append)
    wait_for(lambda: any(line.startswith("[job] pids") for line in lines))
    pids = [int(p) for p in lines[0].split()[2:]]
    assert os.getpgid(pids[1]) == run.proc.pid != os.getpgrp()  # a process group of its own
    run.stop("its command got SIGTERM")
    assert run.wait().code == 0
    assert lines[-1] == "[job] stopped between batches (its command got SIGTERM)"
    wait_for(lambda: not any(alive(pid) for pid in pids))  # the child it left went with the group


@LINUX
def test_a_killed_job_takes_its_whole_group():
    lines: list[str] = []
    run = SparkSubmitRun([sys.executable, "-c", JOB], dict(os.environ), lines.append)
    wait_for(lambda: any(line.startswith("[job] pids") for line in lines))
    pids = [int(p) for p in lines[0].split()[2:]]
    run.kill()
    assert run.wait().code == -signal.SIGKILL
    wait_for(lambda: not any(alive(pid) for pid in pids))


CALLER = """
import os, sys
from tailfill.run.runners import SparkSubmitRun
run = SparkSubmitRun([sys.executable, "-c", sys.argv[1]], dict(os.environ), lambda line: print(line, flush=True))
run.wait()
"""


@LINUX
def test_a_job_dies_with_a_caller_killed_outright():
    caller = subprocess.Popen([sys.executable, "-c", CALLER, JOB], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    assert caller.stdout is not None
    pids = [int(p) for p in caller.stdout.readline().split()[2:]]
    caller.kill()  # SIGKILL: no handler runs; the kernel takes the job, and the job's driver with it
    caller.wait()
    try:
        wait_for(lambda: not any(alive(pid) for pid in pids), timeout=5)
    finally:
        for pid in filter(alive, pids):
            os.kill(pid, signal.SIGKILL)
