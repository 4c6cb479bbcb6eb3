"""The pinned JVM jars: the sets and their lock, the cache, and a fetch that refuses what the lock does not pin."""

from __future__ import annotations

import pytest

from tailfill.dev import jars
from tailfill.dev.jars import JarsError, classpath, fetch, jar_set, jar_sets, pom
from tailfill.plumbing.jvm_jars import installed, parse_pins


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
    with pytest.raises(JarsError, match=r"no pinned JVM jar set 'spark' \(the sets: bench-connect, .*iceberg, kafka\)"):
        classpath("spark")


def test_an_exclusion_line_leaves_a_dependency_out_of_the_root_above_it():
    pins = parse_pins([["s", "g:root:1"], ["s", "-log4j:*"], ["s", "-org.slf4j:slf4j-api"], ["s", "g:other:2"],
                       ["t", "g:root:1"]])
    assert pins == {"s": {"g:root:1": ["log4j:*", "org.slf4j:slf4j-api"], "g:other:2": []}, "t": {"g:root:1": []}}


@pytest.mark.parametrize(("line", "error"), [
    (["s", "-log4j:*"], r"pin 1: an exclusion '-log4j:\*' must be '-<groupId>:<artifactId>' below a root of set 's'"),
    (["s", "g:a"], r"pin 1: 'g:a' is not '<groupId:artifactId:version>'"),
    (["s", "g:a:1", "extra"], r"pin 1: want '<set> <groupId:artifactId:version>' .*, got 's g:a:1 extra'"),
])
def test_a_malformed_pin_is_named_by_its_number(line, error):
    with pytest.raises(JarsError, match=error):
        parse_pins([line])


def test_the_pom_names_each_roots_exclusions_and_nothing_for_a_root_without():
    made = pom(("g:root:1", "g:other:2"), (("g:root:1", ("log4j:*", "org.slf4j:slf4j-api")),))
    assert ("<dependency><groupId>g</groupId><artifactId>root</artifactId><version>1</version><exclusions>"
            "<exclusion><groupId>log4j</groupId><artifactId>*</artifactId></exclusion>"
            "<exclusion><groupId>org.slf4j</groupId><artifactId>slf4j-api</artifactId></exclusion>"
            "</exclusions></dependency>") in made
    assert "<artifactId>other</artifactId><version>2</version></dependency>" in made


def test_the_benchmark_sets_are_fetched_only_when_named_and_say_how(tmp_path, monkeypatch):
    resolved = []

    def resolve(jar_set, into):  # Maven stands in: it resolves exactly the locked jars
        resolved.append(jar_set.name)
        into.mkdir(parents=True)
        for name, _ in jar_set.locked:
            (into / name).write_bytes(b"")

    monkeypatch.setattr(jars, "_resolve", resolve)
    def locked(folder):  # the staging folder is .<set>-<random>/jars
        return dict(jar_sets()[folder.parent.name[1:].rsplit("-", 1)[0]].locked)

    monkeypatch.setattr(jars, "_hashes",
                        lambda folder: {p.name: locked(folder).get(p.name) for p in folder.glob("*.jar")})
    fetch(None, tmp_path)
    installs = {"iceberg", "kafka"}  # the install's sets: Iceberg in Spark sessions, the embedded broker
    assert sorted(resolved) == sorted(installs)
    assert all(s.bench_only for n, s in jar_sets().items() if n not in installs)
    with pytest.raises(JarsError, match=r"the JVM jars of 'bench-connect' are not installed in .* \(fix: "
                                        r"`make bench-deps`, or `.* -m tailfill.dev.jars fetch bench-connect`\)"):
        classpath("bench-connect", tmp_path)

