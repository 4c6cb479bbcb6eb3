"""The pipeline's catalog as Spark settings: JdbcCatalog on pyiceberg's SQL catalog, REST as it is, S3 on the
pipeline's explicit endpoint and credentials; and the statements ``tailfill sql`` reads from its shell."""

from __future__ import annotations

import pytest

from tailfill.config import TargetConfig
from tailfill.errors import ConfigError
from tailfill.lake.spark_catalog import jdbc_properties, spark_catalog_conf
from tailfill.run.spark_sql import MORE, PROMPT, statements

P = "spark.sql.catalog.tailfill"


def target(**changes) -> TargetConfig:
    return TargetConfig.model_validate({"catalog": {"uri": "sqlite:////h/catalog.db"}, "namespace": "ns",
                                        "table": "t", "warehouse": "/h/warehouse", **changes})


def test_a_sqlite_catalog_is_jdbc_on_the_same_file_and_warehouse_under_pyicebergs_name():
    assert spark_catalog_conf(target()) == {P: "org.apache.iceberg.spark.SparkCatalog", f"{P}.type": "jdbc",
                                            f"{P}.uri": "jdbc:sqlite:/h/catalog.db",
                                            f"{P}.warehouse": "file:///h/warehouse", f"{P}.cache-enabled": "false"}


def test_a_postgres_uri_gives_its_user_and_password_as_jdbc_properties_and_keeps_its_timeout():
    uri = "postgresql+psycopg2://ice:p%40ss@127.0.0.1:5433/iceberg?sslmode=disable&connect_timeout=5&keepalives=1"
    assert jdbc_properties(uri) == {
        "uri": "jdbc:postgresql://127.0.0.1:5433/iceberg?sslmode=disable&connectTimeout=5",
        "jdbc.user": "ice", "jdbc.password": "p@ss"}


def test_an_s3_warehouse_is_s3fileio_on_the_explicit_endpoint_and_credentials(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    conf = spark_catalog_conf(target(warehouse="s3://b/w", s3={"endpoint": "http://127.0.0.1:9000"}))
    assert {k.removeprefix(f"{P}."): v for k, v in conf.items() if k.startswith(f"{P}.")} == {
        "type": "jdbc", "uri": "jdbc:sqlite:/h/catalog.db", "warehouse": "s3://b/w",
        "io-impl": "org.apache.iceberg.aws.s3.S3FileIO", "s3.endpoint": "http://127.0.0.1:9000",
        "s3.access-key-id": "key", "s3.secret-access-key": "secret", "client.region": "us-east-1",
        "s3.path-style-access": "true", "cache-enabled": "false"}


def test_a_rest_catalog_keeps_its_uri_warehouse_credential_and_further_properties(monkeypatch):
    monkeypatch.setenv("REST_CRED", "id:secret")
    conf = spark_catalog_conf(target(catalog={"name": "lake", "type": "rest", "uri": "http://127.0.0.1:8181",
                                              "warehouse": "s3://warehouse", "credential_env": "REST_CRED",
                                              "properties": {"scope": "catalog"}}))
    assert conf == {"spark.sql.catalog.lake": "org.apache.iceberg.spark.SparkCatalog",
                    "spark.sql.catalog.lake.type": "rest", "spark.sql.catalog.lake.uri": "http://127.0.0.1:8181",
                    "spark.sql.catalog.lake.warehouse": "s3://warehouse",
                    "spark.sql.catalog.lake.credential": "id:secret", "spark.sql.catalog.lake.scope": "catalog",
                    "spark.sql.catalog.lake.cache-enabled": "false"}


@pytest.mark.parametrize(("catalog", "message"), [
    ({"type": "glue"}, r"target.catalog.type 'glue': Tailfill gives Spark sql and rest catalogs only"),
    ({"uri": "mysql://h/db"}, r"a mysql SQL catalog has no JDBC driver in Tailfill's Spark sessions"),
    ({"uri": "sqlite:///:memory:"}, r"an in-memory SQLite catalog cannot be shared with Spark"),
])
def test_a_catalog_spark_is_not_given_is_named(catalog, message):
    with pytest.raises(ConfigError, match=message):
        spark_catalog_conf(target(catalog=catalog))


def test_the_shell_runs_statements_ended_by_a_semicolon_at_a_lines_end():
    prompts: list[str] = []
    lines = ["SELECT 1;\n", "SELECT\n", "  'a;b'\n", "  AS x;\n", "\n", ";\n", "SHOW TABLES"]
    assert list(statements(lines, prompts.append)) == ["SELECT 1", "SELECT\n  'a;b'\n  AS x", "SHOW TABLES"]
    assert prompts == [PROMPT, PROMPT, MORE, MORE, PROMPT, PROMPT, PROMPT, MORE]
