"""A remote Spark Connect server: Spark's own, started the standard way on a standalone cluster, no tailfill there.

The session's cluster (``spark_cluster``: a master and two 1-core workers on loopback) runs a Connect
server with ``spark-submit --class …SparkConnectServer --master spark://…``, the shape of a cluster's
``sc://`` endpoint. Neither the server's Python processes (the streaming source's planner, the
``foreachBatch`` worker) nor the executors' have tailfill: its code reaches them only as the session's
artifact. The CLI reaches the server through ``TAILFILL_SPARK_REMOTE``; every offset lands once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import assert_exactly_once, high_watermarks

from tailfill.dev.broker import free_port
from tailfill.dev.sample import produce_sample
from tailfill.run import runtime
from tailfill.run.runners import SERVED_BY

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("connect_leaves_no_trace")]

TAILFILL = str(Path(sys.executable).parent / "tailfill")


@pytest.fixture(scope="module")
def cluster_connect(spark_cluster, tmp_path_factory):
    """A Connect server on the cluster, its Python processes on the cluster's Python without tailfill."""
    folder = tmp_path_factory.mktemp("connect-on-cluster")
    port = free_port()
    python = str(spark_cluster.executor_python)
    conf = {"spark.connect.grpc.binding.address": "127.0.0.1", "spark.connect.grpc.binding.port": str(port),
            "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1", "spark.ui.enabled": "false",
            "spark.sql.session.timeZone": "UTC", "spark.python.worker.reuse": "true",
            "spark.pyspark.python": python, "spark.executor.memory": "512m", "spark.driver.memory": "1g",
            "spark.default.parallelism": "2"}
    cmd = [runtime.spark_submit(), "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
           "--master", spark_cluster.url]
    for key, value in conf.items():
        cmd += ["--conf", f"{key}={value}"]
    env = {k: v for k, v in spark_cluster.env.items() if k != "SPARK_DAEMON_MEMORY"}  # the master's and workers'
    env.update({"PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python})
    with (folder / "server.log").open("ab") as log:
        server = subprocess.Popen([*cmd, "spark-internal"], env=env, cwd=folder, stdout=log, stderr=subprocess.STDOUT,
                                  start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while True:
            assert server.poll() is None and time.monotonic() < deadline, (folder / "server.log").read_text()[-3000:]
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            time.sleep(0.5)
        yield f"sc://127.0.0.1:{port}", folder
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


def test_backfill_and_tail_on_a_remote_connect_server_without_tailfill_exactly_once(cluster_connect, make_pipeline,
                                                                                   tmp_path):
    url, _ = cluster_connect
    cfg = make_pipeline(name="remote", backfill__max_offsets_per_batch=3_000, backfill__batch_seconds=None)
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 12_000, cfg.source.partitions, bad_every=499)
    env = {**os.environ, "TAILFILL_SPARK_REMOTE": url}
    env.pop("TAILFILL_SPARK", None)  # auto: the configured server
    done = subprocess.run([TAILFILL, "backfill", str(cfg.path)], env=env, capture_output=True, text=True,
                          timeout=900, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    assert f"Spark: Spark Connect at {url} (configured)" in done.stderr
    assert f"{SERVED_BY} {url}" in done.stderr
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 2_000, cfg.source.partitions, bad_every=499)
    done = subprocess.run([TAILFILL, "tail", str(cfg.path), "--once"], env=env, capture_output=True, text=True,
                          timeout=900, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    assert_exactly_once(cfg, high_watermarks(cfg))
