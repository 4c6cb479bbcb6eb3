"""``tailfill validate``: prove a run (or the whole table) landed every offset exactly once.

Exact offset accounting (:mod:`tailfill.proof.completeness`, the offsets batches recorded as not delivered
checked against the broker by :mod:`tailfill.proof.broker_check`) produces compact summaries that the
Great Expectations suites in ``expectations/`` check; so do the pipeline's data expectations over
the run's new rows, counted exactly (:mod:`tailfill.proof.data_checks`). The verdict, every missing,
duplicated, overlapping or stray range, and the GE results are persisted beside the table.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import replace
from datetime import UTC, datetime

import pandas as pd

from tailfill.errors import LakeError
from tailfill.lake.audit_log import audit_log
from tailfill.lake.batch_summary import BatchSummary
from tailfill.lake.ledger import read_ledger
from tailfill.lake.replace import replayed_ranges
from tailfill.offsets import OffsetRange, by_partition, intersect_all, merge, total
from tailfill.pipeline.handle import Pipeline
from tailfill.plumbing.disk import naming_full_disk
from tailfill.proof.audit import committed_batches, run_rows, stored_offsets
from tailfill.proof.broker_check import account_absent
from tailfill.proof.completeness import (
    RANGE_COLUMNS,
    TILING_COLUMNS,
    RangeCheck,
    TilingCheck,
    check_batches,
    check_tiling,
    problems,
)
from tailfill.proof.data_checks import DATA_COLUMNS, check_rows, expectation_columns
from tailfill.proof.expectations import DATA_SUITE, RUN_SUITE, TILING_SUITE, exclusive, run_suites
from tailfill.proof.keyed import check_state
from tailfill.proof.reports import gx_root, persist
from tailfill.proof.result import ValidationResult


def _spans(ranges: list[OffsetRange]) -> list[OffsetRange]:
    """Per partition, one window from the first start to the last end (so strays in between show)."""
    return [OffsetRange.of(tp, rs[0].start, max(r.end for r in rs)) for tp, rs in by_partition(ranges).items()]


def within(batches: list[BatchSummary], ranges: list[OffsetRange]) -> list[BatchSummary]:
    """The parts of ``batches`` inside ``ranges``, each a batch of its own ranges' parts (batches without one
    left out): what a replay of ``ranges`` is proven by."""
    out = []
    for b in batches:
        parts = intersect_all(b.ranges, ranges)
        if parts:
            absent = intersect_all(b.absent, parts) if b.absent is not None else None
            out.append(replace(b, ranges=parts, lost=intersect_all(b.lost, parts), absent=absent,
                               records_read=total(parts) - total(absent or []) - total(intersect_all(b.lost, parts))))
    return out


def _partition_rows(checks: list[RangeCheck]) -> list[dict]:
    acc: dict[tuple, dict] = defaultdict(lambda: defaultdict(int))
    for c in checks:
        row = acc[(c.range.topic, c.range.partition)]
        row["expected"] += c.expected
        row["found"] += c.distinct
        row["rows"] += c.rows
        row["quarantined"] += c.quarantined
        row["missing"] += c.not_stored
        row["duplicated"] += total(c.duplicated)
    return [{"topic": t, "partition": p, **row, "ok": not (row["missing"] or row["duplicated"])}
            for (t, p), row in sorted(acc.items())]


def _summary_frame(rows: list[dict], columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame(rows)[columns] if rows else pd.DataFrame(columns=columns)


def validate(pipeline: Pipeline, run_id: str | None = None, all_runs: bool = False) -> ValidationResult:
    """Validate one run (default: the latest that committed) or, with ``all_runs``, the whole table.

    Returns the persisted :class:`ValidationResult` (``success``, ``problems``, per-partition and
    per-suite results, timings, paths). A run that committed nothing (an idle tail) has no ranges to check; the
    table-wide tiling is checked all the same. Reads the tables as they are; a pipeline whose tables were never
    made has nothing to validate (:class:`LakeError`).
    """
    started = time.perf_counter()
    cfg = pipeline.cfg
    tables = pipeline.open_tables()
    if tables is None:
        raise LakeError(f"nothing to validate: the tables of pipeline {cfg.name} were never made (fix: run a "
                        "backfill or a tail first)")
    data, quarantine = tables
    every = committed_batches(audit_log(pipeline.state, data), data)
    ledger = read_ledger(data)
    if all_runs:
        batches, runs, scope = every, list(dict.fromkeys(b.run_id for b in every)), "all runs"
    else:
        run_id = run_id or (every[-1].run_id if every else None)
        batches = [b for b in every if b.run_id == run_id]
        runs = [run_id] if run_id else []
        scope = f"run {run_id}" + ("" if batches else " (committed nothing)") if run_id else "no runs yet"
        replayed = replayed_ranges(data, run_id) if run_id and not batches else []
        if replayed:  # a replay commits no batch of its own: the batches that committed its offsets, cut to them
            batches, scope = within(every, replayed), f"replay {run_id} of {', '.join(map(str, replayed))}"
    claimed = [r for b in batches for r in b.ranges]
    checked_columns = expectation_columns(cfg.expectations) or ["kafka_offset"]
    stored, damaged, data_rows = stored_offsets(data, quarantine, pipeline.fs, None if all_runs else _spans(claimed),
                                                ledger.committed, checked_columns)
    range_checks = check_batches(batches, stored, cfg.completeness.absent_offsets)
    range_checks, absent_by_reason = account_absent(range_checks, cfg.completeness.absent_offsets,
                                                    lambda: pipeline.kafka)
    tiling: list[TilingCheck] = check_tiling(every, ledger.committed, stored)
    found = [d.problem() for d in damaged] + problems(range_checks, tiling)
    state_check = None
    if pipeline.keyed:  # the state table equals the fold of the change log, every change accounted for
        state = pipeline.open_state_table()
        if state is None:
            found.append(f"the state table {cfg.target.state_name} was never made")
        else:
            state_check = check_state(data, state, cfg.target.key, cfg.target.version_by,
                                      None if all_runs else claimed, runs)
            found += state_check.problems

    run_name = "all" if all_runs else (run_id or "none")
    range_rows = [c.summary_row() for c in range_checks]
    # The run's rows, only the columns the data expectations read: the raw values would dominate.
    rows = run_rows(data_rows, merge(claimed), checked_columns)
    data_checks = check_rows(rows, cfg.expectations, sum(c.rows for c in range_checks))
    frames = [(RUN_SUITE, "run_ranges", _summary_frame(range_rows, RANGE_COLUMNS)),
              (TILING_SUITE, "partition_tiling", _summary_frame([t.summary_row() for t in tiling], TILING_COLUMNS)),
              (DATA_SUITE, "data_checks", _summary_frame([c.summary_row() for c in data_checks], DATA_COLUMNS))]
    core_s = time.perf_counter() - started
    with naming_full_disk("the validation results (Great Expectations' project) under", str(gx_root(cfg))), \
            exclusive(gx_root(cfg)):  # parallel lanes share the pipeline's GE project
        suites, ge_s, docs = run_suites(gx_root(cfg), frames, run_name)
    found += [c.problem() for c in data_checks if c.failed]
    success = not found and all(s.success for s in suites)
    if not success and not found:  # a suite failed on something the exact accounting did not name
        found = [f"expectation suite {s.suite} failed: {s.failed}" for s in suites if not s.success]
    result = ValidationResult(
        pipeline=cfg.name,
        key=run_name if not all_runs else f"all-{datetime.now(UTC):%Y%m%dT%H%M%S}",
        scope=scope,
        runs=runs,
        validated_at=datetime.now(UTC).isoformat(timespec="seconds"),
        success=success,
        problems=found,
        offsets_checked=sum(r.size for r in claimed),
        partitions=_partition_rows(range_checks),
        damaged_files=[d.to_dict() for d in damaged],
        lost=[str(r) for r in merge(r for c in range_checks for r in c.lost)],  # one range, not one per batch
        absent=[str(r) for c in range_checks for r in c.absent],
        absent_by_reason=[{"reason": reason, "offsets": total(ranges), "ranges": [str(r) for r in ranges]}
                          for reason, ranges in sorted(absent_by_reason.items())],
        ranges=range_rows,
        tiling=[t.summary_row() for t in tiling],
        data_checks=[c.summary_row() for c in data_checks],
        suites=[s.to_dict() for s in suites],
        timings_s={"offset_accounting": round(core_s, 3), "great_expectations": round(ge_s, 3),
                   "data_docs_and_reports": round(time.perf_counter() - started - core_s - ge_s, 3),
                   "total": round(time.perf_counter() - started, 3)},
        paths={"data_docs": str(docs) if docs else None},
        state=state_check.to_dict() if state_check is not None else {},
    )
    with exclusive(gx_root(cfg)):  # latest.json is rewritten in place
        result.paths = persist(pipeline, result)
    return result
