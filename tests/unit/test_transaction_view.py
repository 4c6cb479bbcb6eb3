"""A transaction's metadata view: computed once per staged change, and always what it staged."""

from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from tailfill.lake.transaction import transaction


def test_a_transaction_sees_each_change_it_stages_and_commits_them(tmp_path):
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/w")
    catalog.create_namespace("db")
    table = catalog.create_table("db.t", schema=Schema(NestedField(1, "id", LongType(), required=False)))
    with transaction(table) as tx:
        first = tx.table_metadata
        assert tx.table_metadata is first  # nothing staged since: the same view, not a new deep copy
        tx.set_properties({"a": "1"})
        assert tx.table_metadata.properties["a"] == "1"
        tx.set_properties({"b": "2"})
        staged = tx.table_metadata.properties
        assert staged["a"] == "1" and staged["b"] == "2"
    table.refresh()
    assert table.properties["a"] == "1" and table.properties["b"] == "2"
