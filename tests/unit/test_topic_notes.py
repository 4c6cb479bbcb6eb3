"""Which topics of a pattern are new since the cutover, and which are gone: the tail's one line each."""

from types import SimpleNamespace

from tailfill.lake.ledger import Ledger
from tailfill.offsets import OffsetRange, PartitionOffsets, TopicPartition
from tailfill.run.plan import new_and_gone_topics
from tailfill.run.planner import topic_notes


def state(on_broker: dict[str, int], committed: list[OffsetRange], cutover: list[str] | None):
    high = PartitionOffsets({TopicPartition(t, 0): end for t, end in on_broker.items()})
    cut = PartitionOffsets({TopicPartition(t, 0): 10 for t in cutover}) if cutover is not None else None
    cfg = SimpleNamespace(source=SimpleNamespace(bootstrap_servers="127.0.0.1:9"))
    return SimpleNamespace(marks=SimpleNamespace(high=high), ledger=Ledger(committed), cutover=cut, cfg=cfg)


def test_a_topic_after_the_cutover_with_records_is_named_once_until_read():
    s = state({"a": 10, "b": 5, "c": 0}, [OffsetRange("a", 0, 0, 10)], cutover=["a"])
    assert new_and_gone_topics(s) == (["b", "c"], [])
    assert topic_notes(s) == ["new topic b (1 partition, 5 offsets): the tail reads it from its earliest offset"]
    read = state({"a": 10, "b": 5}, [OffsetRange("a", 0, 0, 10), OffsetRange("b", 0, 0, 5)], cutover=["a"])
    assert topic_notes(read) == []


def test_before_any_cutover_no_topic_is_new():
    assert new_and_gone_topics(state({"a": 10, "b": 5}, [], cutover=None)) == ([], [])


def test_a_committed_topic_the_broker_no_longer_has_is_gone():
    s = state({"a": 10}, [OffsetRange("a", 0, 0, 10), OffsetRange("b", 0, 0, 5)], cutover=["a", "b"])
    assert new_and_gone_topics(s) == ([], ["b"])
    assert topic_notes(s) == ["topic b is gone from 127.0.0.1:9: its rows stay in the table, nothing more is read "
                              "from it"]
