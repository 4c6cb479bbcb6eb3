import random
from collections import Counter
from itertools import pairwise

import pytest

from tailfill.offsets import (
    OffsetRange,
    PartitionOffsets,
    TopicPartition,
    cap,
    deal,
    gaps,
    intersect_all,
    merge,
    overlaps,
    passed_over,
    ranges_between,
    ranges_from_json,
    ranges_to_json,
    runs_from_json,
    runs_from_text,
    runs_to_json,
    runs_to_text,
    split_slices,
    subtract,
    total,
)

TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)


def R(start, end, partition=0, topic="t"):
    return OffsetRange(topic, partition, start, end)


def offsets_of(ranges):
    """Brute-force model: the set of (topic, partition, offset) covered by ``ranges``."""
    return {(r.topic, r.partition, o) for r in ranges for o in range(r.start, r.end)}


@pytest.mark.parametrize(("start", "end"), [(-1, 3), (5, 4)])
def test_range_rejects_invalid_bounds(start, end):
    with pytest.raises(ValueError, match="need 0 <= start <= end"):
        R(start, end)


def test_range_basics():
    r = OffsetRange.of(TP1, 3, 10)
    assert (r.tp, r.size, r.is_empty(), str(r)) == (TP1, 7, False, "t[1] [3, 10)")
    assert R(4, 4).is_empty()


def test_split_is_contiguous_near_equal_and_never_empty():
    assert R(0, 10).split(3) == [R(0, 4), R(4, 7), R(7, 10)]
    assert R(0, 2).split(5) == [R(0, 1), R(1, 2)]  # at most one offset per part
    assert R(7, 7).split(4) == [R(7, 7)]
    with pytest.raises(ValueError):
        R(0, 10).split(0)


def test_intersect():
    assert R(0, 10).intersect(R(5, 20)) == R(5, 10)
    assert R(0, 5).intersect(R(5, 9)) is None  # touching half-open ranges share nothing
    assert R(0, 10).intersect(R(0, 10, partition=1)) is None


def test_merge_subtract_overlaps_gaps_examples():
    assert merge([R(5, 8), R(0, 3), R(3, 5), R(9, 9), R(0, 2, 1)]) == [R(0, 8), R(0, 2, 1)]
    assert subtract([R(0, 10)], [R(2, 4), R(6, 7), R(0, 10, 1)]) == [R(0, 2), R(4, 6), R(7, 10)]
    assert overlaps([R(0, 10), R(2, 5), R(3, 8), R(12, 14)]) == [R(2, 8)]
    assert overlaps([R(0, 5), R(5, 9)]) == []
    assert gaps([R(0, 3), R(5, 8)], within=[R(0, 10)]) == [R(3, 5), R(8, 10)]


def test_split_slices_spreads_every_partition_over_slices():
    slices = split_slices([R(0, 10), R(0, 4, 1), R(0, 1, 2)], 2)
    assert slices == [[R(0, 5), R(0, 2, 1), R(0, 1, 2)], [R(5, 10), R(2, 4, 1)]]
    assert split_slices([R(3, 3)], 4) == []
    with pytest.raises(ValueError):
        split_slices([R(0, 1)], 0)


def test_cap_is_proportional_and_noop_under_budget():
    ranges = [R(0, 300), R(100, 200, 1), R(5, 5, 2)]
    assert cap(ranges, 1000) == [R(0, 300), R(100, 200, 1)]  # empty range dropped
    assert cap(ranges, 40) == [R(0, 30), R(100, 110, 1)]
    with pytest.raises(ValueError):
        cap(ranges, 0)


def test_cap_properties_random():
    for seed in range(300):
        rnd = random.Random(seed)
        ranges = [R(s := rnd.randrange(100), s + rnd.randrange(1, 300), p) for p in range(rnd.randrange(1, 6))]
        budget = rnd.randrange(len(ranges), total(ranges) + 2)
        capped = cap(ranges, budget)
        assert [(c.tp, c.start) for c in capped] == [(r.tp, r.start) for r in ranges], seed
        assert all(1 <= c.size <= r.size for c, r in zip(capped, ranges, strict=True)), seed
        pending = total(ranges)
        for c, r in zip(capped, ranges, strict=True):
            assert c.size == r.size if pending <= budget else c.size >= r.size * budget // pending, seed
        assert total(capped) <= max(budget, len(ranges)), seed



def test_cap_total_within_budget_with_tiny_partitions():
    ranges = [R(0, 1000), R(0, 1, 1), R(0, 1, 2)]
    # The one-offset floor of the tiny partitions is taken back from the large one, never from them.
    assert cap(ranges, 3) == [R(0, 1), R(0, 1, 1), R(0, 1, 2)]  # 3 ranges, budget 3
    assert cap(ranges, 5) == [R(0, 3), R(0, 1, 1), R(0, 1, 2)]


def test_partition_offsets_json_round_trip():
    po = PartitionOffsets({TopicPartition("b", 10): 7, TopicPartition("b", 2): 0, TopicPartition("a", 0): 42})
    assert po.to_dict() == {"a": {"0": 42}, "b": {"2": 0, "10": 7}}
    assert PartitionOffsets.from_json(po.to_json()) == po
    assert PartitionOffsets.from_json('{"topic": {"0": 42}}')[TopicPartition("topic", 0)] == 42
    assert list(po) == sorted(po.offsets)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"t": [42]}', 'must look like {"topic": {"0": 42}}'),
        ('{"t": {"zero": 42}}', 'must look like {"topic": {"0": 42}}'),
        ('{"t": {"0": -1}}', "invalid offset -1"),
    ],
)
def test_partition_offsets_bad_input(text, message):
    with pytest.raises(ValueError) as exc:
        PartitionOffsets.from_json(text)
    assert message in str(exc.value)



def test_partition_offsets_rejects_fractional_offset():
    with pytest.raises(ValueError):
        PartitionOffsets.from_json('{"t": {"0": 1.5}}')


def test_ranges_between():
    start = PartitionOffsets({TP0: 5})
    end = PartitionOffsets({TP0: 9, TP1: 3})
    assert ranges_between(start, end) == [R(5, 9), R(0, 3, 1)]
    with pytest.raises(ValueError, match="after end offset"):
        ranges_between(PartitionOffsets({TP0: 10}), PartitionOffsets({TP0: 9}))


def test_ranges_json_round_trip():
    ranges = [R(0, 5, 10), R(7, 9, 2), R(0, 3, 2), R(1, 2, 0, "other")]
    assert sorted(ranges_from_json(ranges_to_json(ranges))) == sorted(ranges)
    assert ranges_from_json(None) == ranges_from_json("") == []


def random_ranges(rnd, n):
    return [R(s := rnd.randrange(40), s + rnd.randrange(0, 15), rnd.randrange(2)) for _ in range(n)]


def test_set_algebra_matches_brute_force_model():
    for seed in range(500):
        check_set_algebra(random.Random(seed))


def check_set_algebra(rnd):
    a, b = random_ranges(rnd, rnd.randrange(0, 8)), random_ranges(rnd, rnd.randrange(0, 8))

    merged = merge(a)
    assert offsets_of(merged) == offsets_of(a)
    assert all(x.end < y.start for x, y in pairwise(merged) if x.tp == y.tp)  # disjoint, non-adjacent
    assert all(not r.is_empty() for r in merged) and merge(merged) == merged

    inside = [c for x in merge(a) for y in merge(b) if (c := x.intersect(y))]
    diff = subtract(a, b)
    assert offsets_of(diff) == offsets_of(a) - offsets_of(b)
    assert offsets_of(inside) == offsets_of(intersect_all(a, b)) == offsets_of(a) & offsets_of(b)
    assert offsets_of(diff) | offsets_of(inside) == offsets_of(a)

    counts = Counter(o for r in a for o in offsets_of([r]))
    assert offsets_of(overlaps(a)) == {o for o, n in counts.items() if n > 1}
    assert offsets_of(gaps(a, within=b)) == offsets_of(b) - offsets_of(a)

    slices = split_slices(a, rnd.randrange(1, 5))
    assert offsets_of(r for s in slices for r in s) == offsets_of(a)
    assert not overlaps(r for s in slices for r in s)


def test_deal_spreads_ranges_into_groups_of_near_equal_size():
    ranges = [R(0, 100, 0), R(0, 60, 1), R(0, 50, 2), R(0, 10, 3), R(5, 5, 4)]
    groups = deal(ranges, 2, min_split=1_000)
    assert sorted(total(g) for g in groups) == [110, 110]
    assert sorted(r for g in groups for r in g) == sorted(ranges[:4])  # every non-empty range once
    assert len(deal(ranges, 8, min_split=1_000)) == 4 and deal([], 3, min_split=1) == []


def test_deal_splits_large_ranges_so_that_every_group_works_and_keeps_partitions_apart():
    groups = deal([R(0, 1_000, 0), R(0, 10, 1)], 4, min_split=200)
    assert sorted(total(g) for g in groups) == [250, 250, 250, 260]
    assert sorted(r for g in groups for r in g) == [R(0, 250, 0), R(250, 500, 0), R(500, 750, 0), R(750, 1_000, 0),
                                                    R(0, 10, 1)]
    assert all(len({r.tp for r in g}) == len(g) for g in groups)  # one consumer reads each partition once
    assert merge(r for g in groups for r in g) == [R(0, 1_000, 0), R(0, 10, 1)]
    assert deal([R(0, 300, 0)], 4, min_split=200) == [[R(0, 300, 0)]]  # too small to be worth splitting


def test_passed_over_names_what_lies_between_delivered_offsets():
    assert passed_over(10, []) == []
    assert passed_over(10, [10, 11, 12]) == []
    assert passed_over(10, [13, 14, 20]) == [(10, 13), (15, 20)]
    assert passed_over(0, [0, 2, 4, 5, 9]) == [(1, 2), (3, 4), (6, 9)]
    assert passed_over(5, [5, 5, 7]) == [(6, 7)]  # a repeat adds no gap


def test_runs_round_trip_and_fold_repeats():
    assert runs_to_text([]) == "" and runs_from_text("") == []
    assert runs_to_text([(100, 101), (201, 202), (302, 303)]) == "100*3"
    assert runs_to_text([(0, 2), (5, 6), (7, 10), (10, 11)]) == "0:2,3,1:4"  # adjacent pairs are one run
    assert runs_from_text("0:2,3,1:4") == [(0, 2), (5, 6), (7, 11)]
    rng = random.Random(3)
    for _ in range(200):
        offsets = sorted(rng.sample(range(0, 500), rng.randint(0, 60)))
        pairs = [(o, o + 1) for o in offsets]
        expected = [(r.start, r.end) for r in merge(R(s, e) for s, e in pairs)]
        assert runs_from_text(runs_to_text(pairs)) == expected


@pytest.mark.parametrize("bad", ["x", "3:0", "-1", "2*0", "0*2", "1,0", "1:2:3"])
def test_runs_text_that_is_not_runs_is_refused(bad):
    with pytest.raises(ValueError, match="offset runs"):
        runs_from_text(bad)


def test_overlapping_runs_are_refused():
    with pytest.raises(ValueError, match="overlap"):
        runs_to_text([(0, 5), (3, 8)])


def test_runs_json_keeps_topics_and_partitions():
    ranges = [R(3, 4), R(9, 12), R(0, 1, partition=1), R(7, 8, topic="u")]
    text = runs_to_json(ranges)
    assert text == '{"t":{"0":"3,5:3","1":"0"},"u":{"0":"7"}}'
    assert sorted(runs_from_json(text)) == sorted(ranges) and runs_from_json("") == runs_from_json("{}") == []


def test_a_million_records_in_transactions_stay_small():
    """The figures the encoding's comment states: one marker after each transaction of 1M records."""

    def markers(size) -> list[OffsetRange]:
        out, pos, records = [], 0, 0
        while records < 1_000_000:
            n = size()
            pos, records = pos + n, records + n
            out.append(R(pos, pos + 1))
            pos += 1
        return out

    fixed = markers(lambda: 100)
    assert runs_to_json(fixed) == '{"t":{"0":"100*10000"}}'
    rng = random.Random(1)
    varied = markers(lambda: rng.randint(50, 150))
    text = runs_to_json(varied)
    assert runs_from_json(text) == varied
    assert len(text) < 36_000 and len(ranges_to_json(varied)) > 150_000
