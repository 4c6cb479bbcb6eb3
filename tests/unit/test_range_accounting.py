"""A reader's marker accounts for every offset of its range (read, absent or lost), and prepare refuses one that
does not; absent offsets and their isolation level travel from the marker row to the driver unchanged."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from tailfill.config import FormatConfig
from tailfill.errors import DroppedRecordsError
from tailfill.formats.registry import format_of
from tailfill.lake.prepare import Destination, from_arrow, prepare_ranges, to_arrow
from tailfill.offsets import OffsetRange
from tailfill.values.schema import HEADERS, RAW_SCHEMA, TIMESTAMP, RangeMarker

RNG = OffsetRange("t", 0, 10, 20)


def records(offsets: list[int]) -> pa.RecordBatch:
    n = len(offsets)
    return pa.RecordBatch.from_arrays(
        [pa.array(["t"] * n), pa.array([0] * n, pa.int32()), pa.array(offsets, pa.int64()), pa.nulls(n, TIMESTAMP),
         pa.nulls(n, pa.binary()), pa.array([[]] * n, HEADERS), pa.array([b"v"] * n, pa.binary()),
         pa.nulls(n, pa.string()), pa.nulls(n, pa.string())], schema=RAW_SCHEMA)


def test_a_marker_reads_back_with_its_absent_offsets_and_isolation():
    marker = RangeMarker(RNG, 5, lost=(RNG.with_bounds(10, 12),),
                         absent=(RNG.with_bounds(13, 14), RNG.with_bounds(18, 20)), isolation="read_uncommitted")
    assert marker.unaccounted == 0
    row = marker.to_batch()
    assert RangeMarker.from_row("t", 0, row.column("range_marker")[0].as_py()) == marker
    assert RangeMarker(RNG, 6).unaccounted == 4


def test_a_marker_written_before_absent_offsets_were_recorded_reads_with_none():
    old = '{"start": 10, "end": 20, "records": 10, "lost": []}'
    assert RangeMarker.from_row("t", 0, old) == RangeMarker(RNG, 10)


def prepare(tmp_path, offsets: list[int], marker: RangeMarker):
    where = Destination(pafs.LocalFileSystem(), str(tmp_path / "data"), str(tmp_path / "quarantine"))
    decoder = format_of(FormatConfig(type="raw"), "t").decoder()
    return prepare_ranges(lambda _: iter([records(offsets), marker.to_batch()]), decoder, where, "run-1", [RNG])


def test_prepared_ranges_carry_absent_offsets_to_the_driver(tmp_path):
    marker = RangeMarker(RNG, 8, absent=(RNG.with_bounds(12, 13), RNG.with_bounds(19, 20)))
    [prepared] = prepare(tmp_path, [10, 11, *range(13, 19)], marker)
    assert prepared.rows == 8
    [back] = from_arrow(pa.Table.from_batches([to_arrow([prepared])]))
    assert back.marker == marker


def test_prepare_refuses_a_range_with_offsets_neither_read_absent_nor_lost(tmp_path):
    marker = RangeMarker(RNG, 8, absent=(RNG.with_bounds(12, 13),))  # offset 19: not accounted for
    with pytest.raises(DroppedRecordsError, match=r"accounted for 9 of its 10 offsets \(8 read, 1 absent, 0 lost\)"):
        prepare(tmp_path, [10, 11, *range(13, 19)], marker)
