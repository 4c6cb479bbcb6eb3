"""A REST catalog over a table bucket (SeaweedFS's ``weed mini -tableBucket=warehouse``), as a new user meets it.

The operations page's REST example without its ``state_root`` (the pipeline of the report: catalog and target on
``s3://warehouse``, ``target.s3`` with an endpoint and key variables) stops every run at its start, before the
catalog, the broker or Spark, with one line naming each place the bucket refuses, the bucket, the error and the
fix; the example as written, its state root on an ordinary bucket, backfills, tails, validates and reports, and an
independent pyiceberg client reads every offset back exactly once through the REST catalog."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
import yaml

from tailfill import cli
from tailfill.dev.sample import produce_sample
from tailfill.errors import PreflightError
from tailfill.run.contract import JobSpec
from tailfill.run.spark_job import run_to_result

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
TAILFILL = str(Path(sys.executable).parent / "tailfill")
DENIED = "(bucket warehouse: AWS Error ACCESS_DENIED during CreateMultipartUpload operation: Access Denied.)"
FIX = "(fix: target.state_root: s3://<an ordinary bucket>/… on the same S3 endpoint"


def docs_rest_target(seaweedfs) -> dict:
    """The ``target`` of the operations page's REST example as the page writes it, its two addresses (the catalog's
    and S3's) SeaweedFS's."""
    page = (REPO / "docs" / "operations.md").read_text()
    found = re.search(r"```yaml\n(target:\n  catalog: \{type: rest.*?)```", page, re.S)
    assert found, "docs/operations.md has no REST example"
    target = yaml.safe_load(found.group(1))["target"]
    assert (target["catalog"]["uri"], target["s3"]["endpoint"]) == ("http://catalog:8181", "http://s3:8333")
    target["catalog"]["uri"], target["s3"]["endpoint"] = seaweedfs.rest_uri, seaweedfs.s3_endpoint
    return target


def write_pipeline(folder: Path, name: str, bootstrap: str, topic: str, target: dict) -> None:
    """The demo pipeline as ``folder/<name>.yaml``, reading ``topic``, writing to ``target``: nothing else changed."""
    data = yaml.safe_load((REPO / "pipelines" / "demo.yaml").read_text())
    data["name"] = name
    data["source"] |= {"bootstrap_servers": bootstrap, "topic": topic}
    data["target"] = target
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.yaml").write_text(yaml.safe_dump(data))


def offsets_in(catalog, table: str) -> Counter:
    """(partition, offset) counts of ``table``, read by a pyiceberg client of its own."""
    arrow = catalog.load_table(table).scan(selected_fields=("kafka_partition", "kafka_offset")).to_arrow()
    return Counter(zip(arrow["kafka_partition"].to_pylist(), arrow["kafka_offset"].to_pylist(), strict=True))


def test_a_table_bucket_stops_the_run_in_one_line_and_the_docs_example_works_as_written(broker, seaweedfs, tmp_path):
    target = docs_rest_target(seaweedfs)
    state_root = target.pop("state_root")  # the report's pipeline: no state root
    name, topic, home = "clicks", f"t-{uuid.uuid4().hex[:10]}", tmp_path / "home"
    env = {**os.environ, "TAILFILL_HOME": str(home), "TAILFILL_PIPELINES": str(tmp_path / "pipelines"),
           "CATALOG_CREDENTIAL": seaweedfs.credential}

    def tailfill(*command: str) -> subprocess.CompletedProcess:
        return subprocess.run([TAILFILL, *command], env=env, capture_output=True, text=True, timeout=900)

    write_pipeline(tmp_path / "pipelines", name, broker.bootstrap_servers, topic, target)
    produce_sample(broker.bootstrap_servers, topic, 20_000, 4, bad_every=1_000)
    root = f"s3://warehouse/_tailfill/{name}"
    for command in (("backfill", name), ("tail", name, "--once")):
        started = time.monotonic()
        done = tailfill(*command)
        took = time.monotonic() - started
        lines = (done.stdout + done.stderr).splitlines()
        assert done.returncode == 2, lines[-20:]
        assert len(lines) == 1, lines[:40]  # no traceback, no attempts: the one line
        assert lines[0].startswith(f"error: the run state {root}, "), lines[0]
        assert (f"the batch audit {root}/audit/analytics.clicks/batches and "
                f"{root}/audit/analytics.clicks_quarantine/batches") in lines[0]
        assert DENIED in lines[0] and "warehouse, target.warehouse and the REST catalog's warehouse, is a table " \
                                      "bucket" in lines[0]
        assert FIX in lines[0]
        assert took < 60, f"{command[0]} took {took:.0f}s to refuse"  # it used to read a batch, three times
    # Nothing read, made or committed: no Spark job was prepared, no query checkpoint, no table in the catalog.
    assert not (home / "dist").exists() and not (home / "logs").exists()
    assert not (home / "checkpoints" / name / "backfill").exists()
    catalog = seaweedfs.catalog()
    assert ("analytics",) not in catalog.list_namespaces()

    target["state_root"] = state_root  # as the line says, and as the docs' example has it: an ordinary bucket
    write_pipeline(tmp_path / "pipelines", name, broker.bootstrap_servers, topic, target)
    done = tailfill("backfill", name)
    assert done.returncode == 0, (done.stdout + done.stderr)[-5000:]
    assert f"backfill of {name}: summary" in done.stdout
    produce_sample(broker.bootstrap_servers, topic, 4_000, 4, bad_every=1_000)  # after the cutover: the tail's
    done = tailfill("tail", name, "--once")
    assert done.returncode == 0, (done.stdout + done.stderr)[-5000:]
    assert f"tail of {name}: summary" in done.stdout
    done = tailfill("validate", name, "--all")
    assert done.returncode == 0, (done.stdout + done.stderr)[-5000:]
    assert "COMPLETE (24,000 offsets checked" in done.stdout
    assert f"report: {state_root}/_validation/{name}/all-" in done.stdout
    done = tailfill("status", name)
    assert done.returncode == 0, (done.stdout + done.stderr)[-5000:]
    assert "committed offsets: 24,000   quarantined rows: 24   lag: 0   gaps: 0" in done.stdout
    assert "latest validation: all runs, complete" in done.stdout

    rows, quarantined = offsets_in(catalog, "analytics.clicks"), offsets_in(catalog, "analytics.clicks_quarantine")
    assert rows + quarantined == Counter({(p, o): 1 for p in range(4) for o in range(6_000)})
    assert not set(rows) & set(quarantined) and sum(quarantined.values()) == 24
    assert catalog.load_table("analytics.clicks").location().startswith("s3://warehouse/")  # the table bucket's


def test_every_way_a_run_starts_refuses_before_it_reads(make_pipeline, seaweedfs, dag_factory, capsys):
    cfg = make_pipeline("bucket_only", rest=seaweedfs, target__warehouse="s3://warehouse")
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 100, 4)
    audit = f"the batch audit s3://warehouse/_tailfill/bucket_only/audit/{cfg.target.namespace}.{cfg.target.table}/"
    # The DAGs' plan and tune tasks (the planner), and the job as it starts in a process of its own (spark-submit,
    # an Airflow worker's operator) or on Spark Connect, given a spec planned elsewhere.
    for start in (lambda: dag_factory.plan_lanes(cfg, {}, "manual__1"),
                  lambda: dag_factory.tune_tail(cfg, "scheduled__1")):
        with pytest.raises(PreflightError) as refused:
            start()
        assert audit in str(refused.value) and DENIED in str(refused.value) and FIX in str(refused.value)
    lines: list[str] = []
    result = run_to_result(JobSpec(cfg.ref, "tail", "tail-1", once=True), None, lines.append, lines.append)
    assert result.error is not None and result.error.error_class == "PreflightError"
    assert audit in result.error.message and FIX in result.error.message
    assert lines == [f"error: {result.error.message}"]
    assert (cfg.target.namespace,) not in seaweedfs.catalog().list_namespaces()  # nothing made

    assert cli.main(["preflight", str(cfg.path), "--mode", "backfill"]) == 1
    out = capsys.readouterr().out
    assert "preflight of bucket_only (backfill) FAILED: the run state s3://warehouse/_tailfill/bucket_only, " in out
    assert audit in out and FIX in out
