"""The embedded broker: Apache Kafka itself (one KRaft node, :mod:`tailfill.dev.kafka_server`) on loopback.

``tailfill broker up`` starts it detached and records its address in ``$TAILFILL_HOME/broker.json``; a pipeline
whose ``bootstrap_servers`` is ``embedded`` resolves to that address. Its log lives in
``$TAILFILL_HOME/broker/kafka`` and its ports and cluster id in ``$TAILFILL_HOME/broker/kept.json``, so
``broker down``/``up`` loses neither topics nor address. Tests use :class:`EmbeddedBroker` (a node in a
temporary folder, removed with it) and :class:`KafkaCluster` (several nodes, one cluster).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tailfill.dev.kafka_server import (
    SINGLE_NODE,
    KafkaNode,
    NodeProcess,
    new_cluster_id,
    start_node,
    voters,
    wait_ready,
)
from tailfill.errors import BrokerError
from tailfill.plumbing.detached import free_port, port_free, stop_detached
from tailfill.settings import settings
from tailfill.source.embedded import broker_state, state_file

STOP_GRACE_S = 30.0  # Kafka's clean shutdown of one node takes a few seconds; a stuck one is killed after this


@dataclass
class EmbeddedBroker:
    """One Kafka node on free loopback ports, its log in a temporary folder, for the lifetime of a ``with`` block.

    ``settings`` are extra ``server.properties`` (a test's faster log cleaner, say). :meth:`restart` stops and
    starts the same node on the same folder and ports: its topics survive, as on any Kafka broker.
    """

    settings: dict[str, str] = field(default_factory=dict)
    node: KafkaNode | None = None
    started: NodeProcess | None = None
    cluster_id: str = field(default_factory=new_cluster_id)

    @property
    def bootstrap_servers(self) -> str:
        assert self.node is not None, "the broker was not started"
        return self.node.address

    @property
    def pid(self) -> int | None:
        return self.started.pid if self.started else None

    def __enter__(self) -> EmbeddedBroker:
        folder = Path(tempfile.mkdtemp(prefix="tailfill-kafka-"))
        self.node = KafkaNode(1, free_port(), free_port(), folder)
        try:
            self.start()
        except BaseException:
            self.__exit__()
            raise
        return self

    def start(self) -> None:
        assert self.node is not None
        self.started = start_node(self.node, voters([self.node]), self.cluster_id, {**SINGLE_NODE, **self.settings})
        wait_ready([self.started])

    def kill(self) -> None:
        """SIGKILL the broker (it keeps its folder: :meth:`start` recovers its log)."""
        if self.started:
            self.started.kill()

    def restart(self) -> None:
        if self.started:
            self.started.stop()
        self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()  # the folder goes with it: nothing to shut down cleanly for
        if self.node is not None:
            shutil.rmtree(self.node.data_dir, ignore_errors=True)


@dataclass
class KafkaCluster:
    """``size`` Kafka nodes on loopback, each broker and controller of one KRaft cluster, in a temporary folder.

    Nodes are SIGKILLed and started again by id (:meth:`kill`, :meth:`start`); their logs survive either.
    """

    size: int = 3
    settings: dict[str, str] = field(default_factory=dict)
    nodes: list[KafkaNode] = field(default_factory=list)
    running: dict[int, NodeProcess] = field(default_factory=dict)
    cluster_id: str = field(default_factory=new_cluster_id)
    folder: Path | None = None

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(n.address for n in self.nodes)

    def __enter__(self) -> KafkaCluster:
        self.folder = Path(tempfile.mkdtemp(prefix="tailfill-kafka-cluster-"))
        self.nodes = [KafkaNode(i, free_port(), free_port(), self.folder / f"node-{i}") for i in
                      range(1, self.size + 1)]
        try:
            for n in self.nodes:
                self.running[n.node_id] = start_node(n, voters(self.nodes), self.cluster_id, self.settings)
            wait_ready(list(self.running.values()))
        except BaseException:
            self.__exit__()
            raise
        return self

    def kill(self, node_id: int) -> None:
        """SIGKILL node ``node_id``."""
        self.running.pop(node_id).kill()

    def start(self, node_id: int) -> None:
        """Start node ``node_id`` again on its folder and wait until the cluster lists it."""
        node = next(n for n in self.nodes if n.node_id == node_id)
        self.running[node_id] = start_node(node, voters(self.nodes), self.cluster_id, self.settings)
        wait_ready(list(self.running.values()))

    def __exit__(self, *exc: object) -> None:
        for started in self.running.values():
            started.kill()
        self.running.clear()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)


def _kept_file(home: Path) -> Path:
    return home / "broker" / "kept.json"


def _kept(home: Path) -> dict:
    """What the first ``broker up`` of ``home`` chose and later ones keep: ports and the cluster id."""
    path = _kept_file(home)
    kept = json.loads(path.read_text()) if path.exists() else {}
    return kept if "cluster_id" in kept else {}  # a home of the former embedded broker keeps nothing of it


def broker_up(home: Path | None = None, port: int | None = None) -> dict:
    """Start the detached broker of ``home`` (or return the one running): ``{pid, port, bootstrap_servers,
    data_dir}``.

    Its ports and cluster id are kept for the next ``broker up`` of the same home (``port``, then
    ``TAILFILL_BROKER_PORT``, override the kept port; a first start takes free ones), and its topics are kept in
    ``home/broker/kafka``.
    """
    home = home or settings().home
    home.mkdir(parents=True, exist_ok=True)
    current = broker_state(home)
    if current:
        return current
    kept = _kept(home)
    port = port or settings().broker_port or kept.get("port") or free_port()
    controller_port = kept.get("controller_port") or free_port()
    for p, what in ((port, "port"), (controller_port, "controller port")):
        if not port_free(p):  # as Kafka binds: the last broker's TIME_WAIT connections do not count
            raise BrokerError(f"cannot start the embedded broker on 127.0.0.1:{p} (the {what} it keeps in {home}): "
                              "another process listens there (fix: stop that process, or set TAILFILL_BROKER_PORT)")
    node = KafkaNode(1, port, controller_port, home / "broker" / "kafka")
    cluster_id = kept.get("cluster_id") or new_cluster_id()
    started = start_node(node, voters([node]), cluster_id, SINGLE_NODE, detach=True)
    try:
        wait_ready([started])
    except BaseException:
        started.kill()
        raise
    _kept_file(home).write_text(json.dumps({"port": port, "controller_port": controller_port,
                                            "cluster_id": cluster_id}))
    state = {"pid": started.pid, "port": port, "bootstrap_servers": node.address, "data_dir": str(node.data_dir)}
    state_file(home).write_text(json.dumps(state))
    return state


def broker_down(home: Path | None = None) -> bool:
    """Stop the detached broker with Kafka's clean shutdown; True if one was running. Its topics stay on disk."""
    home = home or settings().home
    return stop_detached(broker_state(home), state_file(home), grace_s=STOP_GRACE_S)


def describe_storage(state: dict) -> str:
    """Where a running broker keeps its topics, for people."""
    return f"Apache Kafka, topics kept in {state.get('data_dir', '?')}"
