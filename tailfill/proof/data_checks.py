"""The pipeline's data expectations, measured exactly over a run's rows with Arrow compute.

One :class:`DataCheck` per rule of the YAML's ``expectations:`` (and one for the row count): what was
checked, over how many values, how many were unexpected, and what fraction may be (``1 - mostly``).
The ``data_checks`` suite in ``expectations/`` asserts on these rows with Great Expectations, the
same way the completeness suites assert on the exact offset accounting. Counting in Arrow keeps the
check linear and vectorized: GE's own pandas engine tests some rules value by value.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from tailfill.config import DataExpectation
from tailfill.errors import ConfigError
from tailfill.values.paths import column_at
from tailfill.values.schema import FIELD_TYPES

DATA_COLUMNS = ["check", "column", "evaluated", "unexpected", "unexpected_fraction", "allowed_fraction"]
EXAMPLES = 3


@dataclass(frozen=True)
class DataCheck:
    """One rule over one column of a run's rows."""

    check: str  # rows | not_null | accepted_values | between | type
    column: str
    rule: str  # the rule in words, for the problem line
    evaluated: int  # values the rule looked at (nulls are not judged by accepted_values or between)
    unexpected: int
    allowed_fraction: float  # 1 - mostly
    examples: tuple[str, ...] = ()

    @property
    def unexpected_fraction(self) -> float:
        return self.unexpected / self.evaluated if self.evaluated else 0.0

    @property
    def failed(self) -> bool:
        return self.unexpected_fraction > self.allowed_fraction

    def summary_row(self) -> dict:
        return {"check": self.check, "column": self.column, "evaluated": self.evaluated,
                "unexpected": self.unexpected, "unexpected_fraction": self.unexpected_fraction,
                "allowed_fraction": self.allowed_fraction}

    def problem(self) -> str:
        allowed = f", {self.allowed_fraction:.1%} allowed" if self.allowed_fraction else ""
        examples = f", e.g. {', '.join(self.examples)}" if self.examples else ""
        return (f"data expectation failed: {self.column} {self.rule}: {self.unexpected:,} of {self.evaluated:,} "
                f"values unexpected{allowed}{examples}")


def expectation_columns(expectations: list[DataExpectation]) -> list[str]:
    """The columns the checks read (only these are scanned)."""
    return sorted({e.column.split(".")[0] for e in expectations})  # a nested column is read with its struct


def check_rows(rows: pa.Table, expectations: list[DataExpectation], expected_rows: int) -> list[DataCheck]:
    """Every rule of ``expectations`` over ``rows``, plus the row count the ledger expects."""
    out = [DataCheck("rows", "*", f"count = {expected_rows:,} (the run's committed rows)", max(expected_rows, 1),
                     abs(rows.num_rows - expected_rows), 0.0)]
    for e in expectations:
        out += _checks(column_at(rows, e.column), e)  # a nested column (repo.id) too
    return out


def _checks(col: pa.ChunkedArray, e: DataExpectation) -> list[DataCheck]:
    allowed = round(1.0 - e.mostly, 12)
    present = pc.drop_null(col)
    out = []
    if e.not_null:
        out.append(DataCheck("not_null", e.column, "is not null", len(col), col.null_count, allowed))
    if e.accepted_values is not None:
        try:
            accepted = pa.array(e.accepted_values).cast(col.type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise ConfigError(f"expectations: accepted_values of '{e.column}' do not fit its type {col.type}: "
                              f"{exc}") from None
        bad = present.filter(pc.invert(pc.is_in(present, value_set=accepted)))
        out.append(DataCheck("accepted_values", e.column, f"in {e.accepted_values}", len(present), len(bad), allowed,
                             _examples(bad)))
    if e.min is not None or e.max is not None:
        outside = pa.array([False] * len(present), pa.bool_())
        if e.min is not None:
            outside = pc.or_(outside, pc.less(present, e.min))
        if e.max is not None:
            outside = pc.or_(outside, pc.greater(present, e.max))
        bad = present.filter(outside)
        bounds = f"between {e.min if e.min is not None else '-inf'} and {e.max if e.max is not None else 'inf'}"
        out.append(DataCheck("between", e.column, bounds, len(present), len(bad), allowed, _examples(bad)))
    if e.type is not None:
        mismatch = col.type != FIELD_TYPES[e.type]
        out.append(DataCheck("type", e.column, f"of type {e.type}", len(col), len(col) if mismatch else 0, 0.0,
                             (str(col.type),) if mismatch else ()))
    return out


def _examples(values: pa.ChunkedArray | pa.Array) -> tuple[str, ...]:
    """The first few distinct unexpected values in sort order, as they would be written in Python."""
    distinct = pc.unique(values)
    return tuple(repr(v)[:60] for v in distinct.take(pc.sort_indices(distinct)[:EXAMPLES]).to_pylist())
