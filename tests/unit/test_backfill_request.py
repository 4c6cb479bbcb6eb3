"""The backfill form's fields as a request: the same request as the command line's flags."""

import pytest

from tailfill.errors import ConfigError
from tailfill.offsets import PartitionOffsets, TopicPartition
from tailfill.run.planner import BackfillRequest, topic_names


def test_the_forms_defaults_are_earliest_to_the_cutover_of_every_topic():
    request = BackfillRequest.from_params({"from_offsets": "earliest", "to_offsets": "cutover", "topics": ""})
    assert (request.start, request.end, request.topics, request.on_committed) == (None, None, (), "skip")


def test_the_forms_fields_reach_the_request():
    request = BackfillRequest.from_params({
        "from_offsets": '{"a": {"0": 5}}', "to_offsets": '{"a": {"0": 9}}', "slices": 3, "max_parallel_slices": 2,
        "committed_ranges": "fail", "topics": " shop.orders, shop.refunds ,"})
    assert request.start == PartitionOffsets({TopicPartition("a", 0): 5})
    assert request.end == PartitionOffsets({TopicPartition("a", 0): 9})
    assert (request.slices, request.lanes, request.on_committed) == (3, 2, "fail")
    assert request.topics == ("shop.orders", "shop.refunds")


def test_a_bad_offsets_field_names_the_field():
    with pytest.raises(ConfigError, match="From"):
        BackfillRequest.from_params({"from_offsets": "{not json"})


def test_topic_names_of_nothing_are_none():
    assert topic_names(None) == () and topic_names(" , ") == ()
