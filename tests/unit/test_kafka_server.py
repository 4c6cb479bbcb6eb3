"""The embedded Kafka node's configuration: loopback listeners, a static quorum, ids a command line takes."""

from __future__ import annotations

from pathlib import Path

from tailfill.dev.kafka_server import KafkaNode, new_cluster_id, server_properties, voters


def props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines())


def test_a_node_listens_on_loopback_only_and_names_its_quorum():
    nodes = [KafkaNode(i, 9000 + i, 9100 + i, Path(f"/d/{i}")) for i in (1, 2, 3)]
    p = props(server_properties(nodes[1], voters(nodes), {"min.insync.replicas": "2"}))
    assert p["listeners"] == "PLAINTEXT://127.0.0.1:9002,CONTROLLER://127.0.0.1:9102"
    assert p["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9002"
    assert p["controller.quorum.voters"] == "1@127.0.0.1:9101,2@127.0.0.1:9102,3@127.0.0.1:9103"
    assert (p["node.id"], p["log.dirs"], p["min.insync.replicas"]) == ("2", "/d/2/logs", "2")


def test_settings_override_the_defaults():
    node = KafkaNode(1, 9001, 9101, Path("/d"))
    p = props(server_properties(node, voters([node]), {"advertised.listeners": "PLAINTEXT://127.0.0.1:7"}))
    assert p["advertised.listeners"] == "PLAINTEXT://127.0.0.1:7"


def test_cluster_ids_are_kafka_uuids_that_never_start_with_a_dash():
    ids = {new_cluster_id() for _ in range(2000)}
    assert len(ids) == 2000
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)
