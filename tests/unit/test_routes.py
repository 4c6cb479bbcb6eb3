"""Routing topics to tables: the template, the routes a pipeline's topics make, and a route's ref."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tailfill.config import PipelineConfig
from tailfill.errors import ConfigError
from tailfill.pipeline.load import load_pipeline, resolve_pipeline
from tailfill.pipeline.routes import (
    RouteSet,
    group_topics,
    known_text,
    lane_shares,
    read_known,
    route_config,
    routes_asked,
    routes_of,
)
from tailfill.values.table_template import table_for, template_problems

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("TAILFILL_HOME", str(tmp_path / "home"))
    for var in ("TAILFILL_BOOTSTRAP_SERVERS", "TAILFILL_DEMO_TOPIC", "TAILFILL_PIPELINES"):
        monkeypatch.delenv(var, raising=False)


def routed(tmp_path, shipped: str = "demo", table: str = "{topic.2}", target: dict | None = None,
           **source) -> PipelineConfig:
    """A shipped pipeline with ``target.table`` a template over a pattern (or ``source``'s topics)."""
    data = yaml.safe_load((REPO / "pipelines" / f"{shipped}.yaml").read_text())
    data["name"] = "shop"
    data["source"].pop("topic")
    data["source"].update(source or {"topic_pattern": r"shop\.public\..*"})
    for named in ("quarantine_table", "state_table"):  # a routed table's are named after it
        data["target"].pop(named, None)
    data["target"].update(table=table, **(target or {}))
    path = tmp_path / "shop.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_pipeline(path)


@pytest.mark.parametrize(("template", "topic", "table"), [
    ("{topic.2}", "shop.public.orders", "orders"),
    ("{topic}", "shop.public.orders", "shop_public_orders"),
    ("raw_{topic.1}_{topic.2}", "shop.public.order-lines", "raw_public_order_lines"),
    ("events", "anything.at.all", "events"),
])
def test_a_template_places_each_topic_in_its_table(template, topic, table):
    assert table_for(template, topic) == table


def test_a_template_names_the_topic_it_cannot_place():
    with pytest.raises(ValueError, match=r"topic 'orders' has 1 dot-separated part\(s\), so no \{topic.2\}"):
        table_for("{topic.2}", "orders")
    with pytest.raises(ValueError, match=r"topic '9\.x' gives table name '9' by '\{topic\.0\}'"):
        table_for("{topic.0}", "9.x")
    assert template_problems("{topic.two}_{table}") == [
        "placeholder {topic.two} is not {topic} or {topic.N} (N: a part's index from 0)",
        "placeholder {table} is not {topic} or {topic.N} (N: a part's index from 0)"]
    assert template_problems("{topic.1}}") == ["a brace without its pair"]


def test_a_routed_pipeline_is_checked_when_loaded(tmp_path):
    with pytest.raises(ConfigError, match=r"target: table '\{topic.x\}': placeholder \{topic.x\} is not"):
        routed(tmp_path, table="{topic.x}")
    with pytest.raises(ConfigError, match="leave quarantine_table unset"):
        routed(tmp_path, target={"quarantine_table": "q"})
    with pytest.raises(ConfigError, match="read several topics"):
        routed(tmp_path, topic="shop.public.orders")


def test_topics_group_into_routes_each_a_pipeline_of_its_own(tmp_path):
    cfg = routed(tmp_path)
    topics = ["shop.public.orders", "shop.public.customers", "audit.public.orders", "shop.public.x.orders"]
    assert group_topics(cfg, topics) == {"customers": ("shop.public.customers",), "orders": ("shop.public.orders",),
                                         "x": ("shop.public.x.orders",)}
    routes = routes_of(cfg, topics)
    orders = next(r for r in routes.routes if r.table == "orders")
    assert (orders.cfg.name, orders.cfg.source.topic, orders.cfg.target.table) == ("shop__orders",
                                                                                   "shop.public.orders", "orders")
    assert orders.cfg.target.quarantine_name == "orders_quarantine"
    assert orders.cfg.ref == f"{cfg.path}#orders:shop.public.orders"
    # another process makes the same route from the ref alone, and ships it to executors as any pipeline
    assert resolve_pipeline(orders.cfg.ref) == orders.cfg
    assert PipelineConfig.from_json(orders.cfg.to_json()).source.topic == "shop.public.orders"
    assert routes.new == frozenset() and routes.gone == {}  # a pipeline that never ran has nothing new or gone


def test_several_topics_may_share_a_table(tmp_path):
    cfg = routed(tmp_path, table="{topic.0}", topic_pattern=r"(eu|us)\.(orders|refunds)")
    routes = routes_of(cfg, ["eu.orders", "eu.refunds", "us.orders"])
    assert [(r.table, r.cfg.source.topics) for r in routes.routes] == [("eu", ["eu.orders", "eu.refunds"]),
                                                                       ("us", None)]
    assert routes.routes[1].cfg.source.topic == "us.orders"


def test_a_keyed_table_takes_one_topic_and_says_which_table_has_more(tmp_path):
    cfg = routed(tmp_path, "orders_cdc", table="{topic.1}", topic_pattern=r"(eu|us)\.orders")
    assert routes_of(cfg, ["eu.orders"]).routes[0].cfg.target.state_name == "orders_state"
    with pytest.raises(ConfigError, match=r"table orders \(topics eu.orders, us.orders\): .*upsert reads one topic"):
        routes_of(cfg, ["eu.orders", "us.orders"])


def test_new_and_gone_tables_are_known_from_the_tables_routed_before(tmp_path):
    cfg = routed(tmp_path)
    first = routes_of(cfg, ["shop.public.orders", "shop.public.customers"])
    known = read_known(known_text(first))
    later = routes_of(cfg, ["shop.public.orders", "shop.public.payments"], known)
    assert later.new == {"payments"} and later.gone == {"customers": ("shop.public.customers",)}
    assert later.notes("127.0.0.1:9092") == [
        "new table payments for topic shop.public.payments: the tail reads it from the earliest offset",
        "table customers: its topic shop.public.customers is gone from 127.0.0.1:9092; the table and its rows stay"]
    assert read_known(known_text(later)) == {"customers": ("shop.public.customers",),
                                                     "orders": ("shop.public.orders",),
                                                     "payments": ("shop.public.payments",)}
    assert RouteSet([]).notes("b") == []


def test_a_ref_that_is_not_a_route_is_refused(tmp_path):
    cfg = routed(tmp_path)
    with pytest.raises(ConfigError, match="expected <table>:<topic>"):
        resolve_pipeline(f"{cfg.path}#orders")
    with pytest.raises(ConfigError, match="does not route topics to tables"):
        route_config(load_pipeline(REPO / "pipelines" / "demo.yaml"), "t", ["x"])


def test_a_run_limited_to_some_topics_covers_their_tables_only_and_refuses_a_topic_no_table_reads(tmp_path):
    cfg = routed(tmp_path, table="{topic.0}_{topic.2}")
    routes = routes_of(cfg, ["shop.public.orders", "shop.public.customers", "shop.public.refunds"]).routes
    assert [(r.table, mine) for r, mine in routes_asked(routes, [])] == [
        ("shop_customers", ()), ("shop_orders", ()), ("shop_refunds", ())]
    assert [(r.table, mine) for r, mine in routes_asked(routes, ["shop.public.orders"])] == [
        ("shop_orders", ("shop.public.orders",))]
    with pytest.raises(ConfigError, match=r"topics 'shop\.public\.nope': no table of the pipeline reads it \(fix: "
                                          r"name some of: shop\.public\.customers, shop\.public\.orders, "):
        routes_asked(routes, ["shop.public.orders", "shop.public.nope"])


@pytest.mark.parametrize(("lanes", "tables", "shares"), [
    (2, 2, [1, 1]), (5, 2, [3, 2]), (1, 3, [1, 1, 1]), (4, 3, [2, 1, 1]), (3, 0, [])])
def test_lanes_are_dealt_across_tables_at_least_one_each(lanes, tables, shares):
    assert lane_shares(lanes, tables) == shares
