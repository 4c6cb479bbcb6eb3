"""The pinned JVM jars: the sets and their lock, the cache, and a fetch that refuses what the lock does not pin."""

from __future__ import annotations

import pytest

from tailfill.dev import jars
from tailfill.dev.jars import JarsError, classpath, fetch, jar_set
from tailfill.plumbing.jvm_jars import installed


def test_the_kafka_set_pins_apache_kafka_and_locks_every_jar_it_resolves_to():
    kafka = jar_set("kafka")
    assert "org.apache.kafka:kafka_2.13:4.4.0" in kafka.roots
    names = [name for name, _ in kafka.locked]
    assert "kafka_2.13-4.4.0.jar" in names and "kafka-clients-4.4.0.jar" in names
    assert all(len(sha) == 64 for _, sha in kafka.locked)


def test_a_set_not_in_the_cache_is_one_line_with_the_fetch_command(tmp_path):
    with pytest.raises(JarsError, match=r"the JVM jars of 'kafka' are not installed in .* \(fix: `make install`, "
                                        r"or `.* -m tailfill.dev.jars fetch`\)"):
        classpath("kafka", tmp_path)
    jar_set("kafka").folder(tmp_path).mkdir(parents=True)
    assert classpath("kafka", tmp_path) == f"{jar_set('kafka').folder(tmp_path)}/*"


def test_a_set_is_installed_once_in_the_cache_and_an_unpinned_one_never(tmp_path):
    assert not installed("kafka", tmp_path)
    jar_set("kafka").folder(tmp_path).mkdir(parents=True)
    assert installed("kafka", tmp_path)
    assert not installed("spark", tmp_path)  # as in code run from an archive, which has no pins


def test_an_unknown_set_names_the_sets():
    with pytest.raises(JarsError, match=r"no pinned JVM jar set 'spark' \(the sets: iceberg, kafka\)"):
        classpath("spark")


def test_a_fetch_that_resolves_other_jars_than_the_lock_moves_nothing_into_the_cache(tmp_path, monkeypatch):
    def resolve(jar_set, into):  # Maven stands in: it "resolves" one jar the lock does not pin
        into.mkdir(parents=True)
        (into / "evil-1.0.jar").write_bytes(b"not what was pinned")

    monkeypatch.setattr(jars, "_resolve", resolve)
    with pytest.raises(JarsError, match=r"the 'kafka' jars Maven resolved differ from jvm-jars.lock: "
                                        r"HdrHistogram-2\.2\.2\.jar, .* …"):
        fetch(["kafka"], tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == []  # no cache folder, no staging left
