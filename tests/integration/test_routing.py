"""One pipeline, a table per topic: a pattern of topics routed to tables by ``target.table``'s template.

On the real broker: three topics into three tables and two topics into one, each table with its own ledger,
cutover and proof, every offset once; a topic created after the first run gets a table of its own, its history
read by the next tail; a keyed pattern pipeline (Debezium topics of two tables) through the command line, one
table's commit failing while the other commits, then caught up.
"""

from __future__ import annotations

import uuid

import pytest
import yaml
from helpers import DEMO, assert_each_offset_once, backfill, tail

from tailfill.cli import main
from tailfill.dev.change_stream import change_stream, fold, produce_changes
from tailfill.dev.sample import produce_sample
from tailfill.pipeline.handle import open_pipeline
from tailfill.pipeline.load import load_pipeline
from tailfill.run.routed import routes_for
from tailfill.source.topics import ensure_topic

pytestmark = pytest.mark.integration

PARTITIONS = 2
REPO = DEMO.parents[1]


def topics_made(bootstrap: str, names: list[str], records: int) -> None:
    for name in names:
        ensure_topic(bootstrap, name, PARTITIONS)
        produce_sample(bootstrap, name, records, PARTITIONS, bad_every=97)


def test_a_pattern_routes_each_topic_to_its_table_and_a_new_topic_gets_one_with_its_history(spark, make_pipeline,
                                                                                               capsys):
    p = f"r{uuid.uuid4().hex[:8]}"
    orders, customers, eu, us = f"{p}.shop.orders", f"{p}.shop.customers", f"{p}.eu.refunds", f"{p}.us.refunds"
    cfg = make_pipeline(name="shop", source__topic=None, source__partitions=PARTITIONS,
                        source__topic_pattern=rf"{p}\..*", target__table="{topic.2}", expectations=[])
    bootstrap = cfg.source.bootstrap_servers
    topics_made(bootstrap, [orders, customers, eu, us], 150)

    routes, _ = routes_for(cfg, "backfill")
    assert [(r.table, r.topics) for r in routes] == [("customers", (customers,)), ("orders", (orders,)),
                                                     ("refunds", (eu, us))]
    for route in routes:
        assert sum(r.offsets for r in backfill(spark, route.cfg)) == 150 * len(route.topics)

    invoices = f"{p}.shop.invoices"  # after the pipeline's first run: a table of its own, its history the tail's
    topics_made(bootstrap, [invoices], 120)
    topics_made(bootstrap, [orders, us], 40)
    routes, notes = routes_for(cfg, "tail")
    assert f"new table invoices for topic {invoices}: the tail reads it from the earliest offset" in notes
    for route in routes:
        tail(spark, route.cfg)

    per_table = {route.table: assert_each_offset_once(route.cfg, list(route.topics)) for route in routes}
    assert per_table == {"customers": {customers: 150}, "orders": {orders: 190}, "refunds": {eu: 150, us: 190},
                         "invoices": {invoices: 120}}
    with open_pipeline(routes[0].cfg) as pipeline:  # each table its own: the customers table holds no other topic
        assert pipeline.cfg.target.table == "customers" and pipeline.cfg.name == "shop__customers"

    assert main(["status", cfg.path]) == 0
    out = capsys.readouterr().out
    assert "shop routes the topics matching" in out and "to 4 table(s) by '{topic.2}'" in out
    assert all(f"== table {t}" in out for t in per_table) and "status of shop: 4 of 4 table(s) ok" in out
    assert f"topic {eu}: {PARTITIONS} partitions, committed 150, lag 0" in out
    assert main(["validate", cfg.path, "--all"]) == 0
    assert "validate of shop: 4 of 4 table(s) ok" in capsys.readouterr().out
    assert main(["preflight", cfg.path]) == 0 and main(["show", cfg.path]) == 0
    out = capsys.readouterr().out
    assert f"{eu} has {PARTITIONS} partitions, {us} has {PARTITIONS} partitions" in out  # the refunds table's
    assert f"topic '{invoices}' has {PARTITIONS} partitions" in out
    assert "preflight of shop: 4 of 4 table(s) ok" in out and "show of shop: 4 of 4 table(s) ok" in out


def keyed_pattern(tmp_path, bootstrap: str, pattern: str) -> str:
    """The shipped orders_cdc pipeline over ``pattern``, each topic's changes into a keyed table of its own."""
    data = yaml.safe_load((REPO / "pipelines" / "orders_cdc.yaml").read_text())
    data["name"] = "shopcdc"
    data["source"].pop("topic")
    data["source"].update(bootstrap_servers=bootstrap, topic_pattern=pattern, partitions=PARTITIONS)
    for named in ("quarantine_table", "state_table"):
        data["target"].pop(named, None)
    data["target"]["table"] = "{topic.1}"
    data["tail"]["restart_backoff_seconds"] = 0.5  # a table whose every commit fails spends its budget quickly
    path = tmp_path / "shopcdc.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_a_keyed_pattern_pipeline_keeps_a_state_per_table_and_one_failing_table_holds_no_other_back(
        home, broker, tmp_path, arm_fault, capsys):
    p = f"k{uuid.uuid4().hex[:8]}"
    topics = {"orders": f"{p}.orders", "customers": f"{p}.customers"}
    streams = {table: change_stream(1500, 150, partitions=PARTITIONS, wrapped=True, snapshot=50, seed=i)
               for i, table in enumerate(topics)}
    for table, topic in topics.items():
        produce_changes(broker.bootstrap_servers, topic, streams[table][:900], PARTITIONS)
    path = keyed_pattern(tmp_path, broker.bootstrap_servers, rf"{p}\..*")

    assert main(["backfill", path]) == 0  # spark-submit: one table after the other
    out = capsys.readouterr().out
    assert "backfill of shopcdc: 2 of 2 table(s) ok" in out

    for table, topic in topics.items():
        produce_changes(broker.bootstrap_servers, topic, streams[table][900:], PARTITIONS)
    arm_fault("before-commit@shopcdc__orders", 1000)  # the orders table's every commit fails
    assert main(["tail", path, "--once"]) == 1  # both tables' tails at once
    out = capsys.readouterr().out
    assert "tail of shopcdc: 1 of 2 table(s) ok; failed: orders" in out

    routes = {r.table: r.cfg for r in routes_for(load_pipeline(path))[0]}
    with open_pipeline(routes["customers"]) as customers:  # the other table committed all of its changes
        assert _state(customers) == fold(streams["customers"])
    with open_pipeline(routes["orders"]) as orders:
        assert _state(orders) != fold(streams["orders"])

    arm_fault("before-commit@shopcdc__orders", 0)
    assert main(["tail", path, "--once"]) == 0  # the failed table catches up; the other has nothing to do
    for table, cfg in routes.items():
        with open_pipeline(cfg) as pipeline:
            assert _state(pipeline) == fold(streams[table])
    assert main(["validate", path, "--all"]) == 0
    assert "validate of shopcdc: 2 of 2 table(s) ok" in capsys.readouterr().out


def _state(pipeline) -> dict[int, tuple[int, int]]:
    rows = pipeline.open_state_table().scan(selected_fields=("order_id", "kafka_partition", "kafka_offset"))
    return {r["order_id"]: (r["kafka_partition"], r["kafka_offset"]) for r in rows.to_arrow().to_pylist()}
