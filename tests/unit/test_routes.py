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
    unused_routes,
)
from tailfill.run.scaffold import table_template
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


def with_routes(tmp_path, routes: dict, fields: list | None = None, **source) -> PipelineConfig:
    """The routed demo pipeline with ``routes`` (and, given, ``format.fields`` in place of the demo's)."""
    data = yaml.safe_load(Path(routed(tmp_path, **source).path).read_text())
    data["routes"], data["expectations"] = routes, []  # the demo's expectations name the demo's columns
    if fields is not None:
        data["format"]["fields"] = fields
    (tmp_path / "shop.yaml").write_text(yaml.safe_dump(data))
    return load_pipeline(tmp_path / "shop.yaml")


PLANES = {"mode": "upsert", "key": ["tailnum"],
          "fields": [{"name": "tailnum", "type": "string", "required": True}, {"name": "year", "type": "long"}]}
AIRLINES = {"fields": [{"name": "carrier", "type": "string"}, {"name": "name", "type": "string"}]}


def test_each_route_takes_its_own_fields_and_mode_and_a_table_without_one_the_pipeline_s(tmp_path):
    cfg = with_routes(tmp_path, {"planes": PLANES, "shop.public.airlines": AIRLINES})
    routes = {r.table: r.cfg for r in routes_of(cfg, ["shop.public.planes", "shop.public.airlines",
                                                      "shop.public.orders"]).routes}
    planes, airlines, orders = routes["planes"], routes["airlines"], routes["orders"]
    assert [f.name for f in planes.format.fields] == ["tailnum", "year"]
    assert (planes.target.mode, planes.target.key, planes.target.state_name) == ("upsert", ("tailnum",),
                                                                                 "planes_state")
    assert [f.name for f in airlines.format.fields] == ["carrier", "name"] and airlines.target.mode == "append"
    assert orders.format.fields == cfg.format.fields and orders.target.mode == "append"
    assert resolve_pipeline(planes.ref) == planes  # the ref carries the route's settings to any process
    assert PipelineConfig.from_json(planes.to_json()).format.fields == planes.format.fields
    assert planes.routes == {}


def test_a_route_s_mode_brings_its_own_key_and_a_route_without_mode_keeps_the_pipeline_s(tmp_path):
    base = routed(tmp_path, "orders_cdc", table="{topic.1}", topic_pattern=r"(eu|us)\.[a-z]+")
    data = yaml.safe_load(Path(base.path).read_text())
    data["routes"] = {"refunds": {"mode": "append", "envelope": "none", "expectations": []},
                      "orders": {"version_by": None}}
    Path(base.path).write_text(yaml.safe_dump(data))
    cfg = load_pipeline(base.path)
    routes = {r.table: r.cfg for r in routes_of(cfg, ["eu.orders", "eu.refunds"]).routes}
    assert routes["refunds"].target.keyed is False and routes["refunds"].target.key == ()
    assert routes["orders"].target.key == base.target.key and routes["orders"].target.keyed


@pytest.mark.parametrize(("routes", "problem"), [
    ({"planes": {"mode": "upsert"}}, r"routes\.planes: target: .*mode: upsert needs key"),
    ({"planes": {"key": ["tailnum"]}}, r"routes\.planes: target: .*key only apply to mode: upsert"),
    ({"planes": {**PLANES, "key": ["nope"]}}, r"routes\.planes: target\.key: 'nope' names no column"),
    ({"planes": {"fields": [{"name": "a", "type": "long"}, {"name": "a", "type": "string"}]}},
     r"routes\.planes: format: .*duplicate field names: a"),
    ({"planes": {"fields": [{"name": "a", "type": "long"}], "partition_by": ["day(when)"]}},
     r"routes\.planes: target\.partition_by: 'day\(when\)': .*names no|routes\.planes: target\.partition_by"),
    ({"planes": {"subject": "planes-value"}}, r"routes\.planes: subject: .*has none"),
    ({"planes": {"colour": "red"}}, r"routes\.planes\.colour: Extra inputs are not permitted"),
    ({"Not A Table!": AIRLINES}, r"routes\.Not A Table!: names neither a table"),
])
def test_a_bad_route_is_refused_at_load_naming_the_route_and_the_field(tmp_path, routes, problem):
    with pytest.raises(ConfigError, match=problem):
        with_routes(tmp_path, routes)


def test_routes_need_a_routed_pipeline_and_name_its_tables_or_topics(tmp_path):
    data = yaml.safe_load((REPO / "pipelines" / "demo.yaml").read_text())
    data["routes"] = {"events": AIRLINES}
    (tmp_path / "plain.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"routes: events: only a pipeline whose target.table is a template"):
        load_pipeline(tmp_path / "plain.yaml")
    with pytest.raises(ConfigError, match=r"routes.flights: names neither a table nor a topic of this pipeline "
                                          r"\(tables: airlines; topics: shop.public.airlines\)"):
        with_routes(tmp_path, {"flights": AIRLINES}, topics=["shop.public.airlines"])


def test_routes_alone_declare_the_columns_and_a_table_without_one_is_named_when_routed(tmp_path):
    cfg = with_routes(tmp_path, {"airlines": AIRLINES}, fields=[])
    assert routes_of(cfg, ["shop.public.airlines"]).routes[0].cfg.format.fields[0].name == "carrier"
    with pytest.raises(ConfigError, match=r"table weather \(topics shop.public.weather\): format: json format needs "
                                          r"a declared schema under 'fields' \(fix: give the table an entry under "
                                          r"routes\)"):
        routes_of(cfg, ["shop.public.airlines", "shop.public.weather"])


def test_two_routes_for_one_table_are_refused_and_a_route_no_table_takes_is_said(tmp_path):
    with pytest.raises(ConfigError, match=r"routes.us.x.refunds: table refunds \(topics us.x.refunds\): routes "
                                          r"refunds and us.x.refunds both apply to it \(fix: keep one entry per table"):
        with_routes(tmp_path, {"refunds": AIRLINES, "us.x.refunds": AIRLINES}, table="{topic.2}",
                    topic_pattern=r"(eu|us)\.x\.refunds")
    cfg = with_routes(tmp_path, {"refunds": AIRLINES, "planes": AIRLINES}, table="{topic.2}",
                      topic_pattern=r"(eu|us)\.x\.[a-z]+")
    assert unused_routes(cfg, routes_of(cfg, ["eu.x.refunds"])) == [
        "routes.planes applies to no table of shop now (tables: refunds); it applies once a topic it names appears"]


@pytest.mark.parametrize(("topics", "template"), [
    (["nyc.flights", "nyc.planes"], "{topic.1}"),
    (["a.shop.orders", "b.shop.orders"], "{topic}"),  # the last parts do not tell them apart
    (["orders", "shop.refunds"], "{topic}"),  # parts of different counts
    (["orders", "refunds"], "{topic}"),
])
def test_init_s_template_gives_each_topic_a_table_of_its_own(topics, template):
    assert table_template(topics) == template


def test_a_route_reads_its_own_registry_subjects_and_a_table_without_one_its_topic_s(tmp_path):
    base = routed(tmp_path, "orders_avro", table="{topic.1}", topic_pattern=r"shop\.[a-z]+")
    data = yaml.safe_load(Path(base.path).read_text())
    data["format"]["schema_registry"]["subject"] = None
    data["routes"] = {"orders": {"subject": "orders-v2-value", "key_subject": "orders-v2-key"}}
    Path(base.path).write_text(yaml.safe_dump(data))
    routes = {r.table: r.cfg for r in routes_of(load_pipeline(base.path), ["shop.orders", "shop.refunds"]).routes}
    assert (routes["orders"].subject, routes["orders"].key_subject) == ("orders-v2-value", "orders-v2-key")
    assert routes["refunds"].subject == "shop.refunds-value"
