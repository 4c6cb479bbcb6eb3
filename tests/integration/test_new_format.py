"""A format is one module and one registry line. A new one, registered here, goes the whole write path —
the pipeline loaded and checked by the format's own rules, its tables made, its records decoded and
written as an executor writes them, committed, proven complete — and no module of ``lake/`` names it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from helpers import tables_of

from tailfill.config import FormatConfig
from tailfill.errors import ConfigError
from tailfill.formats import registry
from tailfill.formats.base import Decoded, Format, NewTable, Rows, valid_utf8
from tailfill.lake.prepare import Destination, prepare_ranges
from tailfill.lake.schema_change import table_columns
from tailfill.offsets import OffsetRange
from tailfill.pipeline.handle import open_pipeline
from tailfill.pipeline.load import load_pipeline
from tailfill.proof.validate import validate
from tailfill.values.schema import HEADERS, RAW_SCHEMA, TIMESTAMP, RangeMarker, table_schema

pytestmark = pytest.mark.integration
LAKE = Path(__file__).resolve().parents[2] / "tailfill" / "lake"


class UpperFormat(Format):
    """``upper``: each value is UTF-8 text, stored upper-cased in the column ``text``."""

    name = "upper"

    @classmethod
    def problems(cls, fmt: FormatConfig) -> list[str]:
        return ["upper format takes no 'fields': its one column is text"] if fmt.fields else []

    @classmethod
    def declared_columns(cls, fmt: FormatConfig) -> pa.Schema:
        schema = table_schema([], fmt.key)
        return schema.insert(len(schema) - 1, pa.field("text", pa.string()))

    def new_table(self) -> NewTable:
        return NewTable(pa.binary(), pa.schema([("text", pa.string())]))

    def decoder(self) -> UpperDecoder:
        return UpperDecoder(self.fmt)


class UpperDecoder:
    def __init__(self, fmt: FormatConfig):
        self.key = fmt.key
        self.rows_schema = UpperFormat.declared_columns(fmt)

    def decode(self, values: pa.Array, keys: pa.Array, table_columns: pa.Schema | None) -> Decoded:
        text = valid_utf8(values) & ~np.asarray(values.is_null())
        at = pa.array(np.flatnonzero(text), pa.int64())
        upper = pc.utf8_upper(values.take(at).cast(pa.string()))
        return Decoded([Rows(at, pa.table({"text": upper}))],
                       {int(i): "not UTF-8 text" for i in np.flatnonzero(~text)})


def records(ranges: list[OffsetRange]):
    """What a reader yields for ``ranges``: each one's records (every 4th not UTF-8), then a marker per range."""
    for r in ranges:
        values = [b"\xff\xfe" if o % 4 == 3 else f"word {o}".encode() for o in range(r.start, r.end)]
        yield pa.RecordBatch.from_arrays(
            [pa.array([r.topic] * r.size), pa.array([r.partition] * r.size, pa.int32()),
             pa.array(range(r.start, r.end), pa.int64()), pa.nulls(r.size, TIMESTAMP), pa.nulls(r.size, pa.binary()),
             pa.array([[]] * r.size, HEADERS), pa.array(values, pa.binary()), pa.nulls(r.size, pa.string()),
             pa.nulls(r.size, pa.string())], schema=RAW_SCHEMA)
    for r in ranges:
        yield RangeMarker(r, r.size).to_batch()


def test_a_new_format_is_one_class_and_one_registry_line(make_pipeline, monkeypatch):
    monkeypatch.setitem(registry.FORMATS, "upper", UpperFormat)  # the one registry line
    cfg = make_pipeline(format__type="upper", format__fields=[], expectations=[])
    with pytest.raises(ConfigError, match=r"format: upper format takes no 'fields'"):  # its own rules check the YAML
        load_pipeline(make_pipeline(format__type="upper", expectations=[]).path)

    pipeline = open_pipeline(cfg)
    tables = pipeline.provision_tables()
    assert tables.data.schema().find_field("text") is not None
    ranges = [OffsetRange(cfg.source.topic, p, 0, 40) for p in range(2)]
    where = Destination(pipeline.fs, tables.data.location(), tables.quarantine.location())
    prepared = prepare_ranges(records, pipeline.format.decoder(), where, "run-upper", ranges,
                              table_columns(tables.data))
    result, _ = pipeline.committer(tables).commit("run-upper", 0, prepared)
    assert result.committed == ranges

    data, quarantine = tables_of(cfg)
    rows = data.scan(selected_fields=("kafka_offset", "text")).to_arrow().sort_by("kafka_offset")
    assert rows.num_rows == 60 and rows["text"][0].as_py() == "WORD 0"
    assert set(quarantine.scan().to_arrow()["error"].to_pylist()) == {"not UTF-8 text"}
    assert validate(pipeline, run_id="run-upper").success  # every offset once: a row or quarantined

    # The lake knows formats by their interface only: no lake module names this one, or any other.
    named = [p.name for p in LAKE.glob("*.py") if any(f'"{name}"' in p.read_text() for name in registry.FORMATS)]
    assert named == []
