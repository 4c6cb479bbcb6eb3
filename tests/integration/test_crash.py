"""Crash safety: the spark-submit process tree is SIGKILLed mid-run, then the run is repeated.

The kill lands either while executors are writing data files or between the write and the
Iceberg commit, after earlier batches have committed. Whatever was prepared but not committed is
replayed; each offset ends up in the table exactly once and orphaned files are never referenced.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from helpers import assert_exactly_once, backfill, high_watermarks, kill_job_tree

from tailfill.dev.sample import produce_sample
from tailfill.lake.ledger import read_ledger
from tailfill.lake.tables import ensure_tables
from tailfill.offsets import total
from tailfill.run.submit import backfill_spec, spark_submit_command, submit_env

pytestmark = pytest.mark.integration

BATCH = 4_000


@pytest.mark.parametrize(("point", "skip"), [("while-writing", 4), ("before-commit", 2)])
def test_sigkill_mid_run_then_rerun_lands_each_offset_once(spark, make_pipeline, home, tmp_path, point, skip):
    cfg = make_pipeline(backfill__slices=1, backfill__max_offsets_per_batch=BATCH)
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 20_000, 4, bad_every=501)
    fault_dir = tmp_path / "faults"
    env = submit_env() | {"TAILFILL_HOME": str(home), "TAILFILL_FAULT_PAUSE": point,
                          "TAILFILL_FAULT_DIR": str(fault_dir), "TAILFILL_FAULT_SKIP": str(skip)}
    log = (tmp_path / "job.log").open("w")
    proc = subprocess.Popen(spark_submit_command(backfill_spec(cfg)),
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while not (fault_dir / point).exists():
            tail = (tmp_path / "job.log").read_text()[-3000:]
            assert proc.poll() is None, f"job ended before the fault point: {tail}"
            assert time.monotonic() < deadline, "job never reached the fault point"
            time.sleep(0.2)
    finally:
        kill_job_tree(proc, f"TAILFILL_FAULT_DIR={fault_dir}".encode())
        log.close()

    data, _ = ensure_tables(cfg)
    committed = total(read_ledger(data).committed)
    if point == "before-commit":
        assert committed == skip * BATCH  # the batches before the kill, and nothing of the killed one
    else:
        assert committed < 20_000
    on_disk = {str(p) for p in Path(cfg.target.warehouse).rglob("*.parquet")}
    data.refresh()
    referenced = {t.file.file_path.removeprefix("file://") for t in data.scan().plan_files()}
    assert referenced <= on_disk, "a committed snapshot references a file that is not there"
    killed = on_disk - referenced  # what the killed attempt prepared and never committed
    if point == "while-writing":
        assert killed, "the killed attempt should have left unreferenced, half-written files"

    results = backfill(spark, cfg)
    assert sum(r.offsets for r in results) >= 20_000 - committed
    assert_exactly_once(cfg, high_watermarks(cfg))
    data.refresh()
    referenced_after = {t.file.file_path.removeprefix("file://") for t in data.scan().plan_files()}
    assert not killed & referenced_after, "a file of the killed attempt became part of the table"
    assert referenced_after <= {str(p) for p in Path(cfg.target.warehouse).rglob("*.parquet")}
