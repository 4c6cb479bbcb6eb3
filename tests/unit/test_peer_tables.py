"""The peers benchmark's independent reader: Spark's file sink read through its log, duplicates and losses, and
produce-to-commit latencies from the files themselves."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from peer_tables import commit_latencies, committed_files, landed, parquet_sink_ids


def _file(path: Path, ids: list[str], stamps_ms: list[int]) -> Path:
    pq.write_table(pa.table({"event_id": ids, "kafka_timestamp": pa.array(stamps_ms, pa.timestamp("ms"))}), path)
    return path


def _log(table: Path, name: str, files: list[Path], mtime_s: int) -> None:
    log = table / "_spark_metadata"
    log.mkdir(exist_ok=True)
    entry = log / name
    entry.write_text("\n".join(["v1", *(json.dumps({"path": f"file://{f}", "action": "add"}) for f in files)]))
    os.utime(entry, (mtime_s, mtime_s))


def test_the_file_sink_holds_only_the_files_its_log_committed_each_at_its_first_batch(tmp_path):
    a = _file(tmp_path / "a.parquet", ["e1", "e2"], [1_000, 2_000])
    b = _file(tmp_path / "b.parquet", ["e3", "e2"], [3_000, 4_000])
    _file(tmp_path / "left-by-a-killed-batch.parquet", ["e1"], [1_000])
    _log(tmp_path, "0", [a], 10)
    _log(tmp_path, "1.compact", [a, b], 20)  # a compact entry repeats the batches before it
    _log(tmp_path, "2.tmp", [tmp_path / "left-by-a-killed-batch.parquet"], 30)  # an entry never renamed into place

    assert committed_files(tmp_path) == {a: 10_000, b: 20_000}
    counted = landed(parquet_sink_ids(tmp_path), expected=4)
    assert (counted.rows, counted.distinct, counted.duplicates, counted.lost) == (4, 3, 1, 1)


def test_an_empty_or_missing_log_is_an_empty_table(tmp_path):
    assert committed_files(tmp_path) == {}
    assert landed(parquet_sink_ids(tmp_path), expected=2).lost == 2


def test_a_log_entry_that_is_not_one_is_named(tmp_path):
    (tmp_path / "_spark_metadata").mkdir()
    (tmp_path / "_spark_metadata" / "0").write_text("garbage\n")
    with pytest.raises(ValueError, match=r"_spark_metadata/0: not a file sink log entry"):
        committed_files(tmp_path)


def test_latency_is_commit_minus_the_rows_kafka_timestamp_for_rows_since_the_given_moment(tmp_path):
    a = _file(tmp_path / "a.parquet", ["e1", "e2"], [1_000, 2_500])
    assert sorted(commit_latencies({a: 5_000}, since_ms=2_000)) == [2.5]
