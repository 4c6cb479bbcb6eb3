"""JSON fields not declared: found and counted without changing the rows, typed, and evolved into columns."""

import json

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_records import batch, decoder_of, js

from tailfill.config import FieldSpec, FormatConfig
from tailfill.formats.base import split_records
from tailfill.formats.evolve import columns_to_add, widen
from tailfill.formats.json_drift import extra_paths, value_type
from tailfill.formats.json_evolve import fill
from tailfill.formats.json_fields import RowParser
from tailfill.run.contract import IngestResult, JobResult
from tailfill.run.query_state import Tally
from tailfill.state.records import BatchReport
from tailfill.values.drift import Drift, describe
from tailfill.values.schema import METADATA_FIELDS, field_type

FIELDS = [FieldSpec(name="id", type="long", required=True), FieldSpec(name="repo", type="struct<name: string>"),
          FieldSpec(name="tags", type="list<struct<k: string>>")]


def fmt(unknown_fields: str = "ignore") -> FormatConfig:
    return FormatConfig(type="json", fields=FIELDS, unknown_fields=unknown_fields)


def test_undeclared_fields_are_counted_with_their_first_offset_and_the_rows_stay_as_they_were():
    values = [js(id=i, repo={"name": "r"}) for i in range(300)]
    values[130] = js(id=130, org={"login": "a"})
    values[250] = js(id=250, org={"login": "b"}, repo={"name": "r", "license": "mit"})
    values[260] = js(id=260, org=None, pad="x" * 2000)  # long: by the per-record rules
    drift = Drift()
    rows, bad = split_records(batch(values, start_offset=1000), decoder_of(fmt()), "r", None, drift)
    plain, _ = split_records(batch(values, start_offset=1000), decoder_of(fmt()), "r")
    assert rows.equals(plain) and rows.num_rows == 300 and bad.num_rows == 0
    # batch() spreads records over partitions 0, 1, 2 by position: record 130 is 1:1130
    assert drift.unknown == {"org": [3, 1, 1130], "repo.license": [1, 1, 1250], "pad": [1, 2, 1260]}
    assert describe(drift.unknown) == ("org (3 records, first at 1:1130), repo.license (1 record, first at 1:1250), "
                                       "pad (1 record, first at 2:1260)")


def test_keys_inside_declared_structs_and_lists_of_them_are_named_by_path():
    kind = field_type("list<struct<k: string, sub: struct<a: long>>>")
    assert extra_paths([{"k": "x", "sub": {"a": 1, "b": 2}}, {"z": 1}, {"z": 2}], kind, "tags") == ["tags.sub.b",
                                                                                                    "tags.z"]
    assert extra_paths("not a struct", kind, "tags") == []


documents = st.fixed_dictionaries(
    {"id": st.integers(0, 10**6)},
    optional={"repo": st.fixed_dictionaries({"name": st.text(max_size=5)},
                                            optional={"license": st.text(max_size=5), "stars": st.integers()}),
              "tags": st.lists(st.fixed_dictionaries({"k": st.text(max_size=3)}, optional={"v": st.booleans()}),
                               max_size=3),
              "org": st.dictionaries(st.sampled_from(["login", "id"]), st.integers(), max_size=2),
              "n": st.integers() | st.text(max_size=4) | st.none(),
              "big": st.just("x" * 1600)})


@settings(max_examples=60, deadline=None)
@given(st.lists(documents | st.sampled_from([b"{not json", b"", b"[1]"]), max_size=300))
def test_what_is_found_is_what_a_plain_reading_finds_and_rows_do_not_change(docs):
    values = [d if isinstance(d, bytes) else json.dumps(d).encode() for d in docs]
    parser = RowParser(fmt())
    found = parser.found()
    columns, good, errors = parser.parse(pa.array(values, pa.binary()), found)
    plain = RowParser(fmt()).parse(pa.array(values, pa.binary()))
    assert (columns, good, errors) == plain
    expected: dict[str, list[int]] = {}
    for i, d in enumerate(docs):
        if isinstance(d, bytes):
            continue
        paths = [k for k in d if k not in ("id", "repo", "tags")]
        paths += extra_paths(d.get("repo"), field_type("struct<name: string>"), "repo")
        paths += extra_paths(d.get("tags"), field_type("list<struct<k: string>>"), "tags")
        for path in paths:
            expected.setdefault(path, [0, i])[0] += 1
    assert found.paths == expected


def test_inferred_types_and_how_they_join():
    assert value_type([1, 2.5]) == "double"
    assert value_type(["2026-03-01T10:00:00Z"]) == "timestamp"
    assert value_type([{"login": "a"}, {"id": 3}]) == "struct<login: string, id: long>"
    assert value_type([None]) is None
    assert widen(field_type("struct<a: long>"), field_type("struct<b: string, a: double>")) == \
        field_type("struct<a: double, b: string>")
    assert widen(pa.int64(), pa.string()) is None


def test_columns_to_add_joins_the_tasks_wants_earliest_first_and_leaves_a_conflict_to_the_quarantine():
    table = pa.schema([*METADATA_FIELDS, pa.field("org", field_type("struct<login: string>"))])
    wants = [{"n": {"string": [1, 5]}, "org": {"struct<id: long>": [0, 9]}}, {"n": {"long": [0, 7], "double": [2, 1]}}]
    added = columns_to_add(table, wants)
    assert {f.name: str(f.type) for f in added} == {  # n: 0:7 (long) before 1:5 (string), then 2:1 (double)
        "n": "double", "org": str(field_type("struct<login: string, id: long>"))}
    assert columns_to_add(pa.schema([*METADATA_FIELDS, pa.field("n", pa.int64())]), [{"n": {"long": [0, 1]}}]) == \
        pa.schema([])


def test_new_columns_come_in_the_order_the_records_hold_them_not_by_name():
    table = pa.schema([*METADATA_FIELDS, pa.field("id", pa.int64())])
    values = [js(id=1, zeta=1, alpha="a", mid=True), js(id=2, mid=False, beta=2.5)]
    drift = Drift()
    split_records(batch(values, start_offset=0), decoder_of(fmt("evolve")), "r", table, drift)
    again = Drift.from_json(drift.to_json())  # as a task hands it to the driver
    assert columns_to_add(table, [again.wants]).names == ["zeta", "alpha", "mid", "beta"]


def test_evolved_columns_take_the_values_and_a_value_of_another_type_is_refused_naming_both_types():
    columns = pa.schema([pa.field("n", pa.int64()), pa.field("org", field_type("struct<login: string>"))])
    extras = {0: {"n": 1}, 2: {"n": "two"}, 3: {"org": {"login": "a", "id": 4}, "new": True}}
    out = fill([0, 1, 2, 3], extras, columns)
    assert out.arrays[0].to_pylist() == [1, None, None, None]
    assert out.refused == {2: "field 'n': the table has long, this record has string"}
    assert out.wants == [("org", "struct<login: string, id: long>", 3), ("new", "boolean", 3)]


def test_evolve_quarantines_a_conflicting_record_and_counts_what_it_saw():
    table = pa.schema([*METADATA_FIELDS, pa.field("id", pa.int64()), pa.field("n", pa.int64())])
    drift = Drift()
    rows, bad = split_records(batch([js(id=1, n=5), js(id=2, n="x"), js(id=3)]), decoder_of(fmt("evolve")), "r",
                              table, drift)
    assert rows.column("n").to_pylist() == [5, None]
    assert bad.column("error").to_pylist() == ["field 'n': the table has long, this record has string"]
    assert drift.unknown == {"n": [2, 0, 100]}
    assert format_of_evolve_follows_rows()


def format_of_evolve_follows_rows() -> bool:
    from tailfill.formats.registry import format_of

    return format_of(fmt("evolve"), "t").follows_writer_schema and not format_of(fmt(), "t").follows_writer_schema


def test_the_run_result_and_its_tally_name_the_fields():
    report = BatchReport(batch_id=0, at=0.0, seconds=1.0, offsets=10, records=10, rows=10, quarantined=0,
                         unknown_fields={"org": [4, 1, 7]})
    later = BatchReport(batch_id=1, at=1.0, seconds=1.0, offsets=10, records=10, rows=10, quarantined=0,
                        unknown_fields={"org": [2, 0, 20], "x.y": [1, 0, 21]})
    assert BatchReport.from_json(report.to_json()) == report
    tally = Tally().after(report).after(later)
    result = tally.result("run-1", "backfill")
    assert result.unknown_fields == {"org": [6, 0, 20], "x.y": [1, 0, 21]}
    text = JobResult([result]).asstr()
    assert "fields not declared: org (6 records, first at 0:20), x.y (1 record, first at 0:21)" in text
    assert JobResult.from_dict(JobResult([result]).asdict()).results[0].unknown_fields == result.unknown_fields
    assert IngestResult("r", "l").unknown_fields == {}


@pytest.mark.parametrize("mode", ["ignore", "quarantine", "evolve"])
def test_unknown_fields_takes_evolve(mode):
    assert fmt(mode).unknown_fields == mode


def _evolved(table: pa.Schema, added: pa.Schema) -> pa.Schema:
    """``table`` with ``added``'s columns new or in place of theirs (as the driver's schema change leaves it)."""
    kept = [f for f in table if added.get_field_index(f.name) < 0]
    return pa.schema([*kept, *added])


def test_a_new_key_beside_a_value_its_column_takes_as_it_is_is_kept_not_dropped():
    # the struct columns evolve made earlier; the records add keys beside a date-looking string, a date in a
    # timestamp, an empty list: the values fit the columns as they are, the new keys must reach the table
    table = pa.schema([*METADATA_FIELDS, pa.field("id", pa.int64()),
                       pa.field("meta", field_type("struct<day: string>")),
                       pa.field("when", field_type("struct<at: timestamp>")),
                       pa.field("box", field_type("struct<items: list<long>>"))])
    values = [js(id=1, meta={"day": "2026-03-02", "tz": "UTC"}), js(id=2, when={"at": "2026-03-02", "zone": "CET"}),
              js(id=3, box={"items": [], "size": 4})]
    for _ in range(4):  # as prepare_evolving: decode, add what the records want, decode again
        drift = Drift()
        rows, bad = split_records(batch(values), decoder_of(fmt("evolve")), "r", table, drift)
        added = columns_to_add(table, [drift.wants])
        if not len(added):
            break
        table = _evolved(table, added)
    assert bad.column("error").to_pylist() == []
    assert rows.column("meta").to_pylist()[0] == {"day": "2026-03-02", "tz": "UTC"}
    assert rows.column("when").to_pylist()[1]["zone"] == "CET"
    assert rows.column("box").to_pylist()[2] == {"items": [], "size": 4}


def test_a_struct_column_of_any_type_the_table_has_widens_with_a_new_key():
    # a column the table already had (a field no longer declared): its types are written back as format.fields reads
    # them, so the wider column can be made
    table = pa.schema([*METADATA_FIELDS, pa.field("id", pa.int64()), pa.field("price", field_type(
        "struct<amount: decimal(12, 2), n: int, f: float, tags: map<string, long>, b: binary>"))])
    drift = Drift()
    split_records(batch([js(id=1, price={"amount": 1.5, "n": 2, "currency": "EUR"})]), decoder_of(fmt("evolve")),
                  "r", table, drift)
    added = columns_to_add(table, [drift.wants])
    assert str(added.field("price").type) == str(field_type(
        "struct<amount: decimal(12, 2), n: int, f: float, tags: map<string, long>, b: binary, currency: string>"))
