"""Completeness validation on a real committed table, untampered and tampered five ways.

Each tamper must make ``tailfill validate`` fail naming the exact ``topic[partition] [start, end)``.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from helpers import backfill, tables_of, tail
from pyiceberg.expressions import And, EqualTo

from tailfill import cli
from tailfill.dev.sample import produce_sample
from tailfill.lake.batch_summary import BatchSummary
from tailfill.lake.ledger import commit_batch, read_ledger
from tailfill.offsets import OffsetRange, TopicPartition, ranges_to_json
from tailfill.pipeline.handle import open_pipeline
from tailfill.plumbing.warehouse import filesystem, fs_path
from tailfill.proof.completeness import islands
from tailfill.proof.result import ValidationResult
from tailfill.proof.validate import validate

pytestmark = pytest.mark.integration


@pytest.fixture
def ingested(spark, make_pipeline):
    """A pipeline whose backfill and tail have run: 2,800 offsets over 4 partitions, some quarantined."""
    cfg = make_pipeline(backfill__slices=2, backfill__max_offsets_per_batch=600, tail__min_offsets_per_batch=100,
                        tail__max_offsets_per_batch=500)
    bs, topic = cfg.source.bootstrap_servers, cfg.source.topic
    produce_sample(bs, topic, 2_000, 4, bad_every=97)
    backfill(spark, cfg)
    produce_sample(bs, topic, 800, 4, bad_every=97)
    tail(spark, cfg)
    return cfg


def data_file_offsets(cfg, table) -> tuple[object, TopicPartition, np.ndarray]:
    """The first data file of the table, its partition and its sorted offsets."""
    task = next(iter(table.scan().plan_files()))
    rows = pq.read_table(fs_path(task.file.file_path), filesystem=filesystem(cfg.target))
    parts = set(rows["kafka_partition"].to_pylist())
    assert len(parts) == 1  # one file per task per batch: a single partition
    return task.file, TopicPartition(cfg.source.topic, parts.pop()), np.sort(rows["kafka_offset"].to_numpy())


def assert_fails_naming(cfg, expected: list[str], capsys, all_runs: bool = True) -> ValidationResult:
    report = validate(open_pipeline(cfg), all_runs=all_runs)
    assert not report.success
    for line in expected:
        assert line in report.problems, (line, report.problems)
    # The CLI says the same and exits 1.
    assert cli.main(["validate", cfg.path, "--all"]) == 1
    out = capsys.readouterr().out
    assert all(line in out for line in expected)
    return report


def failed_expectations(report: ValidationResult, suite: str) -> set[tuple[str, str]]:
    """(expectation, column) of each expectation that the Great Expectations suite itself failed."""
    [result] = [r for r in report.suites if r["suite"] == suite]
    assert not result["success"], f"suite {suite} passed on a tampered table"
    return {(f["expectation"], f["kwargs"].get("column") or f["kwargs"]["column_A"]) for f in result["failed"]}


RUN, TILING = "tailfill_run_completeness", "tailfill_table_tiling"
BETWEEN = "expect_column_values_to_be_between"


def test_untampered_table_passes_and_reports_are_written(spark, ingested, capsys):
    cfg = ingested
    report = validate(open_pipeline(cfg))  # the latest run: the tail
    assert report.success, report.problems
    assert report.scope.startswith("run tail-") and report.offsets_checked == 800
    everything = validate(open_pipeline(cfg), all_runs=True)
    assert everything.success and everything.offsets_checked == 2_800
    assert {s["suite"] for s in everything.suites} == {"tailfill_run_completeness", "tailfill_table_tiling",
                                                         "tailfill_data_checks"}
    assert sum(p["rows"] + p["quarantined"] for p in everything.partitions) == 2_800

    fs = filesystem(cfg.target)
    saved = json.loads(fs.open_input_stream(fs_path(everything.paths["json"])).read())
    assert saved["success"] and saved["partitions"] == everything.partitions
    page = fs.open_input_stream(fs_path(everything.paths["html"])).read().decode()
    assert "COMPLETE" in page and "<svg" in page
    assert (everything.paths["data_docs"] or "").endswith("index.html")

    assert cli.main(["validate", cfg.path, "--all"]) == 0
    assert cli.main(["status", cfg.path]) == 0
    assert "latest validation: all runs, complete" in capsys.readouterr().out


def test_deleted_data_file_is_named_as_missing(spark, ingested, capsys):
    cfg = ingested
    data, _ = tables_of(cfg)
    data_file, tp, offsets = data_file_offsets(cfg, data)
    with data.transaction() as tx, tx.update_snapshot().overwrite() as overwrite:
        overwrite.delete_data_file(data_file)
    data.refresh()
    assert data_file.file_path not in {t.file.file_path for t in data.scan().plan_files()}
    expected = islands(tp, offsets)
    report = assert_fails_naming(cfg, [], capsys)
    missing = [p for p in report.problems if p.startswith("missing")]
    assert [m.split(" (run")[0] for m in missing] == [f"missing {r}" for r in expected]
    assert {(BETWEEN, "missing_offsets"), ("expect_column_pair_values_to_be_equal", "stored")} <= failed_expectations(
        report, RUN)


def test_duplicated_data_file_is_named_as_duplicated(spark, ingested, capsys):
    cfg = ingested
    data, _ = tables_of(cfg)
    data_file, tp, offsets = data_file_offsets(cfg, data)
    data.add_files([data_file.file_path], check_duplicate_files=False)
    report = assert_fails_naming(cfg, [], capsys)
    duplicated = [p.split(" (run")[0] for p in report.problems if p.startswith("duplicated")]
    assert duplicated == [f"duplicated {r}" for r in islands(tp, offsets)]
    assert (BETWEEN, "duplicated_offsets") in failed_expectations(report, RUN)


def test_deleted_quarantine_rows_are_named_as_missing(spark, ingested, capsys):
    cfg = ingested
    _, quarantine = tables_of(cfg)
    bad = quarantine.scan().to_arrow()
    assert bad.num_rows >= 4
    partition, offset = bad["kafka_partition"][0].as_py(), bad["kafka_offset"][0].as_py()
    quarantine.delete(And(EqualTo("kafka_partition", partition), EqualTo("kafka_offset", offset)))
    gone = OffsetRange(cfg.source.topic, partition, offset, offset + 1)
    report = assert_fails_naming(cfg, [], capsys)
    assert [p.split(" (run")[0] for p in report.problems] == [f"missing {gone}"]
    assert (BETWEEN, "missing_offsets") in failed_expectations(report, RUN)


def test_overlapping_commit_is_named(spark, ingested, capsys):
    cfg = ingested
    data, _ = tables_of(cfg)
    overlap = OffsetRange(cfg.source.topic, 1, 100, 150)
    # A writer that ignored the ledger: a snapshot claiming offsets another snapshot already holds.
    summary = {"tailfill.pipeline": cfg.name, "tailfill.run-id": "rogue", "tailfill.batch-id": "0",
               "tailfill.ranges": ranges_to_json([overlap]), "tailfill.records-read": "50"}
    with data.transaction() as tx, tx.update_snapshot(snapshot_properties=summary).fast_append():
        pass
    report = assert_fails_naming(cfg, [f"overlapping committed ranges {overlap}"], capsys)
    assert failed_expectations(report, TILING) == {(BETWEEN, "overlap_offsets")}


def test_skipped_range_is_named_as_gap(spark, ingested, capsys):
    cfg = ingested
    data, _ = tables_of(cfg)
    end = read_ledger(data).committed[0].end
    skipped = OffsetRange(cfg.source.topic, 0, end, end + 5)
    claimed = OffsetRange(cfg.source.topic, 0, end + 5, end + 10)
    # A commit that jumped ahead: the ledger now has a hole, and the claimed range holds no rows.
    commit_batch(data, BatchSummary(cfg.name, "jumper", 0, [claimed]), [], rewrite=lambda files, keep: [])
    report = assert_fails_naming(cfg, [f"gap between committed ranges {skipped}",
                                              f"missing {claimed} (run jumper, batch 0)"], capsys)
    assert (BETWEEN, "gap_offsets") in failed_expectations(report, TILING)
    assert (BETWEEN, "missing_offsets") in failed_expectations(report, RUN)


def test_failing_data_expectation_fails_validation(spark, ingested):
    cfg = ingested.model_copy(update={"expectations": [
        ingested.expectations[0].model_copy(update={"column": "kind", "not_null": False,
                                                   "accepted_values": ["view"]})]})
    report = validate(open_pipeline(cfg))
    assert not report.success
    [problem] = report.problems
    assert problem.startswith("data expectation failed: kind in ['view']:")
    assert problem.endswith("values unexpected, e.g. 'click', 'purchase', 'refund'")  # the sample's other kinds
    assert failed_expectations(report, "tailfill_data_checks") == {
        ("expect_column_pair_values_a_to_be_greater_than_b", "allowed_fraction")}
