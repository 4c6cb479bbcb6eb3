"""One tail per pipeline: a second tail is refused with one line naming the running one; a claim whose tail is gone
is taken over; of two tails claiming at once exactly one gets it, locally and on S3 (conditional writes)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from urllib.parse import urlparse

import boto3
import pyarrow.fs as pafs
import pytest

from tailfill.errors import TailRunning
from tailfill.plumbing.detached import started_at
from tailfill.state import tail_claim
from tailfill.state.records import TailClaim, TailHealth
from tailfill.state.store import StateStore, write_health


@pytest.fixture
def store(tmp_path) -> StateStore:
    return StateStore(str(tmp_path / "state" / "demo"), pafs.LocalFileSystem())


@pytest.fixture
def s3_store(s3_endpoint) -> StateStore:
    host = urlparse(s3_endpoint).netloc
    keys = {"access_key": "tailfill-test", "secret_key": "tailfill-test"}
    fs = pafs.S3FileSystem(**keys, region="us-east-1", endpoint_override=host, scheme="http")
    client = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1", aws_access_key_id="tailfill-test",
                          aws_secret_access_key="tailfill-test")
    return StateStore(f"s3://tailfill/{uuid.uuid4().hex[:8]}/demo", fs, lambda: client)


def exited_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def other_host(since: float) -> TailClaim:
    return TailClaim("worker-7", 4242, "tail-20261129T101539-abc123", since, "another-boot", 123)


def test_a_second_tail_is_refused_in_one_line_naming_the_running_one_and_its_end_frees_the_pipeline(store):
    said: list[str] = []
    with tail_claim.claimed(store, "demo", "tail-1", said.append) as mine:
        with pytest.raises(TailRunning) as refused:
            tail_claim.claim(store, "demo", "tail-2", said.append)
        with pytest.raises(TailRunning):  # the planner's check refuses the same way
            tail_claim.check_free(store, "demo")
        line = str(refused.value)
        assert "\n" not in line and re.fullmatch(
            rf"a tail of demo is running already, on host {re.escape(mine.host)}, pid {os.getpid()}, since "
            r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(\d+s ago\), run tail-1; one tail per pipeline", line), line
        assert tail_claim.status_line(store).startswith(f"tail: running on host {mine.host}, pid {os.getpid()}")
    assert tail_claim.in_force(store) is None and tail_claim.status_line(store) == "tail: not running"
    with tail_claim.claimed(store, "demo", "tail-3", said.append):
        pass
    assert said == []


def test_a_claim_whose_process_is_gone_is_taken_over_and_said_so(store):
    here = tail_claim.mine("tail-killed")
    dead = TailClaim(here.host, exited_pid(), "tail-killed", time.time() - 60, here.boot, here.started)
    assert store.create("tail/claims/000000000004.json", dead.to_json())
    assert tail_claim.status_line(store).startswith("tail: not running (the last one, on host ")
    said: list[str] = []
    generation, _ = tail_claim.claim(store, "demo", "tail-next", said.append)
    assert generation == 5 and [line.split(" (")[0] for line in said] == ["took over the claim of a tail that is gone"]
    assert "run tail-killed" in said[0]
    assert [i.base_name for i in store.list("tail/claims")] == ["000000000005.json"]


def test_a_claim_on_another_host_is_refused_while_recent_or_heartbeating_and_taken_over_once_silent(store):
    now = time.time()
    store.create("tail/claims/000000000000.json", other_host(now - 5).to_json())
    with pytest.raises(TailRunning, match=r"on host worker-7, pid 4242, since .* \(5s ago\), run tail-2026"):
        tail_claim.check_free(store, "demo")
    store.delete("tail/claims/000000000000.json")
    store.create("tail/claims/000000000000.json", other_host(now - 3_600).to_json())
    write_health(store, TailHealth(alive_at=now, trigger_interval_seconds=30, freshness_objective_seconds=20,
                                   max_offsets_per_batch=1000))
    with pytest.raises(TailRunning, match=r"\(1h00m ago\)"):
        tail_claim.check_free(store, "demo")  # its heartbeat says it runs
    write_health(store, TailHealth(alive_at=now - 600, trigger_interval_seconds=30, freshness_objective_seconds=20,
                                   max_offsets_per_batch=1000))
    said: list[str] = []
    assert tail_claim.claim(store, "demo", "tail-here", said.append)[0] == 1 and len(said) == 1


@pytest.mark.parametrize("where", ["local", "s3"])
def test_of_two_tails_claiming_at_once_exactly_one_gets_it(where, request):
    store: StateStore = request.getfixturevalue("store" if where == "local" else "s3_store")
    first = store.create("tail/claims/000000000000.json", '{"who": 1}')
    second = store.create("tail/claims/000000000000.json", '{"who": 2}')
    assert (first, second) == (True, False)
    assert store.get("tail/claims/000000000000.json") == '{"who": 1}'


def test_a_claim_of_a_process_that_ended_but_was_never_collected_is_gone(store):
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        here = tail_claim.mine("tail-zombie")
        claim = TailClaim(here.host, proc.pid, "tail-zombie", time.time(), here.boot, started_at(proc.pid))
        assert not tail_claim.gone(claim, store)
        os.kill(proc.pid, signal.SIGKILL)  # not waited for: a zombie, as under a parent that never collects it
        deadline = time.monotonic() + 10
        while not tail_claim.gone(claim, store):
            assert time.monotonic() < deadline, "a killed process's claim still counts as running"
            time.sleep(0.05)
    finally:
        proc.kill()
        proc.wait()
