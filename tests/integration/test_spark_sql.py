"""Spark itself reads and tends Tailfill's tables: Iceberg's SparkCatalog on the pipeline's own catalog.

After a backfill (append) and a keyed pipeline, Spark's row counts, per-key state and snapshot summaries equal
what ``validate`` proved and pyiceberg reads; Iceberg's own procedures (``rewrite_data_files``,
``expire_snapshots``) run on a Tailfill table and the proof of all runs still holds; ``tailfill sql -e`` answers a
count equal to validate's.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from helpers import backfill, noise, tail

from tailfill.config import MaintenanceConfig
from tailfill.dev.change_stream import change_stream, ends, fold, produce_changes
from tailfill.dev.sample import produce_sample
from tailfill.pipeline.handle import open_pipeline
from tailfill.proof.validate import validate
from tailfill.run.maintain import maintain
from tailfill.run.spark_session import use_catalog

pytestmark = pytest.mark.integration

HISTORY, LIVE, PARTITIONS = 6_000, 1_500, 2


@pytest.fixture
def session_of(spark):
    """A new session of the shared SparkSession per pipeline (its own catalogs), its catalog current."""
    def make(target):
        session = spark.newSession()
        return session, use_catalog(session, target)

    return make


def snapshots_by_spark(session, table: str) -> dict[int, dict[str, str]]:
    rows = session.sql(f"SELECT snapshot_id, operation, summary FROM {table}.snapshots").collect()
    return {r["snapshot_id"]: dict(r["summary"]) | {"operation": r["operation"]} for r in rows}


def state_by_spark(session, table: str) -> dict[int, tuple[int, int]]:
    """Each order's (partition, offset) in a keyed state as Spark reads it; each key once."""
    rows = session.sql(f"SELECT order_id, kafka_partition, kafka_offset FROM {table}").collect()
    state = {r["order_id"]: (r["kafka_partition"], r["kafka_offset"]) for r in rows}
    assert len(state) == len(rows), "a key has two rows in the state"
    return state


def snapshots_committed(table) -> dict[int, dict[str, str]]:
    """Each snapshot's summary as the table's metadata file holds it (what pyiceberg committed)."""
    table.refresh()
    with table.io.new_input(table.metadata_location).open() as f:
        return {s["snapshot-id"]: s["summary"] for s in json.load(f)["snapshots"]}


def test_spark_counts_what_validate_proved_and_its_procedures_keep_the_proof(spark, make_pipeline, session_of):
    cfg = make_pipeline(name="sparksql", source__partitions=PARTITIONS, backfill__max_offsets_per_batch=1_000,
                        tail__max_offsets_per_batch=1_000)
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, HISTORY, PARTITIONS, bad_every=500)
    backfill(spark, cfg)
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, LIVE, PARTITIONS, bad_every=500)
    tail(spark, cfg)
    with open_pipeline(cfg) as pipeline:
        proof = validate(pipeline, all_runs=True)
        assert proof.success, proof.problems
        data, quarantine = pipeline.open_tables().data, pipeline.open_tables().quarantine
        session, catalog = session_of(cfg.target)
        table = f"{catalog}.{cfg.target.namespace}.{cfg.target.table}"
        quarantined = f"{catalog}.{cfg.target.namespace}.{cfg.target.table}_quarantine"

        assert session.sql(f"SELECT count(*) FROM {table}").first()[0] == proof.rows
        assert session.sql(f"SELECT count(*) FROM {quarantined}").first()[0] == proof.quarantined > 0
        assert session.sql(f"SELECT count(DISTINCT kafka_partition, kafka_offset) FROM {table}").first()[0] \
            == proof.rows  # each offset once
        assert snapshots_by_spark(session, table) == snapshots_committed(data)
        assert snapshots_by_spark(session, quarantined) == snapshots_committed(quarantine)
        first = min(snapshots_committed(data).items(), key=lambda s: int(s[1]["total-records"]))
        assert session.sql(f"SELECT count(*) FROM {table} VERSION AS OF {first[0]}").first()[0] \
            == int(first[1]["total-records"])  # time travel
        files_before = session.sql(f"SELECT count(*) FROM {table}.files").first()[0]
        assert files_before > 1

        rewritten = session.sql(f"CALL {catalog}.system.rewrite_data_files(table => '{table}', "
                                "options => map('min-input-files', '2'))").first()
        assert rewritten["rewritten_data_files_count"] == files_before and rewritten["added_data_files_count"] >= 1
        newest = session.sql(f"SELECT max(committed_at) FROM {table}.snapshots").first()[0]
        expired = session.sql(f"CALL {catalog}.system.expire_snapshots(table => '{table}', "
                              f"older_than => TIMESTAMP '{newest}', retain_last => 1)").first()
        assert expired["deleted_data_files_count"] == files_before
        assert session.sql(f"SELECT count(*) FROM {table}.snapshots").first()[0] == 1

        after = validate(pipeline, all_runs=True)
        assert after.success, after.problems
        assert (after.rows, after.quarantined) == (proof.rows, proof.quarantined)
        assert session.sql(f"SELECT count(*) FROM {table}").first()[0] == proof.rows


def test_spark_reads_a_keyed_state_with_its_position_deletes_as_validate_proved(cdc, broker, spark, session_of):
    pipeline = cdc(source__bootstrap_servers=broker.bootstrap_servers, source__partitions=2,
                   backfill__max_offsets_per_batch=600)  # several merges: position deletes in the state
    cfg = pipeline.cfg
    changes = change_stream(3000, 300, partitions=2, wrapped=True, snapshot=100)
    half = {p: e // 2 for p, e in ends(changes).items()}
    history = [c for c in changes if c.offset < half[c.partition]]
    produce_changes(broker.bootstrap_servers, cfg.source.topic, history, 2)
    backfill(spark, cfg)
    tail(spark, cfg)
    proof = validate(pipeline, all_runs=True)
    assert proof.success, proof.problems
    state = pipeline.open_state_table()
    assert any(t.delete_files for t in state.scan().plan_files())  # the merge left position deletes to honour

    session, catalog = session_of(cfg.target)
    name = f"{catalog}.{'.'.join(state.name())}"
    by_spark = state_by_spark(session, name)
    assert by_spark == fold(history)
    assert proof.state["differing"] == 0 and proof.state["keys_checked"] >= len(by_spark)
    assert snapshots_by_spark(session, name) == snapshots_committed(state)

    session.sql(f"CALL {catalog}.system.rewrite_position_delete_files(table => '{name}')").collect()
    session.sql(f"CALL {catalog}.system.rewrite_data_files(table => '{name}', "
                "options => map('delete-file-threshold', '1'))").collect()
    state.refresh()
    assert not any(t.delete_files for t in state.scan().plan_files())  # the deletes are applied into the data
    after = validate(pipeline, all_runs=True)
    assert after.success, after.problems
    assert after.state["differing"] == 0
    assert state_by_spark(session, name) == fold(history)

    # Spark moved every live row the key index points at: the next merge refuses, naming the fix, until Tailfill's
    # own compaction has rebased the index on the files as Spark left them.
    later = {p: e * 3 // 4 for p, e in ends(changes).items()}
    produce_changes(broker.bootstrap_servers, cfg.source.topic,
                    [c for c in changes if half[c.partition] <= c.offset < later[c.partition]], 2)
    with pytest.raises(Exception) as refused:  # its change log is committed, its merge is not
        tail(spark, cfg)
    assert "data files were rewritten by another tool" in str(refused.value)
    assert "(fix: `tailfill maintain` the pipeline" in str(refused.value)
    upkeep = maintain(pipeline, MaintenanceConfig(target_file_bytes=1 << 20, expire_older_than="7d", keep_last=100,
                                                  orphan_min_age="7d", schedule=None))
    compacted = next(t.compaction for t in upkeep.tables if t.table.endswith("orders_state"))
    assert compacted.files_added == 1, upkeep  # the index rebased on the files as Spark left them
    produce_changes(broker.bootstrap_servers, cfg.source.topic, [c for c in changes if c.offset >= later[c.partition]],
                    2)
    tail(spark, cfg)  # its batch merges what the refused one left in the change log, and its own
    after = validate(pipeline, all_runs=True)
    assert after.success, after.problems
    assert after.state["differing"] == 0
    assert state_by_spark(session, name) == fold(changes)
    pipeline.close()


def test_tailfill_sql_answers_validates_count(spark, make_pipeline, tmp_path):
    cfg = make_pipeline(name="sqlcli", source__partitions=PARTITIONS)
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 2_000, PARTITIONS, bad_every=400)
    backfill(spark, cfg)
    with open_pipeline(cfg) as pipeline:
        proof = validate(pipeline, all_runs=True)
    assert proof.success, proof.problems
    yaml_path = tmp_path / "sqlcli.yaml"  # where make_pipeline wrote it
    tailfill = str(Path(sys.executable).parent / "tailfill")
    done = subprocess.run([tailfill, "sql", str(yaml_path), "-e", f"SELECT count(*) AS n FROM {cfg.target.table}"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert noise(done.stdout + done.stderr) == [], done.stderr  # the JVM's warnings and Spark's log: the log file
    assert done.stdout.split() == ["n", "-" * len(str(proof.rows)), str(proof.rows), "(1", "row)"], done.stdout

    bad = subprocess.run([tailfill, "sql", str(yaml_path), "-e", "SELECT nope FROM nowhere"],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2, bad.stderr
    assert bad.stderr.splitlines()[-1].startswith("error: [TABLE_OR_VIEW_NOT_FOUND] The table or view `nowhere` "
                                                  "cannot be found."), bad.stderr
    assert "Py4JJavaError" not in bad.stderr  # the JVM's stack goes to the command's log, not the terminal

    statements = f"SELECT count(*) AS n\nFROM {cfg.target.table};\nSELECT nope FROM nowhere;\nSHOW TABLES;\n"
    shell = subprocess.run([tailfill, "sql", str(yaml_path)], input=statements, capture_output=True, text=True,
                           timeout=300)
    assert shell.returncode == 2, shell.stderr  # one statement failed; the others ran
    out = shell.stdout.splitlines()
    assert out[:4] == ["n" + " " * (len(str(proof.rows)) - 1), "-" * len(str(proof.rows)), str(proof.rows), "(1 row)"]
    assert out[4].startswith("error: [TABLE_OR_VIEW_NOT_FOUND]")
    assert any(cfg.target.table in line for line in out[5:]) and out[-1] == "(2 rows)", out  # data + quarantine


def where(catalog: str, request) -> dict:
    """make_pipeline's settings of a catalog and warehouse: a SQL catalog with an S3 warehouse, SeaweedFS's REST
    catalog with its own, a Postgres SQL catalog (a database of its own) with a local warehouse."""
    if catalog == "postgres":
        postgres = request.getfixturevalue("postgres")
        database = f"sparkpg_{uuid.uuid4().hex[:8]}"
        postgres.create_databases(database)
        return {"catalog_uri": postgres.url(database)}
    seaweedfs = request.getfixturevalue("seaweedfs")
    return {"rest": seaweedfs} if catalog == "rest" else {"s3_endpoint": seaweedfs.s3_endpoint}


@pytest.mark.parametrize("catalog", ["sql-s3", "rest", "postgres"])
def test_spark_reads_each_catalog_and_warehouse_on_explicit_loopback_endpoints(spark, make_pipeline, session_of,
                                                                              request, catalog):
    """JdbcCatalog on SQLite or Postgres (its user taken out of the URI), Iceberg's REST catalog with its OAuth
    credential, S3FileIO on the pipeline's loopback endpoint and credentials."""
    cfg = make_pipeline(name=f"spark{catalog.replace('-', '')}", source__partitions=PARTITIONS,
                        **where(catalog, request))
    produce_sample(cfg.source.bootstrap_servers, cfg.source.topic, 1_000, PARTITIONS, bad_every=250)
    backfill(spark, cfg)
    with open_pipeline(cfg) as pipeline:
        proof = validate(pipeline, all_runs=True)
        assert proof.success, proof.problems
        session, name = session_of(cfg.target)
        table = f"{name}.{cfg.target.namespace}.{cfg.target.table}"
        assert session.sql(f"SELECT count(*) FROM {table}").first()[0] == proof.rows
        assert snapshots_by_spark(session, table) == snapshots_committed(pipeline.open_tables().data)
