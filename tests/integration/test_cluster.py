"""Beyond local[2]: the CLI on a Spark standalone cluster whose executors do not have tailfill.

The session's cluster (``spark_cluster``: a master and two 1-core workers on loopback) runs its
executors on a Python with every dependency of tailfill but not tailfill itself, as a cluster
image built from the dependencies would: the job has to bring its code (``--py-files``). Runs go
through ``tailfill backfill|tail … --master spark://… --conf …`` exactly as a user types them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import assert_exactly_once, high_watermarks, provision

from tailfill.dev.sample import produce_sample
from tailfill.lake.ledger import read_ledger
from tailfill.offsets import total
from tailfill.pipeline.handle import open_pipeline
from tailfill.proof.validate import validate
from tailfill.run.runtime import code_archive_path

pytestmark = pytest.mark.integration

TAILFILL = str(Path(sys.executable).parent / "tailfill")


def cluster_args(cluster) -> list[str]:
    return ["--master", cluster.url, "--conf", f"spark.pyspark.python={cluster.executor_python}",
            "--conf", "spark.executor.memory=512m"]


def tailfill(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([TAILFILL, *args], capture_output=True, text=True, cwd=cwd, timeout=600)


def new_apps(cluster, before: dict[str, set[Path]]) -> dict[str, list[Path]]:
    """Executor folders each worker made since ``before``."""
    return {name: [p for p in cluster.executors_of(name) if p not in before.get(name, set())]
            for name in cluster.worker_dirs}


def test_backfill_slices_survive_a_killed_worker_and_the_tail_runs_on_a_standalone_cluster(
        spark_cluster, make_pipeline, tmp_path):
    """Two backfill slices on the cluster, one of its two workers SIGKILLed (with its executor) while
    batches commit, then the tail: every offset once, validated; each executor ran the shipped archive."""
    cluster = spark_cluster
    probe = subprocess.run([str(cluster.executor_python), "-c", "import tailfill"], capture_output=True, text=True,
                           cwd=tmp_path)
    assert probe.returncode != 0 and "No module named 'tailfill'" in probe.stderr, "executors must lack tailfill"
    count, batch = 24_000, 1_500
    cfg = make_pipeline(name="cluster", backfill__slices=2, backfill__max_offsets_per_batch=batch,
                        backfill__batch_seconds=None)
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, count, 4, bad_every=501)
    data, _ = provision(cfg)  # as `tailfill backfill` plans them: watched from here while it runs
    before = {name: set(cluster.executors_of(name)) for name in cluster.worker_dirs}
    log_path = tmp_path / "backfill.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen([TAILFILL, "backfill", str(cfg.path), *cluster_args(cluster)], cwd=tmp_path,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    victim = None
    try:
        # Wait until batches are committing with executors on both workers, then lose one worker.
        deadline = time.monotonic() + 300
        while True:
            assert proc.poll() is None, f"ended before a worker was killed:\n{log_path.read_text()[-4000:]}"
            assert time.monotonic() < deadline, f"no commit within 300 s:\n{log_path.read_text()[-4000:]}"
            data.refresh()
            committed = total(read_ledger(data).committed)
            apps = new_apps(cluster, before)
            if committed and all(apps.values()):
                break
            time.sleep(0.5)
        assert committed < count
        # The executors ran on both workers, each with the archive it was sent, not an installed tailfill.
        for folders in apps.values():
            assert any((f / code_archive_path().name).exists() for f in folders), folders
        victim = sorted(cluster.workers)[-1]
        cluster.kill_worker(victim)
        print(f"killed {victim} after {committed} of {count} offsets were committed")
        code = proc.wait(timeout=600)
        output = log_path.read_text()
        assert code == 0, output[-6000:]
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        if victim is not None:  # the session's cluster gets its second worker back
            cluster.start_worker(victim)
            cluster.wait_for_workers(2)
    assert "backfill of cluster: summary" in output
    history = high_watermarks(cfg)
    assert sum(history.values()) == count
    assert_exactly_once(cfg, history)

    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 4_000, 4, bad_every=501)
    done = tailfill("tail", str(cfg.path), "--once", *cluster_args(cluster), cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    assert "tail of cluster: summary" in done.stdout
    high = high_watermarks(cfg)
    assert sum(high.values()) == count + 4_000
    _, bad = assert_exactly_once(cfg, high)
    assert bad, "the sample's bad records should be quarantined"
    report = validate(open_pipeline(cfg), all_runs=True)
    assert report.success, report.problems
    assert report.offsets_checked == count + 4_000
