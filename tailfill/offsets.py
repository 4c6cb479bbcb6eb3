"""Kafka offsets and offset ranges as small immutable values with tested arithmetic.

Modelled on Spark's ``KafkaSourceOffset`` / ``KafkaOffsetRangeCalculator``: a range is
half-open ``[start, end)`` on one topic-partition; sets of ranges can be merged, subtracted,
split into slices, capped to a budget and checked for gaps and overlaps.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class TopicPartition:
    """One partition of one topic."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}]"


@dataclass(frozen=True, order=True)
class OffsetRange:
    """The half-open offset range ``[start, end)`` of one topic-partition."""

    topic: str
    partition: int
    start: int
    end: int

    def __post_init__(self) -> None:
        if self.start < 0 or self.end < self.start:
            raise ValueError(f"invalid offset range {self}: need 0 <= start <= end")

    @classmethod
    def of(cls, tp: TopicPartition, start: int, end: int) -> OffsetRange:
        return cls(tp.topic, tp.partition, start, end)

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def size(self) -> int:
        return self.end - self.start

    def is_empty(self) -> bool:
        return self.start == self.end

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}] [{self.start}, {self.end})"

    def with_bounds(self, start: int, end: int) -> OffsetRange:
        return OffsetRange(self.topic, self.partition, start, end)

    def intersect(self, other: OffsetRange) -> OffsetRange | None:
        """The common part of two ranges of the same partition, or None."""
        if self.tp != other.tp:
            return None
        lo, hi = max(self.start, other.start), min(self.end, other.end)
        return self.with_bounds(lo, hi) if lo < hi else None

    def split(self, parts: int) -> list[OffsetRange]:
        """Split into at most ``parts`` contiguous, non-empty, near-equal ranges."""
        if parts < 1:
            raise ValueError("parts must be >= 1")
        parts = max(1, min(parts, self.size))
        step, extra = divmod(self.size, parts)
        out, lo = [], self.start
        for i in range(parts):
            hi = lo + step + (1 if i < extra else 0)
            out.append(self.with_bounds(lo, hi))
            lo = hi
        return [r for r in out if not r.is_empty()] or [self]


def by_partition(ranges: Iterable[OffsetRange]) -> dict[TopicPartition, list[OffsetRange]]:
    """Group ranges by topic-partition, each group sorted by start."""
    groups: dict[TopicPartition, list[OffsetRange]] = defaultdict(list)
    for r in ranges:
        groups[r.tp].append(r)
    return {tp: sorted(rs) for tp, rs in sorted(groups.items())}


def merge(ranges: Iterable[OffsetRange]) -> list[OffsetRange]:
    """Coalesce overlapping and adjacent ranges; empty ranges vanish."""
    out: list[OffsetRange] = []
    for rs in by_partition(r for r in ranges if not r.is_empty()).values():
        cur = rs[0]
        for r in rs[1:]:
            if r.start <= cur.end:
                cur = cur.with_bounds(cur.start, max(cur.end, r.end))
            else:
                out.append(cur)
                cur = r
        out.append(cur)
    return out


def subtract(ranges: Iterable[OffsetRange], taken: Iterable[OffsetRange]) -> list[OffsetRange]:
    """The parts of ``ranges`` not covered by ``taken`` (merged, sorted); one sweep per partition."""
    out: list[OffsetRange] = []
    for r, parts in _sweep(ranges, taken):
        start = r.start
        for t in parts:
            if t.start > start:
                out.append(r.with_bounds(start, t.start))
            start = max(start, t.end)
        if start < r.end:
            out.append(r.with_bounds(start, r.end))
    return out


def intersect_all(ranges: Iterable[OffsetRange], within: Iterable[OffsetRange]) -> list[OffsetRange]:
    """The parts of ``ranges`` that lie inside ``within`` (merged, sorted); one sweep per partition."""
    return merge(r.with_bounds(max(r.start, w.start), min(r.end, w.end)) for r, parts in _sweep(ranges, within)
                 for w in parts)


def _sweep(ranges: Iterable[OffsetRange],
           others: Iterable[OffsetRange]) -> Iterator[tuple[OffsetRange, list[OffsetRange]]]:
    """Each range of ``merge(ranges)`` with the ranges of ``merge(others)`` that overlap it, in order: both sorted,
    so a partition costs one pass over each side (thousands of transaction markers against thousands of aborted
    records stay linear)."""
    others_by_tp = by_partition(merge(others))
    for tp, rs in by_partition(merge(ranges)).items():
        os, j = others_by_tp.get(tp, []), 0
        for r in rs:
            while j < len(os) and os[j].end <= r.start:
                j += 1
            k = j
            while k < len(os) and os[k].start < r.end:
                k += 1
            yield r, os[j:k]


def overlaps(ranges: Iterable[OffsetRange]) -> list[OffsetRange]:
    """Offsets covered by more than one of ``ranges`` (merged): double-counted data."""
    out: list[OffsetRange] = []
    for rs in by_partition(r for r in ranges if not r.is_empty()).values():
        reach = rs[0].end
        for r in rs[1:]:
            if r.start < reach:
                out.append(r.with_bounds(r.start, min(r.end, reach)))
            reach = max(reach, r.end)
    return merge(out)


def gaps(ranges: Iterable[OffsetRange], within: Iterable[OffsetRange]) -> list[OffsetRange]:
    """Offsets inside ``within`` that no range in ``ranges`` covers."""
    return subtract(within, ranges)


def total(ranges: Iterable[OffsetRange]) -> int:
    return sum(r.size for r in ranges)


def split_slices(ranges: Iterable[OffsetRange], slices: int) -> list[list[OffsetRange]]:
    """Split a plan into ``slices`` slices, each covering a share of every partition.

    Slice ``i`` holds the ``i``-th piece of each partition's ranges, so every slice reads all
    partitions in parallel. Slices that would be empty are dropped.
    """
    if slices < 1:
        raise ValueError("slices must be >= 1")
    out: list[list[OffsetRange]] = [[] for _ in range(slices)]
    for tp_ranges in by_partition(merge(ranges)).values():
        for rng in tp_ranges:
            for i, piece in enumerate(rng.split(slices)):
                out[i].append(piece)
    return [s for s in out if s]


def cap(ranges: Iterable[OffsetRange], max_offsets: int) -> list[OffsetRange]:
    """Trim ranges to at most ``max_offsets`` offsets in all, shared in proportion to their size.

    Like Spark's ``maxOffsetsPerTrigger``: a partition with more pending offsets gets a larger
    share; each non-empty range advances by at least one offset so that no partition starves
    (so with fewer offsets than ranges the total is the number of ranges).
    """
    ranges = [r for r in ranges if not r.is_empty()]
    if max_offsets < 1:
        raise ValueError("max_offsets must be >= 1")
    pending = total(ranges)
    if pending <= max_offsets:
        return ranges
    shares = [max(1, (r.size * max_offsets) // pending) for r in ranges]
    excess = sum(shares) - max_offsets
    while excess > 0:  # the one-offset floor overshot: take it back from the largest shares
        j = max(range(len(shares)), key=shares.__getitem__)
        if shares[j] <= 1:
            break  # fewer offsets than ranges: every range still advances by one
        take = min(excess, shares[j] - 1)
        shares[j] -= take
        excess -= take
    return [r.with_bounds(r.start, r.start + s) for r, s in zip(ranges, shares, strict=True)]


def deal(ranges: Iterable[OffsetRange], groups: int, min_split: int) -> list[list[OffsetRange]]:
    """Deal ``ranges`` into at most ``groups`` groups of near-equal total size, for parallel tasks.

    With fewer ranges than groups, ranges are split in proportion to their size (into pieces of at
    least ``min_split`` offsets) so that every group gets work. No group holds two ranges of one
    partition.
    """
    if groups < 1:
        raise ValueError("groups must be >= 1")
    pieces = [r for r in ranges if not r.is_empty()]
    if 0 < len(pieces) < groups:
        whole = total(pieces)
        pieces = [p for r in pieces for p in r.split(max(1, min(round(groups * r.size / whole), r.size // min_split)))]
    out: list[list[OffsetRange]] = [[] for _ in range(min(groups, len(pieces)))]
    for r in sorted(pieces, key=lambda r: (-r.size, r)):
        free = [g for g in out if all(x.tp != r.tp for x in g)]
        min(free or out, key=total).append(r)
    return [sorted(g) for g in out]


@dataclass(frozen=True)
class PartitionOffsets:
    """A position per topic-partition, serialised like Spark's Kafka ``startingOffsets`` JSON."""

    offsets: Mapping[TopicPartition, int]

    def __post_init__(self) -> None:
        for tp, off in self.offsets.items():
            if not isinstance(off, int) or off < 0:
                raise ValueError(f"invalid offset {off!r} for {tp}")

    def __iter__(self) -> Iterator[TopicPartition]:
        return iter(sorted(self.offsets))

    def __getitem__(self, tp: TopicPartition) -> int:
        return self.offsets[tp]

    def get(self, tp: TopicPartition, default: int | None = None) -> int | None:
        return self.offsets.get(tp, default)

    def to_dict(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for tp in self:
            out.setdefault(tp.topic, {})[str(tp.partition)] = self.offsets[tp]
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: Mapping[str, Mapping[str, int]]) -> PartitionOffsets:
        try:
            out = {}
            for topic, parts in data.items():
                for p, off in parts.items():
                    if isinstance(off, bool) or not isinstance(off, int):
                        raise ValueError(f"offset {off!r} of {topic}[{p}] is not a whole number")
                    out[TopicPartition(topic, int(p))] = off
            return cls(out)
        except (AttributeError, TypeError, ValueError) as exc:
            raise ValueError(
                f"offsets must look like {{\"topic\": {{\"0\": 42}}}}, got {data!r}: {exc}"
            ) from exc

    @classmethod
    def from_json(cls, text: str) -> PartitionOffsets:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"offsets are not valid JSON ({exc}): {text!r}") from exc
        if not isinstance(data, dict):
            raise ValueError(f"offsets must be a JSON object, got {text!r}")
        return cls.from_dict(data)


def ranges_between(start: PartitionOffsets, end: PartitionOffsets) -> list[OffsetRange]:
    """The ranges ``[start[tp], end[tp])`` for every partition in ``end`` (missing start = 0)."""
    out = []
    for tp in end:
        lo = start.get(tp, 0) or 0
        if lo > end[tp]:
            raise ValueError(f"{tp}: start offset {lo} is after end offset {end[tp]}")
        out.append(OffsetRange.of(tp, lo, end[tp]))
    return out


def ranges_to_dict(ranges: Iterable[OffsetRange]) -> dict[str, dict[str, list[list[int]]]]:
    """``{"topic": {"0": [[start, end], ...]}}``, sorted: ranges as plain JSON data."""
    out: dict[str, dict[str, list[list[int]]]] = {}
    for r in sorted(ranges):
        out.setdefault(r.topic, {}).setdefault(str(r.partition), []).append([r.start, r.end])
    return out


def ranges_to_json(ranges: Iterable[OffsetRange]) -> str:
    """Compact JSON ``{"topic": {"0": [[start, end], ...]}}`` for snapshot summaries."""
    return json.dumps(ranges_to_dict(ranges), sort_keys=True, separators=(",", ":"))


def ranges_from_json(text: str | None) -> list[OffsetRange]:
    """Inverse of :func:`ranges_to_json`; ``None`` or empty text is no ranges."""
    if not text:
        return []
    data = json.loads(text)
    return [
        OffsetRange(topic, int(p), int(s), int(e))
        for topic, parts in data.items()
        for p, pairs in parts.items()
        for s, e in pairs
    ]


def passed_over(pos: int, delivered: Iterable[int]) -> list[tuple[int, int]]:
    """The offsets a reader at ``pos`` passed over to reach ``delivered`` (ascending, each at least ``pos``), as
    ``[start, end)`` pairs: from ``pos`` to the first delivered offset, and between consecutive ones."""
    out = []
    for offset in delivered:
        if offset > pos:
            out.append((pos, offset))
        pos = max(pos, offset + 1)
    return out


# Sparse ranges as text: each range is the gap since the previous range's end (the first: since offset 0) and its
# length, written ``gap`` (length 1) or ``gap:length``, a token repeated n times in a row written once as
# ``token*n``, tokens joined by commas. Transaction markers a fixed distance apart are one token
# ("100*10000": 1M records in transactions of 100, 9 bytes); in transactions of random sizes (50 to 150 records,
# each with its marker) about 3.5 bytes a marker: 35 kB for 1M records, where JSON pairs take 158 kB
# (``tests/unit/test_offsets.py`` measures both).


def runs_to_text(pairs: Iterable[tuple[int, int]]) -> str:
    """``[start, end)`` pairs (disjoint, in any order) as the run-length text above; :func:`runs_from_text` reverses
    it. Adjacent pairs are written as one run."""
    tokens: list[str] = []
    end = 0
    for start, stop in _merged_pairs(pairs):
        gap, length = start - end, stop - start
        tokens.append(str(gap) if length == 1 else f"{gap}:{length}")
        end = stop
    out: list[str] = []
    i = 0
    while i < len(tokens):
        j = i
        while j + 1 < len(tokens) and tokens[j + 1] == tokens[i]:
            j += 1
        out.append(tokens[i] if j == i else f"{tokens[i]}*{j - i + 1}")
        i = j + 1
    return ",".join(out)


def _merged_pairs(pairs: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for start, stop in sorted(p for p in pairs if p[1] > p[0]):
        if start < 0:
            raise ValueError(f"offset range [{start}, {stop}) starts below 0")
        if out and start < out[-1][1]:
            raise ValueError(f"offset ranges overlap at [{start}, {stop})")
        if out and start == out[-1][1]:
            out[-1][1] = stop
        else:
            out.append([start, stop])
    return [(s, e) for s, e in out]


def runs_from_text(text: str) -> list[tuple[int, int]]:
    """The ``[start, end)`` pairs of :func:`runs_to_text`'s text; a ValueError names a token that is not one."""
    out: list[tuple[int, int]] = []
    end = 0
    for token in filter(None, text.split(",")):
        try:
            run, _, times = token.partition("*")
            gap, _, length = run.partition(":")
            gap_n, length_n, times_n = int(gap), int(length or 1), int(times or 1)
        except ValueError:
            raise ValueError(f"{token!r} in offset runs {text[:80]!r} is not gap[:length][*times]") from None
        if gap_n < 0 or length_n < 1 or times_n < 1 or (gap_n == 0 and (out or times_n > 1)):
            raise ValueError(f"{token!r} in offset runs {text[:80]!r}: the gap must be >= 1 (0 only first), the "
                             "length and times >= 1")
        for _ in range(times_n):
            out.append((end + gap_n, end + gap_n + length_n))
            end += gap_n + length_n
    return out


def runs_to_json(ranges: Iterable[OffsetRange]) -> str:
    """Compact JSON ``{"topic": {"0": "<runs>"}}`` of sparse ranges (:func:`runs_to_text` per partition)."""
    out: dict[str, dict[str, str]] = {}
    for tp, rs in by_partition(ranges).items():
        out.setdefault(tp.topic, {})[str(tp.partition)] = runs_to_text((r.start, r.end) for r in rs)
    return json.dumps(out, sort_keys=True, separators=(",", ":"))


def runs_from_json(text: str) -> list[OffsetRange]:
    """Inverse of :func:`runs_to_json`."""
    data = json.loads(text) if text else {}
    return [OffsetRange(topic, int(p), s, e) for topic, parts in data.items() for p, runs in parts.items()
            for s, e in runs_from_text(runs)]
