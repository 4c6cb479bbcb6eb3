"""Offset-to-row completeness: per-range accounting and table-wide tiling, on plain numpy offsets."""

import numpy as np
import pytest

from tailfill.lake.batch_summary import BatchSummary
from tailfill.offsets import OffsetRange, TopicPartition
from tailfill.proof.completeness import (
    RANGE_COLUMNS,
    TILING_COLUMNS,
    Offsets,
    check_batches,
    check_tiling,
    islands,
    problems,
)

TP = TopicPartition("t", 0)


def R(start, end, partition=0, topic="t"):
    return OffsetRange(topic, partition, start, end)


def arr(values):
    return np.array(sorted(values), dtype=np.int64)


def offs(rows=(), quarantined=()):
    return Offsets(arr(rows), arr(quarantined))


def batch(ranges, lost=(), records_read=0, run_id="run-1", batch_id=0):
    return BatchSummary("p", run_id, batch_id, list(ranges), list(lost), records_read, snapshot_id=1)


def check_one(stored_offsets, rng=None, lost=(), records_read=0, absent_offsets="none"):
    rng = rng or R(0, 100)
    (c,) = check_batches([batch([rng], lost, records_read)], {TP: stored_offsets}, absent_offsets)
    return c


def test_islands():
    assert islands(TP, arr([])) == []
    assert islands(TP, arr([3, 4, 5, 9, 11, 12])) == [R(3, 6), R(9, 10), R(11, 13)]


def test_clean_batch_split_between_rows_and_quarantine():
    c = check_one(offs(rows=[*range(0, 60), *range(70, 100)], quarantined=range(60, 70)))
    assert not problems([c], []) and c.missing == [] and c.duplicated == [] and c.absent == [] and c.lost == []
    assert (c.rows, c.quarantined, c.distinct, c.expected) == (90, 10, 100, 100)
    assert (c.min_offset, c.max_offset) == (0, 99) and c.expected_bounds == (0, 99)
    row = c.summary_row()
    assert list(row) == RANGE_COLUMNS
    assert row["expected"] == row["stored"] == row["found"] == 100
    assert (row["min_offset"], row["expected_min"], row["max_offset"], row["expected_max"]) == (0, 0, 99, 99)
    assert problems([c], []) == []


def test_missing_offsets_named_exactly():
    kept = [o for o in range(100) if not (10 <= o < 20 or o == 50)]
    c = check_one(offs(rows=kept))
    assert problems([c], [])
    assert c.missing == [R(10, 20), R(50, 51)]
    assert c.summary_row()["missing_offsets"] == 11
    lines = problems([c], [])
    assert lines == ["missing t[0] [10, 20) (run run-1, batch 0)", "missing t[0] [50, 51) (run run-1, batch 0)"]


def test_nothing_stored_is_all_missing():
    c = check_one(Offsets.empty(), rng=R(5, 8))
    assert c.missing == [R(5, 8)] and (c.min_offset, c.max_offset) == (None, None)
    assert (c.summary_row()["min_offset"], c.summary_row()["expected_min"]) == (-1, 5)


def test_duplicates_named_exactly():
    rows = [*range(0, 100), 7, 8, 42]  # 7, 8, 42 twice in rows
    c = check_one(offs(rows=rows, quarantined=[8, 60]))  # 8 three times, 60 in both tables
    assert problems([c], []) and c.missing == []
    assert c.duplicated == [R(7, 9), R(42, 43), R(60, 61)]
    assert (c.rows, c.quarantined, c.distinct) == (103, 2, 100)
    assert c.summary_row()["stored"] == 105
    assert "duplicated t[0] [60, 61) (run run-1, batch 0)" in problems([c], [])


def test_lost_ranges_are_not_missing_and_reduce_expected():
    kept = [o for o in range(100) if not (o < 5 or 30 <= o < 40 or o >= 95)]
    c = check_one(offs(rows=kept), lost=[R(0, 5), R(30, 40), R(95, 120), R(0, 50, partition=1)])
    assert not problems([c], []) and c.missing == []
    assert c.lost == [R(0, 5), R(30, 40), R(95, 100)]  # clipped to the range, other partitions ignored
    assert c.expected == 100 - 20 == c.distinct
    assert c.expected_bounds == (5, 94) == (c.min_offset, c.max_offset)


def recorded_batch(rng, absent, records_read, under="read_committed"):
    """A batch that recorded which offsets of ``rng`` the broker did not deliver."""
    return BatchSummary("p", "run-1", 0, [rng], [], records_read, absent=list(absent), absent_under=under)


KEPT = [o for o in range(100) if not (10 <= o < 12 or o == 50 or o == 99)]  # holes [10, 12), 50, 99


@pytest.mark.parametrize("setting", ["verified", "allowed"])
def test_holes_the_batch_recorded_are_absent_and_the_others_missing(setting):
    b = recorded_batch(R(0, 100), [R(10, 12), R(99, 100)], 96)  # it did not record offset 50
    (c,) = check_batches([b], {TP: offs(rows=KEPT)}, setting)
    assert c.absent == [R(10, 12), R(99, 100)] and c.missing == [R(50, 51)] and c.declined == []
    assert c.absent_under == "read_committed" and c.expected == 97 and c.expected_bounds == (0, 98)
    assert problems([c], []) == ["missing t[0] [50, 51) (run run-1, batch 0)"]
    assert c.summary_row()["absent_offsets"] == 3 and c.summary_row()["missing_offsets"] == 1


def test_a_recorded_absent_offset_is_not_trusted_on_a_count():
    """The batch's record decides, not its count: a hole it recorded is absent even if the count disagrees."""
    b = recorded_batch(R(0, 100), [R(10, 12), R(50, 51), R(99, 100)], 1_000)
    (c,) = check_batches([b], {TP: offs(rows=KEPT)}, "verified")
    assert c.absent == [R(10, 12), R(50, 51), R(99, 100)] and c.missing == [] and not problems([c], [])


def test_with_none_every_recorded_absent_offset_fails_named_with_its_record():
    b = recorded_batch(R(0, 100), [R(10, 12), R(50, 51), R(99, 100)], 96)
    (c,) = check_batches([b], {TP: offs(rows=KEPT)}, "none")
    assert c.absent == [] and c.missing == [] and c.declined == [R(10, 12), R(50, 51), R(99, 100)]
    assert c.expected == 100 and c.summary_row()["missing_offsets"] == 4
    assert problems([c], [])[0] == (
        "missing t[0] [10, 12) (run run-1, batch 0): its batch recorded it as not delivered under read_committed, "
        "and completeness.absent_offsets: none accepts no absent offset (fix: set it to verified)")


def test_a_recorded_absent_offset_that_is_stored_is_no_hole():
    b = recorded_batch(R(0, 10), [R(3, 5)], 8)
    (c,) = check_batches([b], {TP: offs(rows=range(0, 10))}, "verified")  # stored all the same (a replay, say)
    assert c.absent == [] and c.missing == [] and c.expected == 10 and not problems([c], [])


def test_an_absent_offset_the_broker_refutes_is_missing_with_why():
    b = recorded_batch(R(0, 100), [R(10, 12), R(50, 51), R(99, 100)], 96)
    (c,) = check_batches([b], {TP: offs(rows=KEPT)}, "verified")
    c = c.refute([R(11, 13), R(0, 1, partition=1)], "the broker delivers a record there under read_committed")
    assert c.absent == [R(10, 11), R(50, 51), R(99, 100)] and c.refuted[0][0] == R(11, 12)
    assert c.expected == 97 and c.not_stored == 1 and c.summary_row()["missing_offsets"] == 1
    assert problems([c], []) == [
        "missing t[0] [11, 12) (run run-1, batch 0): its batch recorded it as not delivered under read_committed, "
        "but the broker delivers a record there under read_committed"]


def test_holes_of_an_older_batch_are_judged_as_before():
    """A batch that recorded no absent offsets: trusted on its count with allowed, as before; missing otherwise
    (there is nothing recorded to verify, and a writer that records nothing gets nothing accepted)."""
    kept = [o for o in range(100) if not 10 <= o < 20]
    older = batch([R(0, 100)], records_read=90)
    (c,) = check_batches([older], {TP: offs(rows=kept)}, "allowed")
    assert c.absent == [R(10, 20)] and c.absent_under is None and not problems([c], [])
    (c,) = check_batches([older], {TP: offs(rows=kept)}, "verified")
    assert c.absent == [] and c.missing == [R(10, 20)]
    assert problems([c], []) == ["missing t[0] [10, 20) (run run-1, batch 0)"]


def test_absent_offsets_allowed_only_when_records_read_matches_stored():
    kept = [o for o in range(100) if not 10 <= o < 20]
    allowed = check_one(offs(rows=kept), records_read=90, absent_offsets="allowed")
    assert not problems([allowed], []) and allowed.missing == [] and allowed.absent == [R(10, 20)]
    assert allowed.expected == 90 and allowed.summary_row()["absent_offsets"] == 10

    strict = check_one(offs(rows=kept), records_read=90, absent_offsets="none")
    assert problems([strict], []) and strict.missing == [R(10, 20)] and strict.absent == []

    read_more = check_one(offs(rows=kept), records_read=100, absent_offsets="allowed")
    assert problems([read_more], []) and read_more.missing == [R(10, 20)] and read_more.absent == []
    assert read_more.expected == 100


def test_absent_at_the_edges_moves_expected_bounds():
    c = check_one(offs(rows=range(3, 97)), records_read=94, absent_offsets="allowed")
    assert not problems([c], []) and c.absent == [R(0, 3), R(97, 100)]
    assert c.expected_bounds == (3, 96) == (c.min_offset, c.max_offset)


def test_absent_check_counts_every_range_of_the_batch():
    tp1 = TopicPartition("t", 1)
    b = batch([R(0, 10), R(0, 10, partition=1)], records_read=18)
    stored = {TP: offs(rows=range(0, 8)), tp1: offs(rows=range(0, 10))}
    checks = check_batches([b], stored, "allowed")
    assert [c.absent for c in checks] == [[R(8, 10)], []] and problems(checks, []) == []
    checks = check_batches([batch(b.ranges, records_read=20)], stored, "allowed")
    assert [c.missing for c in checks] == [[R(8, 10)], []]


def test_clean_tiling():
    b1, b2 = batch([R(0, 50)], batch_id=0), batch([R(50, 100)], batch_id=1)
    (t,) = check_tiling([b1, b2], [R(0, 100)], {TP: offs(rows=range(0, 90), quarantined=range(90, 100))})
    assert not problems([], [t]) and (t.first, t.end) == (0, 100)
    assert t.gaps == t.overlaps == t.stray == t.unrecorded == t.unsummarised == []
    assert list(t.summary_row()) == TILING_COLUMNS


def test_tiling_gap_overlap_and_stray_are_named():
    b1, b2, b3 = batch([R(0, 40)]), batch([R(50, 80)], batch_id=1), batch([R(70, 100)], batch_id=2)
    stored = {TP: offs(rows=[*range(0, 40), *range(50, 100), 120, 121], quarantined=[45])}
    (t,) = check_tiling([b1, b2, b3], [R(0, 40), R(50, 100)], stored)
    assert problems([], [t])
    assert t.gaps == [R(40, 50)] and t.overlaps == [R(70, 80)]
    assert t.stray == [R(45, 46), R(120, 122)]
    row = t.summary_row()
    assert (row["gap_offsets"], row["overlap_offsets"], row["stray_offsets"]) == (10, 10, 3)
    lines = problems([], [t])
    assert "gap between committed ranges t[0] [40, 50)" in lines
    assert "overlapping committed ranges t[0] [70, 80)" in lines
    assert "stored offsets outside every committed range t[0] [120, 122)" in lines


def test_tiling_unrecorded_and_unsummarised_fail():
    (t,) = check_tiling([batch([R(0, 50)]), batch([R(50, 60)], batch_id=1)], [R(0, 50)], {})
    assert t.unrecorded == [R(50, 60)] and problems([], [t])
    assert problems([], [t]) == ["committed in a snapshot but not in the ledger t[0] [50, 60)"]

    (t,) = check_tiling([batch([R(50, 100)])], [R(0, 100)], {TP: offs(rows=range(50, 100))})
    assert t.unsummarised == [R(0, 50)] and t.unrecorded == [] and t.stray == [] and (t.first, t.end) == (0, 100)
    assert problems([], [t]) == ["committed in the ledger but no batch audit left (snapshot expired without "
                                 "archiving?) t[0] [0, 50)"]
    assert t.summary_row()["unsummarised_offsets"] == 50


def test_tiling_reports_each_partition():
    tp1 = TopicPartition("u", 2)
    checks = check_tiling([batch([R(0, 10), R(5, 20, 2, "u")])], [R(0, 10), R(5, 20, 2, "u")], {})
    assert [c.tp for c in checks] == [TP, tp1] and problems([], checks) == []
    assert (checks[1].first, checks[1].end) == (5, 20)
