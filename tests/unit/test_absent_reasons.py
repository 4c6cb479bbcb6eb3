"""Absent offsets by reason, without a broker: what each setting accepts and says, when the broker is asked at all,
and how its verdict changes the range checks."""

from __future__ import annotations

import numpy as np

from tailfill.lake.batch_summary import BatchSummary
from tailfill.offsets import OffsetRange, TopicPartition
from tailfill.proof import broker_check
from tailfill.proof.broker_check import JUMP, UNRECORDED, BrokerVerdict, account_absent
from tailfill.proof.completeness import Offsets, check_batches

TP = TopicPartition("t", 0)


def R(start, end, partition=0):
    return OffsetRange("t", partition, start, end)


def stored(*offsets):
    return {TP: Offsets(np.array(sorted(offsets), np.int64), np.empty(0, np.int64))}


def no_broker() -> dict:
    raise AssertionError("the broker was asked")


def checks(setting, absent=((3, 4),), under="read_committed"):
    b = BatchSummary("p", "run-1", 0, [R(0, 10)], [], 9, absent=[R(*a) for a in absent], absent_under=under)
    return check_batches([b], stored(0, 1, 2, 4, 5, 6, 7, 8, 9), setting)


def test_allowed_accepts_the_batchs_record_without_the_broker():
    out, by_reason = account_absent(checks("allowed"), "allowed", no_broker)
    assert out[0].absent == [R(3, 4)]
    assert by_reason == {"not delivered under read_committed, as its batch recorded (not checked on the broker)":
                         [R(3, 4)]}


def test_nothing_absent_asks_no_broker_even_when_verified():
    out, by_reason = account_absent(checks("verified", absent=()), "verified", no_broker)
    assert by_reason == {} and out[0].missing == [R(3, 4)]  # not recorded: missing, whatever the broker says


def test_an_older_batch_accepted_on_its_count_says_so():
    b = BatchSummary("p", "run-1", 0, [R(0, 10)], [], 9)
    _, by_reason = account_absent(check_batches([b], stored(0, 1, 2, 4, 5, 6, 7, 8, 9), "allowed"), "allowed",
                                  no_broker)
    assert by_reason == {UNRECORDED: [R(3, 4)]}


def test_none_leaves_nothing_to_verify():
    out, by_reason = account_absent(checks("none"), "none", no_broker)
    assert by_reason == {} and out[0].declined == [R(3, 4)]


def test_a_verdict_refutes_only_offsets_recorded_under_its_level():
    verdict = BrokerVerdict({}, {"read_committed": [([R(3, 4)], "the broker delivers a record there")]})
    [refuted] = verdict.apply(checks("verified"))
    assert refuted.absent == [] and refuted.refuted == [(R(3, 4), "the broker delivers a record there")]
    [kept] = verdict.apply(checks("verified", under="read_uncommitted"))
    assert kept.absent == [R(3, 4)] and kept.refuted == []


def test_a_partition_is_read_in_one_span_until_a_jump_worth_a_seek():
    near = [R(10, 11), R(500, 502), R(10 + JUMP, 11 + JUMP)]
    assert broker_check._windows(near) == [R(10, 11 + JUMP)]
    far = [R(10, 11), R(12 + JUMP, 13 + JUMP)]
    assert broker_check._windows(far) == [R(10, 11), R(12 + JUMP, 13 + JUMP)]


def test_only_delivered_offsets_inside_absent_ranges_count():
    got = np.array([0, 3, 4, 9, 10, 20], np.int64)
    assert broker_check._inside(got, [R(3, 5), R(10, 11)]).tolist() == [3, 4, 10]
