"""The ``raw`` format: the value's bytes as they were sent, no columns of their own (at most ``max_value_bytes``)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tailfill.config import FormatConfig
from tailfill.formats.base import Decoded, Format, NewTable, Rows, no_columns
from tailfill.formats.json_fields import _no_registry
from tailfill.values.schema import KEY_TYPES, table_schema


class RawFormat(Format):
    """Every record is a row: its metadata and its raw value; one longer than ``max_value_bytes`` is quarantined."""

    name = "raw"

    @classmethod
    def problems(cls, fmt: FormatConfig) -> list[str]:
        out = ["raw format takes no 'fields'; use type: json to parse values"] if fmt.fields else []
        return out + _no_registry(fmt)

    @classmethod
    def declared_columns(cls, fmt: FormatConfig) -> pa.Schema:
        return table_schema([], fmt.key)

    def new_table(self) -> NewTable:
        return NewTable(KEY_TYPES[self.fmt.key], pa.schema([]))

    def decoder(self) -> RawDecoder:
        return RawDecoder(self.fmt)


class RawDecoder:
    """Values as they are, within ``max_value_bytes``."""

    def __init__(self, fmt: FormatConfig):
        self.key, self.limit = fmt.key, fmt.max_value_bytes
        self.rows_schema = table_schema([], fmt.key)

    def decode(self, values: pa.Array, keys: pa.Array, table_columns: pa.Schema | None) -> Decoded:
        lengths = pc.fill_null(pc.binary_length(values), 0).to_numpy(zero_copy_only=False)
        over = lengths > self.limit
        errors = {int(i): f"value of {lengths[i]} bytes exceeds max_value_bytes {self.limit}"
                  for i in np.flatnonzero(over)}
        positions = pa.array(np.flatnonzero(~over), pa.int64())
        return Decoded([Rows(positions, no_columns(len(positions)))], errors)
