"""The keyed proof's fold a bucket at a time: rows spilled by the hash of their key, each bucket folded and
compared alone, give what the fold of the whole table gives."""

from __future__ import annotations

import os
import random
import subprocess
import sys

import pyarrow as pa
import pytest

from tailfill.lake.key_index import encode_keys, key_array
from tailfill.offsets import OffsetRange
from tailfill.proof import keyed
from tailfill.proof.keyed import KEY, ROW, _fold, _fold_and_compare, _keyed, _load, _Scan, bucket_of, partition

TOPIC = "t"


def changes(n: int, keys: int, seed: int = 3, versioned: bool = False) -> pa.Table:
    """``n`` change rows over ``keys`` keys (two key columns), in two partitions, some deletes; ``versioned``: a
    version column, null on some tombstones."""
    rng = random.Random(seed)
    ids = [rng.randrange(keys) for _ in range(n)]
    ops = [rng.choice("ccuuuud") for _ in range(n)]
    columns = {"id": pa.array(ids, pa.int64()), "region": [f"r{i % 3}" for i in ids], "cdc_op": ops,
               "kafka_topic": [TOPIC] * n, "kafka_partition": pa.array([i % 2 for i in ids], pa.int32()),
               "kafka_offset": pa.array(range(n), pa.int64())}
    if versioned:
        columns["lsn"] = pa.array([None if op == "d" and rng.random() < 0.3 else rng.randrange(10 * n) for op in ops],
                                  pa.int64())
    return pa.table(columns)


def scan(table: pa.Table, batch: int = 700) -> _Scan:
    return _Scan(iter(table.to_batches(max_chunksize=batch)), table.schema, table.num_rows)


def keyed_whole(table: pa.Table, keep: list[str]) -> pa.Table:
    """``table`` as one bucket holds it, with its rows' encoded key."""
    return pa.concat_tables(_keyed(scan(table), ["id"], keep)[1])


def test_every_row_lands_in_one_bucket_and_a_key_always_in_the_same(tmp_path):
    log = changes(5000, 800)
    files, rows = partition(_keyed(scan(log), ["id", "region"], ["kafka_offset"]), 7, tmp_path / "b")
    buckets = [_load(f) for f in files]
    assert rows == log.num_rows == sum(b.num_rows for b in buckets)
    places = [r for b in buckets for r in b.column(ROW).to_pylist()]
    assert sorted(places) == list(range(log.num_rows))  # each row once
    for b in buckets:  # in their order, with their own key and offset
        assert b.column(ROW).to_pylist() == sorted(b.column(ROW).to_pylist())
        assert b.column("kafka_offset").to_pylist() == b.column(ROW).to_pylist()
    home = {k: i for i, b in enumerate(buckets) for k in b.column(KEY).to_pylist()}
    assert sum(len(set(b.column(KEY).to_pylist())) for b in buckets) == len(home)  # no key in two buckets
    assert set(home) == set(encode_keys(log, ["id", "region"]))
    assert sum(1 for b in buckets if b.num_rows) == 7


def test_a_key_s_bucket_is_the_same_in_every_process_and_every_batch():
    keys = [f'[{i},"r{i % 3}"]' for i in range(2000)]
    here = bucket_of(pa.array(keys), 13).tolist()
    assert bucket_of(pa.array(keys).slice(1000), 13).tolist() == here[1000:]
    assert min(here.count(b) for b in range(13)) > 100  # spread over all buckets
    code = ("import pyarrow as pa; from tailfill.proof.keyed import bucket_of; "
            f"print(bucket_of(pa.array({keys!r}), 13).tolist())")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": "12345"}).stdout  # (Python's str hash differs)
    assert other.strip() == str(here)


def test_keys_as_arrow_strings_are_the_encoded_keys():
    table = pa.table({"a": pa.array([1, -2], pa.int64()), "s": ["x", 'y"'], "n": pa.array([None, 3], pa.int64())})
    for columns in (["a"], ["a", "s"], ["n"]):
        assert key_array(table, columns).to_pylist() == encode_keys(table, columns)


@pytest.mark.parametrize("versioned", [False, True])
def test_the_fold_over_buckets_is_the_fold_of_the_whole(tmp_path, versioned):
    log = changes(8000, 1500, versioned=versioned)
    version_by = "lsn" if versioned else None
    keep = ["cdc_op", "kafka_partition", "kafka_offset", *([version_by] if versioned else [])]
    whole = _fold(keyed_whole(log, keep), version_by)
    files, _ = partition(_keyed(scan(log), ["id"], keep), 5, tmp_path / "b")
    folds = [_fold(_load(f), version_by) for f in files]
    assert sum(len(f) for f in folds) == len(whole) and {k: v for f in folds for k, v in f.items()} == whole
    assert 0 < len(whole) < 1500


def tampered_state(log: pa.Table) -> pa.Table:
    """The state the fold of ``log`` gives, then tampered with: keys dropped, moved, added, and two rows for some."""
    fold = _fold(keyed_whole(log, ["cdc_op", "kafka_partition", "kafka_offset"]), None)
    rows = [(int(k[1:-1]), p, o) for k, (p, o) in sorted(fold.items())]
    rows = [r for i, r in enumerate(rows) if i % 50 != 7]  # some keys deleted behind the pipeline's back
    rows = [(k, p, o + 1) if i % 70 == 3 else (k, p, o) for i, (k, p, o) in enumerate(rows)]  # some an older row
    rows += [(10_000 + i, 0, 5) for i in range(4)]  # keys the change log never had
    rows += [rows[i] for i in (11, 300, 5)]  # a second row for some keys
    return pa.table({"id": pa.array([r[0] for r in rows], pa.int64()),
                     "kafka_partition": pa.array([r[1] for r in rows], pa.int32()),
                     "kafka_offset": pa.array([r[2] for r in rows], pa.int64())})


@pytest.mark.parametrize("ranges", [None, [OffsetRange(TOPIC, 0, 2000, 4000), OffsetRange(TOPIC, 1, 0, 500)]])
def test_the_comparison_over_buckets_finds_what_one_bucket_finds(monkeypatch, ranges):
    log = changes(6000, 1200)
    state = tampered_state(log)

    def check(bucket_rows: int) -> tuple:
        monkeypatch.setattr(keyed, "BUCKET_ROWS", bucket_rows)
        found, rows, live = _fold_and_compare(scan(log), scan(state), ["id"], None, ranges)
        return found.keys, found.differing, found.named(), rows, live

    one, many = check(1_000_000), check(500)  # one bucket; a dozen
    assert many == one
    keys, differing, named, rows, live = one
    assert (rows, live) == (log.num_rows, state.num_rows)
    assert differing > 10 and len(named) == keyed.NAMED
    twice = [p for p in named if "two rows" in p]
    assert twice and named[:len(twice)] == twice  # the keys with two rows first
    folded = _fold(keyed_whole(log, ["cdc_op", "kafka_partition", "kafka_offset"]), None)
    every = len(set(folded) | set(encode_keys(state, ["id"])))  # a key live in the fold or held by the state
    assert (keys == every) if ranges is None else (0 < keys < every)


def test_a_run_with_no_applied_change_checks_no_key(monkeypatch):
    log = changes(3000, 500)
    monkeypatch.setattr(keyed, "BUCKET_ROWS", 400)
    found, rows, live = _fold_and_compare(scan(log), scan(tampered_state(log)), ["id"], None, [])
    assert (found.keys, found.differing, found.named(), rows) == (0, 0, [], log.num_rows) and live > 0
