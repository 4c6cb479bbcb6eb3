"""Truncates in the keyed merge, without a catalog: batches of changes (truncates among them) planned by the merge in
any order, their plans applied to a model of the state table, must leave what a sequential replay of the changes in
the source's order leaves; and the proof's fold of the change log must say the same."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pyarrow as pa
import pytest

from tailfill.errors import ChangeStreamError
from tailfill.lake.keyed import MergeCounts, StateMerger
from tailfill.offsets import OffsetRange
from tailfill.proof import keyed as proof
from tailfill.proof.keyed import _fold_and_compare, _Scan

TOPIC = "t"


def stream(n: int, keys: int, partitions: int, seed: int) -> pa.Table:
    """``n`` changes over ``keys`` ids, a key's changes in its own partition, and a few truncates (no key) dealt to
    any partition; ``lsn`` orders them all (the source's order), offsets order each partition."""
    rng = random.Random(seed)
    rows, offsets = [], [0] * partitions
    for lsn in range(1, n + 1):
        if rng.random() < 0.01:
            key, op, p = None, "t", rng.randrange(partitions)
        else:
            key = rng.randrange(keys)
            op, p = rng.choice("ccuuuud"), key % partitions
        rows.append({"id": key, "cdc_op": op, "kafka_topic": TOPIC, "kafka_partition": p, "kafka_offset": offsets[p],
                     "lsn": lsn})
        offsets[p] += 1
    return pa.Table.from_pylist(rows, schema=pa.schema([("id", pa.int64()), ("cdc_op", pa.string()),
                                                        ("kafka_topic", pa.string()), ("kafka_partition", pa.int32()),
                                                        ("kafka_offset", pa.int64()), ("lsn", pa.int64())]))


def replayed(log: pa.Table, version_by: str | None) -> dict[int, tuple[int, int]]:
    """The state a sequential replay in the source's order leaves: id -> (partition, offset) of its row."""
    order = sorted(log.to_pylist(), key=lambda r: (r[version_by or "kafka_offset"], r["kafka_partition"],
                                                   r["kafka_offset"]))
    state: dict[int, tuple[int, int]] = {}
    for r in order:
        if r["cdc_op"] == "t":
            state.clear()
        elif r["cdc_op"] == "d":
            state.pop(r["id"], None)
        else:
            state[r["id"]] = (r["kafka_partition"], r["kafka_offset"])
    return state


def merged(log: pa.Table, version_by: str | None, batches: list[pa.Table]) -> tuple[dict, MergeCounts, int]:
    """Each batch planned by the merge and applied to a model of the state table (rows by file and position, the
    key index, the latest truncate), in the order given: (the live rows by id, the counts, the live count)."""
    merger = StateMerger(None, None, ["id"], version_by, "p")  # type: ignore[arg-type]
    rows: dict[tuple[str, int], tuple[int, int, int]] = {}  # (file, pos) -> (id, partition, offset)
    cut, counts, live = None, MergeCounts(), 0
    for b, batch in enumerate(batches):
        is_truncate = pa.array([op == "t" for op in batch.column("cdc_op").to_pylist()])
        truncation = merger._truncation(batch.filter(is_truncate), cut)
        changes = batch.filter(pa.compute.invert(is_truncate))
        uri = f"file-{b}"
        plan = merger._plan(changes, uri, truncation)
        for file, pos in zip(plan.delete_files.to_pylist(), plan.delete_positions.tolist(), strict=True):
            del rows[(file, pos)]  # a position delete of a row that is not there would fail here
        for j, at in enumerate(plan.upserts.tolist()):
            r = changes.slice(at, 1).to_pylist()[0]
            rows[(uri, j)] = (r["id"], r["kafka_partition"], r["kafka_offset"])
        merger.index.apply(plan.entries)
        cut = truncation.cut
        counts += plan.counts + truncation.counts
        live += plan.live
    state = {k: (p, o) for k, p, o in rows.values()}
    assert len(state) == len(rows), "a key with two rows"
    return state, counts, live


def shuffled(log: pa.Table, step: int, seed: int) -> list[pa.Table]:
    """``log`` cut into batches of ``step`` rows, in a random order (a batch applied once: the merge skips the
    offsets the state applied before planning)."""
    parts = [log.slice(i, step) for i in range(0, log.num_rows, step)]
    return random.Random(seed).sample(parts, len(parts))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_truncates_applied_in_any_commit_order_leave_the_source_s_state(seed):
    log = stream(3000, 200, partitions=3, seed=seed)
    assert log.column("cdc_op").to_pylist().count("t") > 3
    expected = replayed(log, "lsn")
    assert expected  # the last truncate is not the last change

    state, counts, live = merged(log, "lsn", shuffled(log, 170, seed))

    assert state == expected
    assert live == len(expected)
    assert counts.truncated >= 1 and counts.superseded > 0
    assert counts.inserted + counts.updated + counts.deleted + counts.truncated + counts.superseded == counts.changes
    assert counts.changes == log.num_rows


def test_a_truncate_in_one_partition_orders_by_offset():
    log = stream(1500, 100, partitions=1, seed=4)
    expected = replayed(log, None)
    assert merged(log, None, shuffled(log, 120, 4))[0] == expected == replayed(log, "lsn")


def test_without_version_by_a_truncate_beside_another_partition_stops():
    log = stream(600, 50, partitions=2, seed=5)
    log = log.slice(0, log.column("cdc_op").to_pylist().index("t") + 1)  # changes in both partitions, one truncate
    with pytest.raises(ChangeStreamError, match=r"a truncate in partition \d \(offset \d+\) and changes in partition "
                                                r"\d of the topic: their order is unknown; set target.version_by .* "
                                                r"cdc_binlog \(MySQL: source.file and source.pos\)"):
        merged(log, None, [log])


def test_on_truncate_stop_names_the_truncate():
    log = stream(600, 50, partitions=1, seed=6)
    at = log.column("cdc_op").to_pylist().index("t")
    merger = StateMerger(None, None, ["id"], None, "p", on_truncate="stop")  # type: ignore[arg-type]
    with pytest.raises(ChangeStreamError, match=rf"a truncate \(op t\) at t/0@{at}: target.on_truncate is stop"):
        merger._truncation(log.slice(at, 1), None)


@pytest.mark.parametrize("bucket_rows", [1_000_000, 300])
def test_the_proof_s_fold_knows_truncates(monkeypatch, bucket_rows):
    monkeypatch.setattr(proof, "BUCKET_ROWS", bucket_rows)
    log = stream(3000, 200, partitions=3, seed=5)
    expected = replayed(log, "lsn")
    assert len(expected) > 100
    state = pa.table({"id": pa.array(list(expected), pa.int64()),
                      "kafka_partition": pa.array([p for p, _ in expected.values()], pa.int32()),
                      "kafka_offset": pa.array([o for _, o in expected.values()], pa.int64())})

    def scan(table: pa.Table) -> _Scan:
        return _Scan(iter(table.to_batches(max_chunksize=500)), table.schema, table.num_rows)

    found, rows, live = _fold_and_compare(scan(log), scan(state), ["id"], "lsn", None)
    assert (found.differing, rows, live) == (0, log.num_rows, len(expected))
    stale = state.slice(1)  # a key the truncates did not empty, missing: named
    found, _, _ = _fold_and_compare(scan(log), scan(stale), ["id"], "lsn", None)
    assert found.differing == 1
    ignored = _fold_and_compare(scan(log), scan(stale), ["id"], "lsn", [OffsetRange(TOPIC, 0, 0, 1)])[0]
    t = np.flatnonzero(np.array(log.column("cdc_op").to_pylist()) == "t")
    first = log.slice(int(t[0]), 1).to_pylist()[0]
    run = [OffsetRange(TOPIC, first["kafka_partition"], first["kafka_offset"], first["kafka_offset"] + 1)]
    holding_a_truncate = _fold_and_compare(scan(log), scan(stale), ["id"], "lsn", run)[0]
    assert (holding_a_truncate.keys, ignored.keys) == (len(expected), 1)  # a run's truncate: every key is checked


def test_a_batch_of_a_truncate_alone_empties_what_came_before():
    """Each truncate in a batch of its own (the merge has no change to fold, only the index to empty)."""
    log = stream(800, 60, partitions=1, seed=3)
    at = [i for i, op in enumerate(log.column("cdc_op").to_pylist()) if op == "t"]
    cuts = sorted({0, log.num_rows, *at, *(i + 1 for i in at)})
    parts = [log.slice(a, b - a) for a, b in itertools.pairwise(cuts)]
    assert sum(p.num_rows == 1 and p.column("cdc_op")[0].as_py() == "t" for p in parts) == len(at) > 3
    for seed in range(3):
        state, counts, live = merged(log, None, random.Random(seed).sample(parts, len(parts)))
        assert state == replayed(log, None) and live == len(state)
        assert counts.changes == log.num_rows
