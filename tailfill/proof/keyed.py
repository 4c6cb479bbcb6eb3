"""The proof of a keyed table: its state equals the fold of the change log, and every change is accounted for.

The change log (the data table) is proven offset by offset as in append mode: every offset is a row, a
quarantined row, or recorded as lost. :func:`check_state` adds, for the state table:

- the offsets it applied are committed in the change log, and it does not lag behind the ledger;
- every change it applied is counted once: inserted, updated, deleted or superseded (the running counts the
  merges committed with the state, compared with the change rows in the applied ranges);
- each key's row in the state is the key's last change by version in the change log (deleted: no row), for the
  keys a run touched or, table-wide, for every key; a key that differs is named with both versions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pyarrow as pa
from pyiceberg.table import Table

from tailfill.lake.files import in_any, range_filter
from tailfill.lake.key_index import Version, encode_keys
from tailfill.lake.keyed import MergeCounts, applied_ranges, merges_by_run, state_counts
from tailfill.lake.ledger import read_ledger
from tailfill.offsets import OffsetRange, intersect_all, merge, subtract, total
from tailfill.values.schema import CDC_OP, DELETE_OP

NAMED = 10  # differing keys named in full; the rest are counted


@dataclass
class StateCheck:
    """What the state check found: keys compared, keys that differ (named), the merge counts, problems."""

    keys_checked: int = 0
    live_rows: int = 0
    differing: int = 0
    counts: dict[str, int] = field(default_factory=dict)  # every merge of the table
    run_counts: dict[str, int] = field(default_factory=dict)  # the merges of the runs validated
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"keys_checked": self.keys_checked, "live_rows": self.live_rows, "differing": self.differing,
                "counts": self.counts, "run_counts": self.run_counts}


def check_state(changes: Table, state: Table, key: Sequence[str], version_by: str | None,
                within: Sequence[OffsetRange] | None = None, runs: Sequence[str] = ()) -> StateCheck:
    """Check ``state`` against the fold of ``changes``: table-wide, or (``within``: a run's ranges) for the keys
    whose changes lie there; ``runs``: the runs whose merges are counted apart."""
    changes.refresh()
    state.refresh()
    by_run = merges_by_run(state)
    mine = sum((by_run[r] for r in runs if r in by_run), MergeCounts())
    out = StateCheck(counts=state_counts(state).to_dict(), run_counts=mine.to_dict())
    applied, committed = applied_ranges(state), read_ledger(changes).committed
    if beyond := subtract(applied, committed):
        out.problems.append(f"the state {_name(state)} applied offsets the change log never committed: "
                            f"{', '.join(map(str, beyond[:5]))}")
    if lag := subtract(committed, applied):
        out.problems.append(f"the state {_name(state)} lags the change log by {total(lag):,} offsets "
                            f"({', '.join(map(str, lag[:5]))}); the pipeline's next batch catches it up")
    columns = [*key, CDC_OP, "kafka_topic", "kafka_partition", "kafka_offset", *([version_by] if version_by else [])]
    rows = changes.scan(row_filter=range_filter(applied), selected_fields=tuple(dict.fromkeys(columns))).to_arrow() \
        if applied else pa.table({c: [] for c in columns})
    counts = out.counts
    if counts.get("changes", 0) != rows.num_rows:
        out.problems.append(f"the state's merges counted {counts.get('changes', 0):,} changes, the change log holds "
                            f"{rows.num_rows:,} in the applied offsets")
    outcomes = sum(counts.get(n, 0) for n in ("inserted", "updated", "deleted", "superseded"))
    if outcomes != counts.get("changes", 0):
        out.problems.append(f"the state's merges counted {counts.get('changes', 0):,} changes but {outcomes:,} "
                            "outcomes (inserted + updated + deleted + superseded)")
    expected = _fold(rows, key, version_by)
    touched = None
    if within is not None:
        mine = intersect_all(merge(within), applied)
        touched = set(encode_keys(rows.filter(in_any(rows, mine)), key)) if mine else set()
    held = state.scan(selected_fields=(*key, "kafka_partition", "kafka_offset")).to_arrow()
    out.live_rows = held.num_rows
    seen: dict[str, tuple[int, int]] = {}
    named: list[str] = []
    for k, p, o in zip(encode_keys(held, key), held.column("kafka_partition").to_pylist(),
                       held.column("kafka_offset").to_pylist(), strict=True):
        if touched is not None and k not in touched:
            continue
        if k in seen:
            out.differing += 1
            named.append(f"key {k}: two rows in the state (partition/offset {seen[k]} and {(p, o)})")
        seen[k] = (p, o)
    for k in sorted(set(expected) | set(seen)) if touched is None else sorted(touched):
        want, got = expected.get(k), seen.get(k)
        if want != got:
            out.differing += 1
            if len(named) < NAMED:
                named.append(f"key {k}: the state holds {_where(got)}, the fold of the change log gives "
                             f"{_where(want)}")
    out.keys_checked = len(touched) if touched is not None else len(set(expected) | set(seen))
    out.problems += named
    if out.differing > len(named):
        out.problems.append(f"... {out.differing - len(named):,} more keys differ")
    return out


def _fold(rows: pa.Table, key: Sequence[str], version_by: str | None) -> dict[str, tuple[int, int]]:
    """Each live key's last change by version, as (partition, offset)."""
    keys = encode_keys(rows, key)
    parts = rows.column("kafka_partition").to_pylist()
    offsets = rows.column("kafka_offset").to_pylist()
    versions = rows.column(version_by).to_pylist() if version_by else offsets
    ops = rows.column(CDC_OP).to_pylist()
    last: dict[str, int] = {}
    for i, k in enumerate(keys):
        if versions[i] is None:  # (version_by) a tombstone after its delete, which carried the version
            continue
        j = last.get(k)
        if j is None or Version(versions[i], parts[i], offsets[i]) > Version(versions[j], parts[j], offsets[j]):
            last[k] = i
    return {k: (parts[i], offsets[i]) for k, i in last.items() if ops[i] != DELETE_OP}


def _where(at: tuple[int, int] | None) -> str:
    return "no row (deleted)" if at is None else f"the change at partition {at[0]} offset {at[1]}"


def _name(table: Table) -> str:
    return ".".join(table.name())
