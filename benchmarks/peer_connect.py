"""The Kafka Connect peer of benchmarks/peers.py: the Apache Iceberg sink in a standalone Connect worker.

The worker (``connect-runtime``'s ``ConnectStandalone``, the class ``connect-standalone.sh`` runs) reads the topic
with schemaless JSON values and runs the Iceberg sink (``IcebergSinkConnector``) from a plugin folder assembled from
the sink's jar and its dependencies; the sink commits to an Iceberg table of a JdbcCatalog on SQLite every
``commit_ms``, coordinating its commits on the control topic ``control-iceberg``. The table is created beforehand
with pyiceberg in that same catalog file, so both read and write the same ``iceberg_tables`` schema. The worker's
source offsets live in a file and the sink's in its table: a worker killed and started again on the same folder
resumes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from peer_tables import catalog

from tailfill.dev.jars import classpath
from tailfill.dev.kafka_server import java_command
from tailfill.plumbing.detached import free_port
from tailfill.source.topics import ensure_topic

CONTROL_TOPIC = "control-iceberg"
CATALOG = "bench"
TABLE = "bench.events"
LOG4J = """\
status = error
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
"""


@dataclass(frozen=True)
class ConnectWorker:
    """A standalone Connect worker's folder: its configs, offsets file, plugin folder, catalog and warehouse."""

    folder: Path

    @property
    def catalog_db(self) -> Path:
        return self.folder / "catalog.db"

    @property
    def warehouse(self) -> Path:
        return self.folder / "warehouse"

    @property
    def log(self) -> Path:
        return self.folder / "connect.log"

    def prepare(self, bootstrap: str, topic: str, name: str, commit_ms: int, tasks: int) -> None:
        """Write the worker's and the sink ``name``'s properties (its consumer group is ``connect-<name>``), link
        the plugin folder, create the control topic and the table. Fails naming the fetch command if the
        benchmark's Connect jars are not installed."""
        classpath("bench-connect")
        plugin_jars = classpath("bench-iceberg-connect")
        self.folder.mkdir(parents=True, exist_ok=True)
        plugins = self.folder / "plugins"
        plugins.mkdir(exist_ok=True)
        (plugins / "iceberg-kafka-connect").symlink_to(Path(plugin_jars.removesuffix("/*")))
        self._write("worker.properties", {
            "bootstrap.servers": bootstrap,
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter.schemas.enable": "false",
            "offset.storage.file.filename": str(self.folder / "connect.offsets"),
            "offset.flush.interval.ms": "10000",
            "plugin.path": str(plugins),
            "plugin.discovery": "hybrid_warn",
            "listeners": f"http://127.0.0.1:{free_port()}",
        })
        self._write("iceberg-sink.properties", {
            "name": name,
            "connector.class": "org.apache.iceberg.connect.IcebergSinkConnector",
            "tasks.max": str(tasks),
            "topics": topic,
            "iceberg.tables": TABLE,
            "iceberg.catalog": CATALOG,
            "iceberg.catalog.catalog-impl": "org.apache.iceberg.jdbc.JdbcCatalog",
            "iceberg.catalog.uri": f"jdbc:sqlite:{self.catalog_db}",
            "iceberg.catalog.warehouse": f"file://{self.warehouse}",
            "iceberg.control.topic": CONTROL_TOPIC,
            "iceberg.control.commit.interval-ms": str(commit_ms),
            "iceberg.kafka.bootstrap.servers": bootstrap,
            # Each row keeps its Kafka coordinates and timestamp (Connect's own InsertField transform), as the
            # other systems' rows do: duplicates and losses by offset, freshness by timestamp.
            "transforms": "kafka",
            "transforms.kafka.type": "org.apache.kafka.connect.transforms.InsertField$Value",
            "transforms.kafka.topic.field": "kafka_topic",
            "transforms.kafka.partition.field": "kafka_partition",
            "transforms.kafka.offset.field": "kafka_offset",
            "transforms.kafka.timestamp.field": "kafka_timestamp",
        })
        (self.folder / "log4j2.properties").write_text(LOG4J.format(log=self.log))
        ensure_topic(bootstrap, CONTROL_TOPIC, 1)
        self._create_table()

    def _write(self, name: str, props: dict[str, str]) -> None:
        (self.folder / name).write_text("".join(f"{k}={v}\n" for k, v in props.items()))

    def _create_table(self) -> None:
        from pyiceberg.schema import Schema
        from pyiceberg.types import DoubleType, IntegerType, LongType, NestedField, StringType, TimestamptzType

        self.warehouse.mkdir(exist_ok=True)
        cat = catalog(self.catalog_db, CATALOG, self.warehouse)
        cat.create_namespace_if_not_exists("bench")
        cat.create_table_if_not_exists(TABLE, Schema(
            NestedField(1, "event_id", StringType()), NestedField(2, "user_id", LongType()),
            NestedField(3, "kind", StringType()), NestedField(4, "amount", DoubleType()),
            NestedField(5, "created_at", TimestamptzType()), NestedField(6, "kafka_topic", StringType()),
            NestedField(7, "kafka_partition", IntegerType()), NestedField(8, "kafka_offset", LongType()),
            NestedField(9, "kafka_timestamp", TimestamptzType())))

    def assigned(self) -> bool:
        """Whether the sink's consumers have their partitions (from the worker's log)."""
        return self.log.exists() and "Adding newly assigned partitions" in self.log.read_text(errors="replace")

    def task_failure(self) -> str | None:
        """The exception of a sink task the worker gave up on (the worker itself runs on), from its log."""
        lines = self.log.read_text(errors="replace").splitlines() if self.log.exists() else []
        for i, line in enumerate(lines):
            if "Task threw an uncaught and unrecoverable exception" in line:
                cause = next((t for t in lines[i + 1:] if not t.startswith("\tat ")), "")
                return f"{line.split(' ERROR ', 1)[-1]}: {cause}"
        return None

    def command(self) -> list[str]:
        """The worker's command line (the JVM options of Kafka's scripts, a 1 GiB heap)."""
        return [java_command(), "-Xms256m", "-Xmx1g", "-XX:+UseG1GC", "-Djava.awt.headless=true",
                f"-Dlog4j2.configurationFile={self.folder / 'log4j2.properties'}",
                "-cp", classpath("bench-connect"), "org.apache.kafka.connect.cli.ConnectStandalone",
                str(self.folder / "worker.properties"), str(self.folder / "iceberg-sink.properties")]
