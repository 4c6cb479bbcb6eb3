from pathlib import Path

import pytest
import yaml

from tailfill.cli import SAMPLE_FORMATS, sample_pipeline
from tailfill.config import PipelineConfig, duration_seconds
from tailfill.errors import ConfigError
from tailfill.pipeline.load import load_pipeline, resolve_pipeline

DEMO = Path(__file__).resolve().parents[2] / "pipelines" / "demo.yaml"


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("TAILFILL_HOME", str(home))
    for var in ("TAILFILL_BOOTSTRAP_SERVERS", "TAILFILL_DEMO_TOPIC", "TAILFILL_PIPELINES"):
        monkeypatch.delenv(var, raising=False)
    return home


def write_variant(tmp_path, edit, name="bad.yaml"):
    """Write demo.yaml with ``edit(data)`` applied to its parsed mapping; return the path."""
    data = yaml.safe_load(DEMO.read_text())
    edit(data)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def test_demo_pipeline_loads_with_home_interpolated(home):
    cfg = load_pipeline(DEMO)
    assert cfg.name == "demo" and cfg.path == str(DEMO)
    assert cfg.source.bootstrap_servers == "embedded" and cfg.source.topic == "demo-events"
    assert cfg.target.warehouse == f"{home}/warehouse"
    assert cfg.checkpoint_location == f"{home}/checkpoints"
    assert cfg.target.catalog.uri == f"sqlite:///{home}/catalog.db"
    assert [(f.name, f.type, f.required) for f in cfg.format.fields][:2] == [
        ("event_id", "string", True),
        ("user_id", "long", True),
    ]
    assert (cfg.backfill.slices, cfg.tail.trigger, cfg.target.quarantine_name) == (
        4,
        "available_now",
        "demo_events_quarantine",
    )
    assert PipelineConfig.from_json(cfg.to_json()) == cfg.model_copy(update={"path": None})


def test_env_var_overrides_default(monkeypatch):
    monkeypatch.setenv("TAILFILL_DEMO_TOPIC", "orders")
    assert load_pipeline(DEMO).source.topic == "orders"


def _set(*keys_and_value):
    *keys, last, value = keys_and_value

    def edit(data):
        for k in keys:
            data = data[k]
        data[last] = value

    return edit


def _delete(*keys):
    def edit(data):
        for k in keys[:-1]:
            data = data[k]
        del data[keys[-1]]

    return edit


def _several(**source):
    def edit(data):
        del data["source"]["topic"]
        data["source"].update(source)

    return edit


def _rename(section, old, new):
    def edit(data):
        data[section][new] = data[section].pop(old)

    return edit


@pytest.mark.parametrize(
    ("edit", "field", "hint"),
    [
        (_delete("backfill", "slices"), "backfill.slices", "Field required"),
        (_rename("backfill", "slices", "slice"), "backfill.slice", "check its spelling"),
        (_set("tail", "trigger", "sometimes"), "tail.trigger", "allowed values"),
        (_set("backfill", "slices", 0), "backfill.slices", "greater than or equal to 1"),
        (_set("format", "fields", []), "format", "json format needs a declared schema under 'fields'"),
        (
            _set("format", "fields", [{"name": "kafka_offset", "type": "long"}]),
            "format.fields.0.name",
            "reserved prefix 'kafka_'",
        ),
        (_set("source", "consumer", {"sasl.password": "hunter2"}), "source.consumer", "looks like a secret"),
        (_set("target", "warehouse", "s3://bucket/wh"), "target", "needs target.s3"),
        (_set("source", "topic", "${TAILFILL_NO_SUCH_VAR}"), "source.topic", "TAILFILL_NO_SUCH_VAR is not set"),
        (_set("maintenance", "expire_older_than", "a week"), "maintenance.expire_older_than",
         "'a week' is not a duration"),
        (_set("maintenance", "keep_last", 0), "maintenance.keep_last", "greater than or equal to 1"),
        (_delete("maintenance", "orphan_min_age"), "maintenance.orphan_min_age", "Field required"),
        (_delete("backfill", "when_tail_unknown"), "backfill.when_tail_unknown", "Field required"),
        (_set("backfill", "when_tail_unknown", "wait"), "backfill.when_tail_unknown", "allowed values"),
        (_set("target", "state_root", "s3://bucket/state"), "target", "must be on the warehouse's filesystem"),
        (_set("target", "state_root", "gs://bucket/state"), "target", "must be on the warehouse's filesystem"),
        (_set("source", "topics", ["a", "b"]), "source", "exactly one of topic, topics and topic_pattern (got topic "
                                                         "and topics)"),
        (_delete("source", "topic"), "source", "give exactly one of topic, topics and topic_pattern"),
        (_several(topic_pattern="shop.(orders"), "source", "is not a regular expression"),
        (_several(topics=[]), "source", "at least one topic"),
    ],
)
def test_malformed_pipeline_names_file_and_field(tmp_path, edit, field, hint):
    path = write_variant(tmp_path, edit)
    with pytest.raises(ConfigError) as exc:
        load_pipeline(path)
    msg = str(exc.value)
    assert f"{path}: {field}: " in msg
    assert hint in msg


def test_s3_warehouse_with_endpoint_is_accepted(tmp_path):
    def edit(data):
        data["target"].update(warehouse="s3://bucket/wh", s3={"endpoint": "http://127.0.0.1:9000"})

    assert load_pipeline(write_variant(tmp_path, edit)).target.s3.endpoint == "http://127.0.0.1:9000"


def test_the_shared_run_state_is_beside_the_table_unless_a_state_root_says_where(tmp_path):
    from tailfill.state.store import state_root

    def s3(root):
        def edit(data):
            data["target"].update(warehouse="s3://bucket/wh/", s3={"endpoint": "http://127.0.0.1:9000"})
            if root:
                data["target"]["state_root"] = root
        return edit

    assert state_root(load_pipeline(write_variant(tmp_path, s3(None)))) == "s3://bucket/wh/_tailfill/demo"
    assert state_root(load_pipeline(write_variant(tmp_path, s3("s3://ops/state/")))) == "s3://ops/state/demo"
    local = load_pipeline(write_variant(tmp_path, _set("target", "state_root", str(tmp_path / "shared"))))
    assert state_root(local) == f"{tmp_path}/shared/demo"


@pytest.mark.parametrize(
    ("text", "hint"),
    [("name: [unclosed", "not valid YAML"), ("- just\n- a list\n", "must be a YAML mapping")],
)
def test_unparseable_file(tmp_path, text, hint):
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=hint) as exc:
        load_pipeline(path)
    assert str(path) in str(exc.value)


def test_missing_file():
    with pytest.raises(ConfigError, match="no such pipeline file"):
        load_pipeline("/nonexistent/tailfill.yaml")



def test_inline_jaas_password_is_rejected(tmp_path):
    jaas = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="p";'
    with pytest.raises(ConfigError, match=r"source\.consumer"):
        load_pipeline(write_variant(tmp_path, _set("source", "consumer", {"sasl.jaas.config": jaas})))



def test_keystore_location_is_not_a_secret(tmp_path):
    edit = _set("source", "consumer", {"ssl.keystore.location": "/etc/kafka/client.jks"})
    assert load_pipeline(write_variant(tmp_path, edit)).source.consumer


def test_resolve_pipeline_by_name_and_path(tmp_path, monkeypatch):
    pdir = tmp_path / "pipelines"
    pdir.mkdir()
    write_variant(pdir, _set("name", "orders"), name="orders.yaml")
    write_variant(pdir, lambda d: None, name="demo.yaml")
    monkeypatch.setenv("TAILFILL_PIPELINES", str(pdir))
    monkeypatch.chdir(tmp_path)
    assert resolve_pipeline("orders").name == "orders"
    assert resolve_pipeline(str(DEMO)).path == str(DEMO)
    with pytest.raises(ConfigError) as exc:
        resolve_pipeline("nope")
    assert str(exc.value) == f"no pipeline named 'nope' in {pdir} (known: demo, orders)"


def test_resolve_pipeline_unknown_in_empty_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TAILFILL_PIPELINES", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"known: none"):
        resolve_pipeline("nope")



def test_resolve_pipeline_ignores_same_named_directory(tmp_path, monkeypatch):
    pdir = tmp_path / "pipelines"
    pdir.mkdir()
    write_variant(pdir, _set("name", "orders"), name="orders.yaml")
    (tmp_path / "orders").mkdir()
    monkeypatch.setenv("TAILFILL_PIPELINES", str(pdir))
    monkeypatch.chdir(tmp_path)
    assert resolve_pipeline("orders").name == "orders"


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("30m", 1800), ("12h", 43_200), ("7d", 604_800),
                                               ("0s", 0), ("1.5h", 5400)])
def test_durations(text, seconds):
    assert duration_seconds(text) == seconds


@pytest.mark.parametrize("text", ["7", "7w", "d", "-1d", ""])
def test_bad_durations_name_the_form(text):
    with pytest.raises(ValueError, match="write a number and a unit s, m, h or d"):
        duration_seconds(text)


def test_maintain_without_a_maintenance_block_says_what_to_add(tmp_path):
    from tailfill.run.maintain import maintenance_settings

    cfg = load_pipeline(write_variant(tmp_path, _delete("maintenance")))
    with pytest.raises(ConfigError, match="maintenance: not set \\(fix: add a maintenance block"):
        maintenance_settings(cfg)
    demo = load_pipeline(DEMO)
    assert maintenance_settings(demo, "2h", 3).expire_older_than == "2h"
    with pytest.raises(ConfigError, match="--expire-older-than: 'soon' is not a duration"):
        maintenance_settings(demo, "soon")
    with pytest.raises(ConfigError, match="--keep-last: must be at least 1"):
        maintenance_settings(demo, keep_last=0)


@pytest.mark.parametrize(("entries", "problem"), [
    (["day(created_at)", "bucket(16 user_id)"], r"target\.partition_by: entry 1: 'bucket\(16 user_id\)' is not a "
                                                r"partition transform"),
    (["day(kind)"], r"target\.partition_by: 'day\(kind\)': day\(\) needs a timestamp column, kind holds string"),
    (["identity(user)"], r"target\.partition_by: 'identity\(user\)': no column 'user' \(columns: kafka_topic"),
    (["bucket(8, kind.id)"], r"'bucket\(8, kind\.id\)': kind holds string, not a struct: 'kind\.id' cannot reach"),
    (["bucket(8, repo.owner)"], r"'bucket\(8, repo\.owner\)': repo has no field 'owner' \(fields: id, name\)"),
    (["day(repo.id)"], r"'day\(repo\.id\)': day\(\) needs a timestamp column, repo\.id holds int64"),
    (["truncate(4, amount)"], r"'truncate\(4, amount\)': truncate\(\) needs a string, long or binary column"),
])
def test_a_bad_partition_by_entry_is_named(tmp_path, entries, problem):
    def change(d):
        d["format"]["fields"].append({"name": "repo", "type": "struct<id: long, name: string>"})
        d["target"].update(partition_by=entries)

    path = write_variant(tmp_path, change)
    with pytest.raises(ConfigError, match=problem):
        load_pipeline(path)


def test_nested_columns_are_taken_in_partition_by_and_expectations(tmp_path):
    def change(d):
        d["format"]["fields"].append({"name": "repo", "type": "struct<id: long, created_at: timestamp>"})
        d["target"].update(partition_by=["bucket(8, repo.id)", "day(repo.created_at)"])
        d["expectations"].append({"column": "repo.id", "not_null": True, "min": 0})

    cfg = load_pipeline(write_variant(tmp_path, change))
    assert list(cfg.target.partition_by) == ["bucket(8, repo.id)", "day(repo.created_at)"]
    assert cfg.expectations[-1].column == "repo.id"


def test_an_expectation_on_a_missing_nested_field_is_named(tmp_path):
    def change(d):
        d["format"]["fields"].append({"name": "repo", "type": "struct<id: long>"})
        d["expectations"].append({"column": "repo.name", "not_null": True})

    with pytest.raises(ConfigError, match=r"expectations: on 'repo\.name': repo has no field 'name' \(fields: id\)"):
        load_pipeline(write_variant(tmp_path, change))


def test_partition_by_takes_every_transform_of_the_issue(tmp_path):
    spec = ["day(created_at)", "bucket(16, user_id)", "hour(kafka_timestamp)", "identity(kind)",
            "truncate(4, event_id)"]
    cfg = load_pipeline(write_variant(tmp_path, lambda d: d["target"].update(partition_by=spec)))
    assert list(cfg.target.partition_by) == spec
    assert PipelineConfig.from_json(cfg.to_json()).target == cfg.target


def test_a_rest_catalog_takes_its_credential_by_variable_name_only(tmp_path, monkeypatch):
    from tailfill.lake.tables import catalog_properties
    from tailfill.redact import redact_text

    catalog = {"type": "rest", "uri": "http://127.0.0.1:8181", "warehouse": "s3://warehouse",
               "credential_env": "MY_REST_CREDENTIAL", "properties": {"oauth2-server-uri": "http://127.0.0.1:8181/t"}}
    monkeypatch.setenv("MY_REST_CREDENTIAL", "client:s3cr3t-value")
    cfg = load_pipeline(write_variant(tmp_path, lambda d: d["target"].update(catalog=catalog)))
    assert "s3cr3t" not in redact_text("opening with client:s3cr3t-value")  # registered as a secret on load
    props = catalog_properties(cfg.target)
    assert (props["type"], props["uri"], props["warehouse"], props["credential"]) == (
        "rest", "http://127.0.0.1:8181", "s3://warehouse", "client:s3cr3t-value")
    assert props["oauth2-server-uri"] == "http://127.0.0.1:8181/t"
    inline = {**catalog, "properties": {"credential": "client:s3cr3t-value"}}
    with pytest.raises(ConfigError, match=r"target\.catalog: catalog property 'credential' looks like a secret"):
        load_pipeline(write_variant(tmp_path, lambda d: d["target"].update(catalog=inline)))
    no_uri = {"type": "hive"}
    with pytest.raises(ConfigError, match=r"target\.catalog: a hive catalog needs a uri"):
        load_pipeline(write_variant(tmp_path, lambda d: d["target"].update(catalog=no_uri)))


def test_an_unset_credential_variable_is_named(tmp_path, monkeypatch):
    from tailfill.errors import LakeError
    from tailfill.lake.tables import catalog_properties

    catalog = {"type": "rest", "uri": "http://127.0.0.1:8181", "credential_env": "UNSET_REST_CREDENTIAL"}
    monkeypatch.delenv("UNSET_REST_CREDENTIAL", raising=False)
    cfg = load_pipeline(write_variant(tmp_path, lambda d: d["target"].update(catalog=catalog)))
    with pytest.raises(LakeError, match="credential_env names UNSET_REST_CREDENTIAL, which is not set"):
        catalog_properties(cfg.target)


def test_a_registry_format_decodes_keys_only_by_registry_and_takes_registry_columns_in_partition_by(tmp_path):
    avro = yaml.safe_load((Path(__file__).parents[2] / "pipelines" / "orders_avro.yaml").read_text())
    avro["format"]["key"] = "string"
    path = tmp_path / "avro.yaml"
    path.write_text(yaml.safe_dump(avro))
    with pytest.raises(ConfigError, match=r"avro format decodes keys with key: registry .* key: string is for json"):
        load_pipeline(path)
    avro["format"]["key"] = "registry"
    avro["target"]["partition_by"] = ["bucket(4, kafka_key)"]  # the key's type: known when the table is made
    path.write_text(yaml.safe_dump(avro))
    cfg = load_pipeline(path)
    assert (cfg.format.key, cfg.key_subject) == ("registry", f"{cfg.source.topic}-key")
    demo = yaml.safe_load((Path(__file__).parents[2] / "pipelines" / "demo.yaml").read_text())
    demo["format"]["key"] = "registry"
    path.write_text(yaml.safe_dump(demo))
    with pytest.raises(ConfigError, match=r"key: registry decodes keys with a Schema Registry: .* not json"):
        load_pipeline(path)
    del avro["format"]["key"]
    avro["target"]["partition_by"] = ["day(created_at)", "hour(kafka_timestamp)"]  # created_at: the registry's
    path.write_text(yaml.safe_dump(avro))
    assert list(load_pipeline(path).target.partition_by) == ["day(created_at)", "hour(kafka_timestamp)"]


@pytest.mark.parametrize("fmt", SAMPLE_FORMATS)
def test_produce_sample_without_pipeline_writes_to_a_shipped_pipeline_of_its_format(fmt, monkeypatch):
    monkeypatch.setenv("TAILFILL_PIPELINES", str(DEMO.parent))
    cfg = resolve_pipeline(sample_pipeline(fmt))  # a missing one: ConfigError "no pipeline named ..."
    if fmt == "debezium":
        assert (cfg.name, cfg.format.type, cfg.format.envelope) == ("orders_cdc", "json", "debezium")
    else:
        assert (cfg.format.type, cfg.format.envelope) == (fmt, "none")


def test_several_topics_with_a_registry_need_a_named_subject(tmp_path):
    def registry(data):
        _several(topics=["a", "b"])(data)
        data["format"] = {"type": "avro", "schema_registry": {"url": "http://127.0.0.1:1"}}

    with pytest.raises(ConfigError, match=r"format\.schema_registry\.subject: a pipeline of several topics"):
        load_pipeline(write_variant(tmp_path, registry))


@pytest.mark.parametrize(("source", "topic", "matches"), [
    ({"topics": ["shop.orders", "shop.refunds"]}, "shop.refunds", True),
    ({"topics": ["shop.orders", "shop.refunds"]}, "shop.other", False),
    ({"topic_pattern": r"shop\..*"}, "shop.payments", True),
    ({"topic_pattern": r"shop\..*"}, "old.shop.payments", False),  # the whole name must match
    ({"topic_pattern": ".*"}, "__consumer_offsets", False),  # never the broker's own topics
])
def test_a_source_of_several_topics_says_which_are_its_own(tmp_path, source, topic, matches):
    cfg = load_pipeline(write_variant(tmp_path, _several(**source)))
    assert cfg.source.several and cfg.source.matches(topic) is matches


def test_produce_sample_needs_topic_when_the_pipeline_reads_several(tmp_path):
    from tailfill.cli import sample_topic

    cfg = load_pipeline(write_variant(tmp_path, _several(topic_pattern=r"shop\..*")))
    with pytest.raises(ConfigError, match=r"reads the topics matching .*: name the one to write to"):
        sample_topic(cfg, None)
    with pytest.raises(ConfigError, match="'audit' is not one of pipeline"):
        sample_topic(cfg, "audit")
    assert sample_topic(cfg, "shop.orders") == "shop.orders"


def test_a_keyed_table_of_several_topics_is_refused_with_one_line(tmp_path):
    def keyed(data):
        _several(topics=["a", "b"])(data)
        data["target"].update({"mode": "upsert", "key": ["event_id"]})

    with pytest.raises(ConfigError, match="a keyed table of several topics is not supported"):
        load_pipeline(write_variant(tmp_path, keyed))


def test_a_postgres_catalog_that_never_answers_fails_with_its_name_instead_of_waiting_for_ever(monkeypatch, tmp_path):
    import socket
    import threading

    from tailfill.errors import LakeError
    from tailfill.lake import tables

    assert tables.with_connect_timeout("postgresql+psycopg2://u@h/db?sslmode=disable") == \
        f"postgresql+psycopg2://u@h/db?sslmode=disable&connect_timeout={tables.CATALOG_CONNECT_TIMEOUT_S}"
    assert tables.with_connect_timeout("postgresql://u@h/db?connect_timeout=3") == "postgresql://u@h/db?connect_timeout=3"
    assert tables.with_connect_timeout("sqlite:////tmp/catalog.db") == "sqlite:////tmp/catalog.db"

    silent = socket.create_server(("127.0.0.1", 0))  # takes connections, never says a word
    monkeypatch.setattr(tables, "CATALOG_CONNECT_TIMEOUT_S", 1)
    uri = f"postgresql+psycopg2://tailfill:pw@127.0.0.1:{silent.getsockname()[1]}/catalog"
    cfg = load_pipeline(write_variant(tmp_path, lambda d: d["target"].update(catalog={"type": "sql", "uri": uri})))
    raised: list[BaseException] = []

    def open_it() -> None:
        try:
            tables.load_catalog(cfg.target)
        except BaseException as exc:
            raised.append(exc)

    opener = threading.Thread(target=open_it, daemon=True)
    opener.start()
    opener.join(60)  # far longer than the timeout; without one it would never return
    silent.close()
    assert not opener.is_alive(), "opening a catalog that never answers did not give up"
    assert len(raised) == 1 and isinstance(raised[0], LakeError), raised
    assert "cannot open the Iceberg catalog at postgresql+psycopg2://tailfill:***@127.0.0.1:" in str(raised[0])
