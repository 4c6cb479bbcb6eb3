"""``tailfill backfill`` with a stand-in runner (no Spark): a failed job ends the command in one line with its cause,
fix and log file, its traceback in the log alone; SIGTERM asks the job to stop between batches and the command ends
with one line and 143."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest
import yaml

from tailfill import cli
from tailfill.errors import DiskFullError, ErrorInfo
from tailfill.run.contract import IngestResult, JobResult, JobSpec, Slice
from tailfill.run.runners import Outcome

DEMO = Path(__file__).resolve().parents[2] / "pipelines" / "demo.yaml"
FULL = DiskFullError("the disk is full: could not write a data file /w/x.parquet (no space left on device)")
TRACEBACK = ["Traceback (most recent call last):", '  File "/w/tailfill/lake/prepare.py", line 140, in write_range',
             f"tailfill.errors.DiskFullError: {FULL}"]


class StandIn:
    """A job that prints what a failing (or a stopped) job prints, and a runner of it."""

    def __init__(self, fails: bool):
        self.fails, self.asked = fails, threading.Event()
        self.stopping = "killing its spark-submit"

    def submit(self, spec: JobSpec, on_line) -> StandIn:
        self.on_line = on_line
        return self

    def wait(self) -> Outcome:
        label = "[demo backfill slice 1/1 (40,000 offsets)]"
        self.on_line(f"{label} 2,000/40,000 offsets (5%) 1,200 rows/s 1 batches ETA 30s")
        if self.fails:
            for line in [*TRACEBACK, f"error: {FULL}"]:
                self.on_line(line)
            return Outcome(2, JobResult(error=ErrorInfo.of(FULL)))
        os.kill(os.getpid(), signal.SIGTERM)  # to the command, while its job runs (handled in its main thread)
        assert self.asked.wait(30), "the job was never asked to stop"
        self.on_line(f"{label} stopped between batches ({self.why})")
        return Outcome(0, JobResult([IngestResult("backfill-1", "demo backfill slice 1/1", 1, 2_000)]))

    def stop(self, why: str) -> None:
        self.why = why
        self.asked.set()

    def kill(self) -> None:
        self.asked.set()


@pytest.fixture
def backfill_with(tmp_path, monkeypatch):
    """Run ``tailfill backfill`` of a demo pipeline whose one planned job is ``StandIn(fails)``."""
    monkeypatch.setenv("TAILFILL_HOME", str(tmp_path / "home"))
    data = yaml.safe_load(DEMO.read_text())
    data["source"]["bootstrap_servers"] = "127.0.0.1:9"
    path = tmp_path / "demo.yaml"
    path.write_text(yaml.safe_dump(data))
    spec = JobSpec(str(path), "backfill", "backfill-1", (Slice(0, 1, *[_offsets()] * 2),))

    def run(fails: bool) -> int:
        monkeypatch.setattr(cli, "_backfill_specs", lambda _pipeline, _args: ([spec], "", 0))
        monkeypatch.setattr(cli, "choose_runner", lambda *_a, **_k: StandIn(fails))
        return cli.main(["backfill", str(path)])

    return run


def _offsets():
    from tailfill.offsets import PartitionOffsets, TopicPartition

    return PartitionOffsets({TopicPartition("demo-events", 0): 0})


def test_a_failed_job_ends_the_command_in_one_line_and_its_traceback_goes_to_the_log(backfill_with, capsys):
    assert backfill_with(fails=True) == 2
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and "error: " not in err
    *_, progress, last = err.strip().splitlines()
    assert progress.startswith("[demo backfill slice 1/1 (40,000 offsets)] 2,000/40,000 offsets")
    assert last.startswith(f"backfill of demo failed: DiskFullError: {FULL} (fix: {DiskFullError.fix}); the full "
                           "output: "), last
    log = Path(last.rsplit("the full output: ", 1)[1])
    assert log.name == "tailfill-backfill.log" and TRACEBACK[0] in log.read_text()


def test_sigterm_stops_the_job_between_batches_and_the_command_ends_in_one_line_with_143(backfill_with, capsys):
    assert backfill_with(fails=False) == 128 + signal.SIGTERM
    err = capsys.readouterr().err.strip().splitlines()
    assert "SIGTERM: stopping the backfill of demo after its batch in flight (a second signal kills it now)" in err
    assert "[demo backfill slice 1/1 (40,000 offsets)] stopped between batches (its command got SIGTERM)" in err
    assert err[-1] == ("backfill of demo stopped on SIGTERM after its batch in flight: 2,000 offsets committed by this "
                       "run; `tailfill backfill demo` goes on from there")
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


class DoneTail:
    """A tail's job that commits one batch and ends."""

    stopping = "killing its spark-submit"

    def submit(self, spec: JobSpec, on_line) -> DoneTail:
        self.on_line = on_line
        return self

    def wait(self) -> Outcome:
        self.on_line("[demo tail] 100 offsets 1 batches")
        return Outcome(0, JobResult([IngestResult("tail-1", "demo tail", 1, 100)]))

    def stop(self, why: str) -> None: ...

    def kill(self) -> None: ...


@pytest.fixture
def tail_with(tmp_path, monkeypatch, capsys):
    """Run ``tailfill tail`` (``flags``) of a demo pipeline with tail ``trigger``, whose job is :class:`DoneTail`."""
    monkeypatch.setenv("TAILFILL_HOME", str(tmp_path / "home"))

    def run(trigger: str, *flags: str) -> list[str]:
        data = yaml.safe_load(DEMO.read_text())
        data["source"]["bootstrap_servers"] = "127.0.0.1:9"
        data["tail"]["trigger"] = trigger
        path = tmp_path / "demo.yaml"
        path.write_text(yaml.safe_dump(data))
        spec = JobSpec(str(path), "tail", "tail-1")
        monkeypatch.setattr(cli, "plan_tail", lambda *_a: type("Plan", (), {"spec": spec, "notes": []}))
        monkeypatch.setattr(cli, "choose_runner", lambda *_a, **_k: DoneTail())
        assert cli.main(["tail", str(path), *flags]) == 0
        return [line for line in capsys.readouterr().out.splitlines() if line.startswith("tail of demo")]

    return run


def test_a_tail_that_ends_by_itself_says_why_in_one_line(tail_with, tmp_path):
    assert tail_with("available_now")[-1] == (
        f"tail of demo ended: it read to the topic's end: the pipeline's tail.trigger is available_now "
        f"({tmp_path / 'demo.yaml'}), one catch-up run (tail.trigger: processing_time tails live)")
    assert tail_with("processing_time", "--once")[-1] == \
        "tail of demo ended: it read to the topic's end, as --once asks"
    assert tail_with("processing_time", "--stop-after", "30")[-1] == "tail of demo ended: --stop-after 30s passed"
    assert tail_with("processing_time") == ["tail of demo: summary"]  # live: only a stop ends it, and says so
