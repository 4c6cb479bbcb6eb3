"""Apache Kafka nodes in KRaft mode on loopback, run from the pinned jars (:mod:`tailfill.dev.jars`).

A :class:`KafkaNode` is one JVM that is both broker and controller, its log on disk in ``data_dir``; a node's
storage is formatted once (Kafka's ``StorageTool``), so a node started again on the same folder keeps its topics.
:func:`start_node` spawns one and :func:`wait_ready` waits until the cluster answers with every broker registered.
The embedded broker of ``tailfill broker up`` (:mod:`tailfill.dev.broker`) is one such node; the tests also run
three of them as one cluster.
"""

from __future__ import annotations

import base64
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from tailfill.dev.jars import classpath
from tailfill.errors import BrokerError
from tailfill.settings import LOOPBACK

HEAP = ["-Xms128m", "-Xmx1g"]  # Kafka's own scripts give 1 GiB; a development broker rarely touches it
JVM_OPTIONS = ["-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
               "-XX:+ExplicitGCInvokesConcurrent", "-Djava.awt.headless=true"]  # as kafka-run-class.sh
READY_TIMEOUT_S = 60.0

# What a development broker needs beyond Kafka's defaults: one replica of the internal topics (a single node), no
# wait before the first consumer group rebalance. Everything else is Kafka's default (auto-created topics, one
# partition, a week's retention), so the broker behaves as a user's would.
SINGLE_NODE = {
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
}

LOG4J = """\
status = error
appender.file.type = RollingFile
appender.file.name = file
appender.file.fileName = {log}
appender.file.filePattern = {log}.%i
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
appender.file.policies.type = Policies
appender.file.policies.size.type = SizeBasedTriggeringPolicy
appender.file.policies.size.size = 10MB
appender.file.strategy.type = DefaultRolloverStrategy
appender.file.strategy.max = 3
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.state.name = state.change.logger
logger.state.level = WARN
"""


@dataclass(frozen=True)
class KafkaNode:
    """One broker-and-controller of a KRaft cluster: its id, its client and controller ports, its folder."""

    node_id: int
    port: int
    controller_port: int
    data_dir: Path

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    @property
    def log_dirs(self) -> Path:
        return self.data_dir / "logs"

    @property
    def server_log(self) -> Path:
        """Kafka's own log (rolled at 10 MB, three kept); the JVM's stdout and stderr go to ``jvm.log``."""
        return self.data_dir / "server.log"

    @property
    def formatted(self) -> bool:
        return (self.log_dirs / "meta.properties").exists()


def voters(nodes: list[KafkaNode]) -> str:
    """The static controller quorum of ``nodes`` (``controller.quorum.voters``)."""
    return ",".join(f"{n.node_id}@{LOOPBACK}:{n.controller_port}" for n in nodes)


def server_properties(node: KafkaNode, quorum: str, settings: dict[str, str] | None = None) -> str:
    """The ``server.properties`` of ``node`` in a cluster whose controllers are ``quorum``; loopback only."""
    props = {
        "process.roles": "broker,controller",
        "node.id": str(node.node_id),
        "controller.quorum.voters": quorum,
        "listeners": f"PLAINTEXT://{LOOPBACK}:{node.port},CONTROLLER://{LOOPBACK}:{node.controller_port}",
        "advertised.listeners": f"PLAINTEXT://{LOOPBACK}:{node.port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(node.log_dirs),
        **(settings or {}),
    }
    return "".join(f"{k}={v}\n" for k, v in props.items())


def new_cluster_id() -> str:
    """A cluster id as Kafka makes them: a random UUID in URL-safe base64, never starting with ``-`` (Kafka's
    ``Uuid.randomUuid`` avoids those too: a command line would read one as an option)."""
    while (made := base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")).startswith("-"):
        pass
    return made


def java_command() -> str:
    """The ``java`` of ``JAVA_HOME``, else the one on PATH; a :class:`BrokerError` with the fix if there is none."""
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not java or not Path(java).exists():
        raise BrokerError("the embedded Kafka broker needs Java 17 or newer: no `java` found "
                          "(fix: install a JDK, or set JAVA_HOME)")
    return java


def _write_config(node: KafkaNode, quorum: str, settings: dict[str, str] | None) -> Path:
    node.data_dir.mkdir(parents=True, exist_ok=True)
    (node.data_dir / "log4j2.properties").write_text(LOG4J.format(log=node.server_log))
    path = node.data_dir / "server.properties"
    path.write_text(server_properties(node, quorum, settings))
    return path


def format_storage(node: KafkaNode, config: Path, cluster_id: str) -> None:
    """Format ``node``'s log folder for ``cluster_id`` (once: a formatted node keeps its topics)."""
    if node.formatted:
        return
    done = subprocess.run([java_command(), *_log_options(node), "-cp", classpath("kafka"), "kafka.tools.StorageTool",
                           "format", f"--cluster-id={cluster_id}", "--config", str(config), "--ignore-formatted"],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        tail = " | ".join((done.stdout + done.stderr).strip().splitlines()[-3:])
        raise BrokerError(f"could not format the Kafka log folder {node.log_dirs}: {tail}")


def _log_options(node: KafkaNode) -> list[str]:
    return [f"-Dlog4j2.configurationFile={node.data_dir / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={node.data_dir}"]


@dataclass
class NodeProcess:
    """A started node and its process."""

    node: KafkaNode
    proc: subprocess.Popen = field(repr=False)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def kill(self) -> None:
        """SIGKILL, as a crash would: the node recovers its log when it starts again."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def stop(self, grace_s: float = 30.0) -> None:
        """SIGTERM (Kafka's clean shutdown), SIGKILL after ``grace_s``."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self.kill()


def start_node(node: KafkaNode, quorum: str, cluster_id: str, settings: dict[str, str] | None = None,
               detach: bool = False) -> NodeProcess:
    """Write ``node``'s config, format its storage if it was never formatted, and spawn it (in a session of its
    own when ``detach``). Returns at once: :func:`wait_ready` waits for the cluster."""
    config = _write_config(node, quorum, settings)
    format_storage(node, config, cluster_id)
    with open(node.data_dir / "jvm.log", "ab") as out:
        proc = subprocess.Popen([java_command(), *HEAP, *JVM_OPTIONS, *_log_options(node), "-cp", classpath("kafka"),
                                 "kafka.Kafka", str(config)],
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=detach)
    return NodeProcess(node, proc)


def wait_ready(started: list[NodeProcess], timeout: float = READY_TIMEOUT_S) -> None:
    """Wait until every node of ``started`` listens and the cluster's metadata lists them all as brokers; a
    node that exits first, or a cluster not ready in ``timeout``, is a :class:`BrokerError` naming its log."""
    from confluent_kafka.admin import AdminClient

    deadline = time.monotonic() + timeout
    for s in started:
        _wait_listening(s, deadline)
    admin = AdminClient({"bootstrap.servers": ",".join(s.node.address for s in started), "log_level": 0})
    want = {s.node.node_id for s in started}
    while True:
        _check_alive(started)
        try:
            if want <= set(admin.list_topics(timeout=2).brokers):
                return
        except Exception:
            pass
        if time.monotonic() > deadline:
            raise BrokerError(f"Kafka at {started[0].node.address} did not register its brokers within "
                              f"{timeout:.0f}s (its log: {started[0].node.server_log})")
        time.sleep(0.1)


def _wait_listening(s: NodeProcess, deadline: float) -> None:
    while True:
        _check_alive([s])
        try:
            socket.create_connection((LOOPBACK, s.node.port), timeout=0.2).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise BrokerError(f"Kafka did not listen on {s.node.address} in time "
                                  f"(its log: {s.node.server_log})") from None
            time.sleep(0.05)


def _check_alive(started: list[NodeProcess]) -> None:
    for s in started:
        if s.proc.poll() is not None:
            jvm = s.node.data_dir / "jvm.log"
            last = jvm.read_text(errors="replace").strip().splitlines()[-1:] if jvm.exists() else []
            raise BrokerError(f"Kafka node {s.node.node_id} ({s.node.address}) exited with code {s.proc.returncode} "
                              f"while starting{': ' + last[0] if last else ''} (its log: {s.node.server_log})")
