"""Column types inferred from sample JSON records (``tailfill init``), and the pipeline names init accepts."""

from __future__ import annotations

import re

import pytest

from tailfill.config import PIPELINE_NAME
from tailfill.errors import ConfigError
from tailfill.run.scaffold import Request, propose
from tailfill.values.column_types import parse_type
from tailfill.values.infer import infer_fields


def types(records: list[dict]) -> dict[str, str]:
    fields, _ = infer_fields(records)
    return {f.name: f.type for f in fields}


def test_scalars_timestamps_and_dates():
    got = types([{"n": 1, "x": 1, "b": True, "s": "a", "t": "2026-01-01T00:00:00Z", "d": "2026-01-01"},
                 {"n": 2, "x": 2.5, "b": False, "s": "b", "t": "2026-01-02 10:00:00+02:00", "d": "2026-01-02"}])
    assert got == {"n": "long", "x": "double", "b": "boolean", "s": "string", "t": "timestamp", "d": "date"}


def test_nested_objects_are_the_union_of_their_keys_and_lists_of_objects_are_typed():
    got = types([{"repo": {"id": 1}, "commits": [{"sha": "a"}]},
                 {"repo": {"name": "x"}, "commits": [], "tags": ["a", "b"]}])
    assert got == {"repo": "struct<id: long, name: string>", "commits": "list<struct<sha: string>>",
                   "tags": "list<string>"}
    for text in got.values():
        parse_type(text)  # every inferred type is one the pipeline's loader reads


def test_what_cannot_be_declared_is_left_out_with_a_note_and_disagreement_becomes_string():
    fields, notes = infer_fields([{"gone": None, "empty": {}, "kafka_x": 1, "bad-name": 1, "m": 1,
                                   "o": {"ok": 1, "a-b": 2}},
                                  {"m": "one", "o": {"ok": 2}}])
    assert {f.name: f.type for f in fields} == {"m": "string", "o": "struct<ok: long>"}
    assert {f.name: f.present for f in fields} == {"m": 2, "o": 2}
    text = "\n".join(notes)
    for said in ("gone: only nulls were seen", "empty: no field could be declared", "kafka_x: not a plain identifier",
                 "bad-name: not a plain identifier", "o.a-b: not a plain identifier",
                 "m: values of several kinds (long, string): declared string"):
        assert said in text, (said, text)


def test_a_timestamp_and_a_plain_string_in_one_field_make_a_string():
    assert types([{"t": "2026-01-01T00:00:00Z"}, {"t": "soon"}]) == {"t": "string"}


def test_init_refuses_a_name_the_pipeline_loader_would_refuse_before_it_reads_the_topic():
    for name, fix in (("Orders", "orders"), ("2024_orders", "t_2024_orders"), ("my-orders", "my_orders")):
        with pytest.raises(ConfigError, match=rf"pipeline name '{name}': use lower-case .*\(fix: e\.g\. {fix}\)$"):
            propose(Request(name, "orders", bootstrap_servers="127.0.0.1:1"))  # nothing listens: never reached
        assert re.match(PIPELINE_NAME, fix)
