"""The proof survives anyone's upkeep: ``validate --all`` proves every offset after another tool expired the
snapshots (pyiceberg's ``expire_snapshots`` called directly) and after another tool compacted the files
(a pyiceberg overwrite), because each batch's audit was written with its commit, not only archived by
Tailfill's own ``maintain``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from helpers import assert_exactly_once, tables_of

from tailfill.dev.batches import commit_sample_batch
from tailfill.lake.audit_log import audit_log
from tailfill.lake.batch_summary import BatchSummary
from tailfill.offsets import OffsetRange
from tailfill.pipeline.handle import open_pipeline
from tailfill.proof.audit import committed_batches
from tailfill.proof.validate import validate
from tailfill.state.store import StateStore

pytestmark = pytest.mark.integration

PARTITIONS, PER_BATCH, BATCHES = 3, 30, 10
TOTAL = PARTITIONS * PER_BATCH * BATCHES


@pytest.fixture
def committed(make_pipeline):
    """10 micro-batches of 3 x 30 offsets (every 41st malformed) in two runs, through the real commit path."""
    cfg = make_pipeline()
    for b in range(BATCHES):
        commit_sample_batch(open_pipeline(cfg), "run-a" if b < BATCHES // 2 else "run-b", b,
                            [OffsetRange(cfg.source.topic, p, b * PER_BATCH, (b + 1) * PER_BATCH)
                             for p in range(PARTITIONS)], bad_every=41)
    return cfg


def expire_everything_but_the_current(table) -> None:
    """What another tool does: pyiceberg's expiry, no Tailfill code involved."""
    table.refresh()
    table.maintenance.expire_snapshots().older_than(datetime.now(UTC) + timedelta(seconds=1)).commit()
    table.refresh()


def assert_every_offset_proven(cfg) -> None:
    result = validate(open_pipeline(cfg), all_runs=True)
    assert result.success, result.problems
    assert result.offsets_checked == TOTAL and result.runs == ["run-a", "run-b"]
    assert_exactly_once(cfg, {p: BATCHES * PER_BATCH for p in range(PARTITIONS)})


def test_validate_all_is_complete_after_another_tool_expired_the_snapshots(committed):
    data, quarantine = tables_of(committed)
    for table in (data, quarantine):
        expire_everything_but_the_current(table)
    assert len(data.snapshots()) == 1  # nine batch summaries are gone from the table itself
    assert_every_offset_proven(committed)


def test_validate_all_is_complete_after_another_tool_compacted_and_expired(committed):
    data, _ = tables_of(committed)
    files_before = len(list(data.scan().plan_files()))
    data.overwrite(data.scan().to_arrow())  # one overwrite rewriting every row: another tool's compaction
    data.refresh()
    assert len(list(data.scan().plan_files())) < files_before
    expire_everything_but_the_current(data)
    (only,) = data.snapshots()  # the other tool's: no batch summary left in the table
    assert not BatchSummary.recorded_in(only.summary.additional_properties)
    assert_every_offset_proven(committed)


def test_an_audit_written_for_a_commit_that_never_happened_is_not_believed(committed):
    data, _ = tables_of(committed)
    phantom = BatchSummary(committed.name, "run-ghost", 99, [OffsetRange(committed.source.topic, 0, 900, 950)],
                           records_read=50)
    audit = audit_log(StateStore.of(committed), data)
    audit.write_batch(1234567890, phantom.to_properties())  # as a failed attempt leaves it
    expire_everything_but_the_current(data)
    assert "run-ghost" not in {b.run_id for b in committed_batches(audit, data)}
    assert_every_offset_proven(committed)
