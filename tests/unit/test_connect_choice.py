"""Spark Connect without a server: the runner choice and its reason, the lease, addresses, the server command."""

from __future__ import annotations

import json
import socket
import time

import pytest

from tailfill.errors import ConfigError, JobCancelled
from tailfill.run import connect_batch, connect_server
from tailfill.run.contract import JobSpec
from tailfill.run.query_state import QueryState, Tally
from tailfill.run.runners import ConnectRunner, SparkSubmitRunner, choose_runner
from tailfill.run.spark_connect import redact_url


def test_auto_takes_a_configured_server_then_a_running_local_one_then_spark_submit_and_says_why(
        tmp_path, monkeypatch):
    monkeypatch.setenv("TAILFILL_HOME", str(tmp_path))
    monkeypatch.delenv("TAILFILL_SPARK", raising=False)
    monkeypatch.delenv("TAILFILL_SPARK_REMOTE", raising=False)
    said: list[str] = []
    assert isinstance(choose_runner(say=said.append), SparkSubmitRunner)
    assert said[-1].startswith("Spark: spark-submit: no Spark Connect server configured")
    monkeypatch.setenv("TAILFILL_SPARK_REMOTE", "sc://spark.example:15002/;token=t0ps3cret")
    runner = choose_runner(say=said.append)
    assert isinstance(runner, ConnectRunner) and runner.remote.startswith("sc://spark.example:15002")
    assert said[-1] == "Spark: Spark Connect at sc://spark.example:15002/;token=*** (configured)"
    monkeypatch.delenv("TAILFILL_SPARK_REMOTE")
    import os

    connect_server.state_file(tmp_path).write_text(json.dumps({"pid": os.getpid(), "url": "sc://127.0.0.1:4",
                                                                "port": 4}))
    runner = choose_runner(say=said.append)
    assert isinstance(runner, ConnectRunner) and runner.remote is None
    assert "this home's local server at sc://127.0.0.1:4 (running)" in said[-1]
    extra = choose_runner(conf={"spark.executor.memory": "2g"}, say=said.append)  # only a new application takes it
    assert isinstance(extra, SparkSubmitRunner) and "spark.executor.memory" in said[-1]
    assert isinstance(choose_runner("connect"), ConnectRunner)  # the caller's word wins, and says nothing


def test_one_runner_choice_from_the_environment_or_the_caller_and_a_removed_or_unknown_mode_is_named(monkeypatch):
    monkeypatch.setenv("TAILFILL_SPARK", "submit")
    assert isinstance(choose_runner(), SparkSubmitRunner)
    assert isinstance(choose_runner("connect"), ConnectRunner)  # the caller's word wins
    runner = choose_runner(master="spark://h:7077", conf={"spark.executor.memory": "2g"}, name="app")
    assert isinstance(runner, SparkSubmitRunner) and (runner.master, runner.conf, runner.name) == (
        "spark://h:7077", {"spark.executor.memory": "2g"}, "app")
    monkeypatch.setenv("TAILFILL_SPARK", "warm")
    with pytest.raises(ConfigError, match=r"^TAILFILL_SPARK='warm': the warm Spark server was removed, Spark Connect "
                                          r"replaces it: use connect \(the modes: auto, connect, submit\)$"):
        choose_runner()
    monkeypatch.setenv("TAILFILL_SPARK", "hot")
    with pytest.raises(ConfigError, match=r"^TAILFILL_SPARK='hot': use auto, connect, submit$"):
        choose_runner()
    monkeypatch.delenv("TAILFILL_SPARK")
    with pytest.raises(ConfigError, match=r"^Spark mode 'warm': the warm Spark server was removed"):
        choose_runner("warm")


def test_the_local_server_address_is_known_even_after_its_death(tmp_path):
    assert not connect_server.serves("sc://127.0.0.1:4242", tmp_path)  # this home never had one
    path = connect_server.state_file(tmp_path)
    path.write_text(json.dumps({"pid": 2 ** 22 + 7, "url": "sc://127.0.0.1:4242", "port": 4242}))
    (tmp_path / "connect-server.lock").touch()  # its supervisor's lock
    assert connect_server.serves("sc://127.0.0.1:4242", tmp_path)
    assert connect_server.serves("sc://localhost:4242/;user_id=a", tmp_path)
    assert not connect_server.serves("sc://127.0.0.1:4243", tmp_path)
    assert not connect_server.serves("sc://spark.example:4242", tmp_path)
    assert connect_server.server_state(tmp_path) is None  # dead: not running, but its port is remembered


def test_the_local_server_is_sparks_own_class_on_loopback_with_the_masters_cores(monkeypatch):
    monkeypatch.setenv("TAILFILL_SPARK_MASTER", "local[3]")
    cmd = connect_server.server_command(4242)
    assert connect_server.SERVER_CLASS in cmd and cmd[-1] == "spark-internal"
    conf = dict(c.split("=", 1) for c in cmd[cmd.index("--master") + 2:-1] if "=" in c)
    assert conf["spark.connect.grpc.binding.address"] == "127.0.0.1"
    assert conf["spark.connect.grpc.binding.port"] == "4242"
    assert conf["spark.default.parallelism"] == "3"
    assert connect_server.master_cores("spark://h:7077") == 2


def test_a_connect_client_s_own_variables_are_not_settings_of_the_job(tmp_path):
    env = {"TAILFILL_X": "1", "SPARK_CONNECT_MODE_ENABLED": "1", "SPARK_REMOTE": "sc://x", "PYTHONPATH": "/a"}
    server = connect_server.server_env(env, tmp_path)
    assert "SPARK_CONNECT_MODE_ENABLED" not in server and "PYTHONPATH" not in server
    assert server["TAILFILL_HOME"] == str(tmp_path)


def test_a_token_never_shows_in_an_address_said_aloud():
    assert redact_url("sc://h:1/;user_id=u;token=abc") == "sc://h:1/;user_id=u;token=***"
    assert redact_url("sc://h:1") == "sc://h:1"


class Conf:
    def __init__(self):
        self.values: dict[str, str] = {}

    def get(self, key, default=None):
        return self.values.get(key, default)

    def set(self, key, value):
        self.values[key] = value

    def unset(self, key):
        self.values.pop(key, None)


def test_a_batch_finding_its_clients_lease_unrenewed_is_cancelled_before_it_prepares(monkeypatch):
    spec = JobSpec("demo", "tail", "tail-1")
    req = type("Req", (), {"run_id": spec.run_id, "name": "tail", "label": "tail"})()
    batch = connect_batch.RemoteBatch(req, "{}", 2, "/budget")
    spark = type("Spark", (), {"conf": Conf()})()
    now = [1000.0]
    monkeypatch.setattr(connect_batch.time, "monotonic", lambda: now[0])
    spark.conf.values[connect_batch.lease_key(req)] = "1"
    batch._check_lease(spark)
    now[0] += connect_batch.LEASE_S - 1
    spark.conf.values[connect_batch.lease_key(req)] = "2"  # renewed: the client is there
    batch._check_lease(spark)
    now[0] += connect_batch.LEASE_S - 1
    batch._check_lease(spark)  # not renewed, but not for long
    now[0] += 2
    with pytest.raises(JobCancelled, match="has not renewed its lease"):
        batch._check_lease(spark)
    pickled = batch.__getstate__()
    assert "_lease" not in pickled and "_handler" not in pickled  # what travels to the server


def test_jobs_on_the_local_server_are_counted_by_live_client_and_the_callers_own_is_not(tmp_path):
    import os

    ours = connect_server.job_file(tmp_path, "backfill-20261124T1200-ab12")
    other = connect_server.job_file(tmp_path, "tail-20261124T1200-cd34")
    gone = connect_server._jobs_dir(tmp_path) / f"tail-old-{2 ** 22 + 7}-deadbeef.job"  # its client died
    for path in (ours, other, gone):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    assert str(os.getpid()) in ours.name
    assert connect_server.busy(tmp_path, besides=ours) == ["tail-20261124T1200-cd34"]
    assert not gone.exists()  # forgotten
    assert connect_server.busy(tmp_path) == ["backfill-20261124T1200-ab12", "tail-20261124T1200-cd34"]


def test_the_client_reads_the_reports_again_only_after_the_handler_published_or_when_told():
    reads: list[int] = []

    class Reports:
        def read(self):
            reads.append(1)
            return []

    req = type("Req", (), {"run_id": "tail-1", "name": "tail", "label": "tail"})()
    spark = type("Spark", (), {"conf": Conf()})()
    state = QueryState(Tally())
    remote = connect_batch.RemoteQuery(spark, req, Reports(), state)
    remote.sync()
    assert len(reads) == 1  # the first look reads them
    remote.sync()
    assert len(reads) == 1 and spark.conf.values[connect_batch.lease_key(req)] == "2"  # the lease renewed all the same
    record = {"step": "committing", "at": 1.0, "latencies": [[1.5], [1.0]]}
    spark.conf.set(connect_batch.record_key(req), json.dumps(record))  # a batch ended on the server
    remote.sync()
    assert len(reads) == 2 and state.step == "committing" and state.tally.latencies.seconds == (1.5,)
    remote.sync()
    assert len(reads) == 2
    remote.sync(force=True)  # the query ended: whatever the record says
    assert len(reads) == 3 and state.tally.latencies.seconds == (1.5,)
    remote.forget()  # a new attempt
    remote.sync()
    assert len(reads) == 4


def _plainly_bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def test_a_replaced_local_server_keeps_its_port_over_the_last_ones_closed_connections():
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        served, _ = listener.accept()
        served.close()  # the server's side closes first: its end of the connection waits in TIME_WAIT on the port
        client.close()
    deadline = time.monotonic() + 2.0
    while _plainly_bindable(port) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _plainly_bindable(port)  # a bind without SO_REUSEADDR is refused: the port looked taken
    assert connect_server._port(port) == port
