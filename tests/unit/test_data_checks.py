"""Data expectations counted exactly over a run's rows (what the data_checks suite asserts on)."""

from datetime import UTC, datetime

import pyarrow as pa
import pytest

from tailfill.config import DataExpectation
from tailfill.errors import ConfigError
from tailfill.proof.data_checks import check_rows

ROWS = pa.table({
    "id": pa.array(["a", "b", None, "d"]),
    "n": pa.array([1, 5, 9, None], pa.int64()),
    "kind": pa.array(["view", "click", "view", None]),
    "at": pa.array([datetime(2026, 1, 1, tzinfo=UTC)] * 4, pa.timestamp("us", tz="UTC")),
})


def checks(*expectations, expected_rows=4):
    return {(c.check, c.column): c for c in check_rows(ROWS, list(expectations), expected_rows)}


def test_not_null_counts_nulls_over_all_rows_and_honours_mostly():
    strict = checks(DataExpectation(column="id", not_null=True))[("not_null", "id")]
    assert (strict.evaluated, strict.unexpected, strict.failed) == (4, 1, True)
    lenient = checks(DataExpectation(column="id", not_null=True, mostly=0.75))[("not_null", "id")]
    assert lenient.unexpected_fraction == 0.25 and not lenient.failed


def test_accepted_values_and_bounds_judge_present_values_only_and_show_examples():
    got = checks(DataExpectation(column="kind", accepted_values=["view"]), DataExpectation(column="n", min=0, max=5))
    kind, n = got[("accepted_values", "kind")], got[("between", "n")]
    assert (kind.evaluated, kind.unexpected, kind.examples) == (3, 1, ("'click'",))
    assert (n.evaluated, n.unexpected, n.examples) == (3, 1, ("9",))
    assert kind.problem() == ("data expectation failed: kind in ['view']: 1 of 3 values unexpected, e.g. 'click'")


def test_types_and_the_row_count_are_checked():
    got = checks(DataExpectation(column="at", type="timestamp"), DataExpectation(column="n", type="double"),
                 expected_rows=5)
    assert not got[("type", "at")].failed
    assert got[("type", "n")].failed and got[("type", "n")].examples == ("int64",)
    assert got[("rows", "*")].unexpected == 1 and got[("rows", "*")].failed


def test_accepted_values_that_cannot_be_of_the_column_s_type_are_a_config_error():
    with pytest.raises(ConfigError, match="accepted_values of 'n' do not fit its type int64"):
        checks(DataExpectation(column="n", accepted_values=["x"]))
