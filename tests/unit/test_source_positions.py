"""Where a Debezium change happened at its source, as one ordered long per connector: Postgres's LSN, MySQL's binlog
position (file number and position) and GTID number; and version_by naming what each connector carries."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from helpers import set_dotted

from tailfill.errors import ConfigError
from tailfill.formats.debezium import binlog_version, gtid_version, read_event
from tailfill.pipeline.load import load_pipeline

CDC = Path(__file__).resolve().parents[2] / "pipelines" / "orders_cdc.yaml"


def mysql(file: str, pos: int, row: int = 0, gtid: str | None = None) -> dict:
    return {"version": "2.7.0.Final", "connector": "mysql", "name": "shop", "ts_ms": 1700000000000, "db": "shop",
            "table": "orders", "server_id": 223344, "gtid": gtid, "file": file, "pos": pos, "row": row}


def test_binlog_positions_order_as_the_binlog_does():
    positions = [("mysql-bin.000003", 4), ("mysql-bin.000003", 157), ("mysql-bin.000003", 4_294_967_295),
                 ("mysql-bin.000004", 4), ("mysql-bin.000010", 120), ("mysql-bin.1000000", 0)]
    versions = [binlog_version(f, p) for f, p in positions]
    assert versions == sorted(versions) and len(set(versions)) == len(versions)
    assert binlog_version("mysql-bin.000003", 157) == 3 * 2**32 + 157
    assert max(versions) < 2**63
    for file, pos in [("mysql-bin", 4), (None, 4), ("mysql-bin.000003", None), ("mysql-bin.000003", -1),
                      ("mysql-bin.000003", 2**32), ("mysql-bin.2147483648", 4)]:
        assert binlog_version(file, pos) is None, (file, pos)


def test_gtids_give_their_transaction_number():
    assert gtid_version("3E11FA47-71CA-11E1-9E33-C80AA9429562:23") == 23
    assert gtid_version("0-1-4711") == 4711  # MariaDB
    assert gtid_version(None) is None and gtid_version("nonsense") is None


def test_an_event_carries_each_connector_s_position():
    mysql_event = read_event({"op": "u", "after": {"order_id": 1}, "source": mysql("binlog.000002", 900, 1,
                                                                                      "uuid:77")})
    assert mysql_event.position == {"cdc_ts_ms": 1700000000000, "cdc_lsn": None, "cdc_binlog": 2 * 2**32 + 900,
                                    "cdc_gtid": 77}
    pg = read_event({"op": "c", "after": {"order_id": 1}, "source": {"ts_ms": 5, "lsn": 33}})
    assert pg.position == {"cdc_ts_ms": 5, "cdc_lsn": 33, "cdc_binlog": None, "cdc_gtid": None}
    truncate = read_event({"op": "t", "before": None, "after": None, "source": mysql("binlog.000002", 950)})
    assert (truncate.op, truncate.body, truncate.position["cdc_binlog"]) == ("t", {}, 2 * 2**32 + 950)


@pytest.mark.parametrize("column", ["cdc_binlog", "cdc_gtid", "cdc_lsn"])
def test_version_by_takes_each_connector_s_position(tmp_path, monkeypatch, column):
    monkeypatch.setenv("TAILFILL_HOME", str(tmp_path / "home"))
    data = set_dotted(yaml.safe_load(CDC.read_text()), {"target__version_by": column})
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    assert load_pipeline(path).target.version_by == column


def test_a_source_position_is_no_key(tmp_path, monkeypatch):
    monkeypatch.setenv("TAILFILL_HOME", str(tmp_path / "home"))
    data = set_dotted(yaml.safe_load(CDC.read_text()), {"target__key": ["cdc_binlog"]})
    path = tmp_path / "p.yaml"
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=r"target\.key: 'cdc_binlog' cannot identify a row"):
        load_pipeline(path)
