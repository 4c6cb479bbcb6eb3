"""Typed results: plain JSON for machines (``asdict``), the same text people read (``asstr``)."""

from __future__ import annotations

import json

from tailfill.errors import ConfigError, ErrorInfo
from tailfill.pipeline.load import load_pipeline
from tailfill.proof.reports import render_html
from tailfill.proof.result import ValidationResult
from tailfill.run.contract import IngestResult, JobResult, parse_result
from tailfill.run.maintain import MaintenanceResult, TableUpkeep
from tailfill.upkeep.compact import CompactionResult
from tailfill.upkeep.expire import ExpiryResult
from tailfill.upkeep.orphans import OrphanResult

PARTITIONS = [{"topic": "events", "partition": 0, "expected": 100, "found": 90, "rows": 80, "quarantined": 10,
               "missing": 10, "duplicated": 0, "ok": False}]


def test_a_validation_survives_json_and_reads_as_the_cli_prints_it():
    result = ValidationResult("demo", "run-1", "run run-1", ["run-1"], "2026-01-01T00:00:00+00:00", False,
                              ["missing events[0] [90, 100)"], 100, partitions=PARTITIONS,
                              suites=[{"suite": "tailfill_run_completeness", "success": False, "failed": []}],
                              timings_s={"total": 1.25}, paths={"html": "file:///r.html", "json": "file:///r.json"})
    again = ValidationResult.from_dict(json.loads(json.dumps(result.asdict())))
    assert again == result and (again.rows, again.quarantined, again.html) == (80, 10, "file:///r.html")
    text = result.asstr().splitlines()
    assert text[0] == "validation of demo, run run-1: INCOMPLETE (100 offsets checked in 1.2s)"
    assert text[2].split() == ["events[0]", "100", "90", "80", "10", "10", "0"]
    assert "  suite tailfill_run_completeness: FAILED" in text
    assert "  problem: missing events[0] [90, 100)" in text


def test_absent_offsets_read_by_reason_in_the_json_the_cli_and_the_report():
    markers = [f"events[0] [{o}, {o + 1})" for o in range(100, 30_000, 101)]
    absent = [{"reason": "transaction marker", "offsets": len(markers), "ranges": markers},
              {"reason": "aborted transaction", "offsets": 7, "ranges": ["events[1] [3, 10)"]}]
    result = ValidationResult("demo", "all-1", "all runs", ["run-1"], "2026-01-01T00:00:00+00:00", True, [], 30_000,
                              absent_by_reason=absent)
    assert ValidationResult.from_dict(json.loads(json.dumps(result.asdict()))).absent_by_reason == absent
    text = result.asstr().splitlines()
    assert ("  absent: 297 offsets, transaction marker: events[0] [100, 101), events[0] [201, 202), "
            "events[0] [302, 303) and 294 more ranges") in text
    assert "  absent: 7 offsets, aborted transaction: events[1] [3, 10)" in text
    page = render_html(result)
    assert "<td>297</td>" in page and "events[0] [20199, 20200)" in page and "and 97 more ranges" in page
    assert "events[0] [20300, 20301)" not in page  # the 201st: the JSON lists every range, the page 200
    older = {k: v for k, v in result.asdict().items() if k != "absent_by_reason"}  # a result saved before
    assert ValidationResult.from_dict(older).absent_by_reason == []


def test_a_maintenance_result_is_json_for_the_dag_and_one_line_per_table_for_people():
    settings = load_pipeline("pipelines/demo.yaml").maintenance
    assert settings is not None
    upkeep = TableUpkeep("ns.events", CompactionResult("ns.events", 12, 2, 4096, 2, 4000),
                         ExpiryResult("ns.events", 3, 3, None, 2), OrphanResult("ns.events", 9, ["a", "b"], 50, 1))
    result = MaintenanceResult("demo", settings, [upkeep], 0.5)
    data = json.loads(json.dumps(result.asdict()))
    assert data["tables"][0]["orphans"]["deleted"] == 2 and data["tables"][0]["compaction"]["files_removed"] == 12
    assert result.asstr().splitlines()[1] == (
        "  ns.events: compacted 12 files into 2 (2 data files, 4,000 B live); expired 3 snapshots (3 batch audits "
        "archived, 2 left); removed 2 orphaned files (50 B, 1 too young to remove)")


def test_the_jobs_result_is_one_document_read_back_by_one_function():
    done = JobResult([IngestResult("run-1", "demo tail", batches=2, offsets=10, rows=9, quarantined=1)])
    lines = ["[tail] batch 0 committed", done.line(), "a JVM line after it"]
    assert parse_result(lines) == done
    failed = parse_result([JobResult(error=ErrorInfo.of(ConfigError("no such topic"))).line()])
    assert failed is not None and failed.results == [] and failed.error.error_class == "ConfigError"
    assert failed.error.fix == "correct the pipeline YAML as the message says" and not failed.error.retryable
    assert failed.asstr() == "failed: ConfigError: no such topic (fix: correct the pipeline YAML as the message says)"
    assert done.asstr() == "done: demo tail: 10 offsets in 2 batches"
    assert parse_result(["no document here"]) is None
