"""No secret ever printed: what the redaction helper masks, and what it leaves for the reader."""

from __future__ import annotations

import uuid
from pathlib import Path

import yaml
from pydantic import BaseModel

from tailfill.pipeline.load import load_pipeline
from tailfill.redact import redact_data, redact_text, register_secret, secret_env_names, uri_password

DEMO = Path(__file__).resolve().parents[2] / "pipelines" / "demo.yaml"


def secret() -> str:
    return f"s-{uuid.uuid4().hex}"  # unique per test: what one test registers never helps another


def test_a_uri_keeps_its_user_and_host_but_not_its_password():
    text = "error: cannot open the Iceberg catalog at postgresql+psycopg2://u:p@127.0.0.1:9/none: refused"
    assert redact_text(text) == ("error: cannot open the Iceberg catalog at postgresql+psycopg2://u:***@127.0.0.1:9"
                                 "/none: refused")
    assert redact_text("postgresql://alice:p%40ss@db:5432/x, mail bob@example.org") == \
        "postgresql://alice:***@db:5432/x, mail bob@example.org"
    plain = "sqlite:////tmp/catalog.db spark://127.0.0.1:7077 s3://bucket/key http://127.0.0.1:8080/tailfill/x"
    assert redact_text(plain) == plain


def test_secret_keys_lose_their_values_in_query_strings_command_lines_dicts_and_json():
    assert redact_text("sqlite:///c.db?password=hunter22&mode=ro") == "sqlite:///c.db?password=***&mode=ro"
    assert redact_text("--conf spark.hadoop.fs.s3a.secret.key=abc --conf x=1") == \
        "--conf spark.hadoop.fs.s3a.secret.key=*** --conf x=1"
    assert redact_text("{'sasl.password': 'abc', 'bootstrap.servers': 'h:9092'}") == \
        "{'sasl.password': '***', 'bootstrap.servers': 'h:9092'}"
    assert redact_text('{"token": "abc", "credential": "x:y", "n": 1}') == \
        '{"token": "***", "credential": "***", "n": 1}'
    named = "secret_key_env=AWS_SECRET_ACCESS_KEY, 'password_env': 'KAFKA_PASSWORD'"
    assert redact_text(named) == named  # the name of a variable is no secret


def test_a_registered_value_is_masked_wherever_it_appears_also_url_encoded():
    value = secret() + "/+@"
    register_secret(value)
    assert redact_text(f"x {value} y") == "x *** y"
    assert redact_text("db?pw=" + value.replace("/", "%2F").replace("+", "%2B").replace("@", "%40")) == "db?pw=***"
    register_secret("abc")  # too short to mask in ordinary text
    assert redact_text("abc def") == "abc def"


def test_redact_data_masks_every_string_of_a_record():
    value = secret()
    register_secret(value)
    record = {"error": f"boom {value}", "n": 3, "paths": ["postgresql://u:pw1@h/d"], "ok": True}
    assert redact_data(record) == {"error": "boom ***", "n": 3, "paths": ["postgresql://u:***@h/d"], "ok": True}


def test_loading_a_pipeline_registers_its_secret_variables_and_uri_passwords(tmp_path, monkeypatch):
    kafka, s3, catalog = secret(), secret(), secret()
    monkeypatch.setenv("TEST_KAFKA_USER", "alice-the-user")
    monkeypatch.setenv("TEST_KAFKA_PASSWORD", kafka)
    monkeypatch.setenv("TEST_S3_SECRET", s3)
    monkeypatch.setenv("TEST_CATALOG_URI", f"postgresql+psycopg2://tailfill:{catalog}@127.0.0.1:9/iceberg")
    data = yaml.safe_load(DEMO.read_text())
    data["source"]["security"] = {"protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
                                  "username_env": "TEST_KAFKA_USER", "password_env": "TEST_KAFKA_PASSWORD"}
    data["target"]["catalog"]["uri"] = "${TEST_CATALOG_URI}"
    data["target"]["warehouse"] = "s3://tailfill/w"
    data["target"]["s3"] = {"endpoint": "http://127.0.0.1:9", "secret_key_env": "TEST_S3_SECRET"}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    load_pipeline(path)
    text = f"{kafka} {s3} a password {catalog} for alice-the-user"
    assert redact_text(text) == "*** *** a password *** for alice-the-user"


def test_a_secret_variable_of_any_settings_block_is_found_by_its_name():
    class Registry(BaseModel):  # a block such as a schema registry's, once a pipeline has one
        url: str = "https://registry:8081"
        username_env: str = "REGISTRY_USER"
        password_env: str = "REGISTRY_PASSWORD"

    class Settings(BaseModel):
        registry: Registry = Registry()
        token_env: str = "API_TOKEN"
        access_key_env: str = "AWS_ACCESS_KEY_ID"

    assert secret_env_names(Settings()) == ["REGISTRY_PASSWORD", "API_TOKEN"]


def test_a_password_that_is_its_user_name_or_the_software_s_name_is_masked_only_in_its_uri():
    # compose's catalog: tailfill:tailfill@ — masking "tailfill" everywhere would mask every path.
    register_secret(uri_password("postgresql+psycopg2://tailfill:tailfill@postgres:5432/iceberg"))
    register_secret(uri_password("postgresql://bob-the-user:bob-the-user@db/x"))
    register_secret("airflow")
    text = "postgresql+psycopg2://tailfill:tailfill@postgres:5432/iceberg in /app/.tailfill/runs for bob-the-user"
    assert redact_text(text) == "postgresql+psycopg2://tailfill:***@postgres:5432/iceberg in /app/.tailfill/runs " \
                                "for bob-the-user"
