"""No secret ever printed: a pipeline whose every secret-bearing setting holds a known value
runs as a user runs it, and no file, report or line of output holds any of those values.

The pipeline's catalog is Postgres through a URI carrying a password (the usual SQLAlchemy form, read
from ``${TF_CATALOG_URI}``; the test server trusts loopback, so the password is carried, not checked),
its warehouse is the moto S3 server with the secret key in ``TF_S3_SECRET``, and its Kafka password is
in ``TF_KAFKA_PASSWORD``. The embedded broker speaks no usable SASL, so the Kafka password is named by
``source.security.password_env`` with the PLAINTEXT protocol: it is registered and searched for like
the others, but no consumer sends it. A schema registry has no settings yet; its password variable
will be a ``*_env`` setting, which the redaction finds by name (``tests/unit/test_redact.py``).

The runs, all through ``tailfill`` as on the command line (``spark-submit`` for backfill and tail):
backfill, tail, validate, status, preflight, and a failing tail and backfill against a catalog that is
down, whose URI carries the same password (the job's own error through ``spark-submit``'s stderr, and
the CLI's).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import boto3
import pytest

from tailfill import cli
from tailfill.dev.sample import produce_sample

pytestmark = pytest.mark.integration


def files_holding(root: Path, secrets: dict[str, str]) -> list[str]:
    """``<file>: <secret name>`` for every file under ``root`` that holds a secret's value."""
    found = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        found += [f"{path.relative_to(root)}: {name}" for name, value in secrets.items() if value.encode() in data]
    return found


def objects_holding(endpoint: str, warehouse: str, secrets: dict[str, str]) -> tuple[list[str], list[str]]:
    """(every object key of the warehouse, ``<key>: <secret name>`` for those holding a secret's value)."""
    bucket, _, prefix = warehouse.removeprefix("s3://").partition("/")
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="tailfill-test",
                      aws_secret_access_key="tailfill-test")
    keys = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
            for o in page.get("Contents", [])]
    found = []
    for key in keys:
        data = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        found += [f"{key}: {name}" for name, value in secrets.items() if value.encode() in data]
    return keys, found


def test_no_secret_reaches_a_file_a_report_or_the_output(make_pipeline, postgres, s3_endpoint, home, capfd,
                                                          monkeypatch, refused_port):
    secrets = {name: f"{name}-{uuid.uuid4().hex}" for name in ("kafka-password", "s3-secret-key", "catalog-password")}
    database = f"iceberg_{uuid.uuid4().hex[:8]}"
    postgres.create_databases(database)
    monkeypatch.setenv("TF_KAFKA_USER", "tailfill-user")
    monkeypatch.setenv("TF_KAFKA_PASSWORD", secrets["kafka-password"])
    monkeypatch.setenv("TF_S3_SECRET", secrets["s3-secret-key"])
    monkeypatch.setenv("TF_CATALOG_URI", f"postgresql+psycopg2://tailfill:{secrets['catalog-password']}"
                                         f"@127.0.0.1:{postgres.port}/{database}")
    monkeypatch.setenv("TF_DOWN_URI", f"postgresql+psycopg2://tailfill:{secrets['catalog-password']}"
                                      f"@127.0.0.1:{refused_port}/none")
    security = {"protocol": "PLAINTEXT", "username_env": "TF_KAFKA_USER", "password_env": "TF_KAFKA_PASSWORD"}
    cfg = make_pipeline(name="secrets", s3_endpoint=s3_endpoint, catalog_uri="${TF_CATALOG_URI}",
                        source__security=security,
                        target__s3={"endpoint": s3_endpoint, "secret_key_env": "TF_S3_SECRET"})
    down = make_pipeline(name="secrets_down", catalog_uri="${TF_DOWN_URI}", source__security=security,
                         source__topic=cfg.source.topic)
    bootstrap = cfg.source.bootstrap_servers

    produce_sample(bootstrap, cfg.source.topic, 2_000, 4, bad_every=500)
    assert cli.main(["backfill", cfg.path]) == 0
    produce_sample(bootstrap, cfg.source.topic, 400, 4)
    assert cli.main(["tail", cfg.path, "--once"]) == 0
    assert cli.main(["validate", cfg.path, "--all"]) == 0
    assert cli.main(["status", cfg.path]) == 0
    assert cli.main(["preflight", cfg.path]) == 0
    assert cli.main(["tail", down.path, "--once"]) != 0  # fails inside the Spark job: catalog down
    assert cli.main(["backfill", down.path]) == 2  # fails in the CLI's planning
    out, err = capfd.readouterr()

    for name, value in secrets.items():
        assert value not in out, f"{name} printed on stdout"
        assert value not in err, f"{name} printed on stderr"
    assert files_holding(home, secrets) == []
    keys, found = objects_holding(s3_endpoint, cfg.target.warehouse, secrets)
    assert any("/_validation/secrets/" in k and k.endswith(".html") for k in keys), keys
    assert found == []

    # What ran is what the user would see: the runs did their work, and the failures say where the catalog is.
    assert "validation of secrets, all runs: COMPLETE (2,400 offsets checked" in out
    assert "committed offsets: 2,400" in out
    refused = "cannot open the Iceberg catalog at postgresql+psycopg2://tailfill:***@127.0.0.1:"
    assert (out + err).count(refused) == 2, err[-3000:]  # the job's (spark-submit puts it on stdout), the CLI's
    assert f"ok: catalog postgresql+psycopg2://tailfill:***@127.0.0.1:{postgres.port}/{database} reachable" in out
