"""Checks before a run: broker, topic, partitions, warehouse, every place a run writes, catalog, Schema Registry,
retention.

Each failure is one clear message naming what and where, raised as :class:`PreflightError`.
Checks only read: the tables are made and the cutover recorded by the planner
(:mod:`tailfill.run.planner`), never here (the write checks write one probe object per place and remove it).
"""

from __future__ import annotations

import uuid
from collections import Counter

from tailfill.config import PipelineConfig
from tailfill.errors import BrokerError, ConfigError, LakeError, PreflightError, RegistryError, SourceError
from tailfill.lake.tables import catalog_label
from tailfill.pipeline.handle import Pipeline, open_pipeline
from tailfill.plumbing.warehouse import fs_path, warehouse_uri
from tailfill.run.plan import SourceState, source_state, tail_start
from tailfill.run.tail_health import describe, read_tail
from tailfill.run.write_test import check_writable


def check_warehouse_writable(pipeline: Pipeline) -> str:
    target = pipeline.cfg.target
    probe = f"{warehouse_uri(target)}/_preflight/{uuid.uuid4().hex}"
    try:
        pipeline.fs.create_dir(fs_path(probe).rsplit("/", 1)[0], recursive=True)
        with pipeline.fs.open_output_stream(fs_path(probe)) as out:
            out.write(b"ok")
        pipeline.fs.delete_file(fs_path(probe))
    except OSError as exc:
        raise PreflightError(f"warehouse {warehouse_uri(target)} is not writable: {exc}") from exc
    return f"warehouse {warehouse_uri(target)} writable"


def check_registry(pipeline: Pipeline) -> str:
    """The Schema Registry answers and has the pipeline's subject, and key subject with ``format.key: registry``."""
    cfg = pipeline.cfg
    subjects = [cfg.subject, *([cfg.key_subject] if cfg.format.key == "registry" else [])]
    try:
        client = pipeline.registry
        assert client is not None, "a format with a schema registry"
        found = [client.latest(subject) for subject in subjects]
    except RegistryError as exc:
        raise PreflightError(f"schema registry: {exc}") from exc
    return f"schema registry {client.cfg.url} reachable, " + ", ".join(
        f"{'key ' if i else ''}subject {subject!r} at version {latest.version} (id {latest.id})"
        for i, (subject, latest) in enumerate(zip(subjects, found, strict=True)))


def check_retention(state: SourceState, mode: str) -> str:
    """The broker still holds every offset the next run needs (or the pipeline records gaps)."""
    # A backfill plans from the earliest offset, so only the tail can find its start expired; a tail
    # with no cutover yet starts where the planner will record it, at the broker's end.
    if mode == "tail":
        start = tail_start(state, state.cutover) if state.cutover is not None else state.marks.high
    else:
        start = state.marks.low
    expired = [f"{tp} [{start[tp]}, {state.marks.low[tp]})" for tp in start
               if start[tp] < (state.marks.low.get(tp) or 0)]
    if expired and state.cfg.source.on_expired_offsets == "fail":
        raise PreflightError(
            f"retention already removed offsets the {mode} needs: {', '.join(expired)} "
            "(set source.on_expired_offsets: record_gap to skip and record them)"
        )
    return f"retention ok for the {mode}" + (f" (gaps to record: {', '.join(expired)})" if expired else "")


SOURCE_PROBLEMS = (SourceError, ConfigError, BrokerError)  # unreachable, missing topic, partitions, credentials


def preflight_tables(cfg: PipelineConfig, mode: str) -> list[str]:
    """:func:`preflight` of each table of routed ``cfg`` (its topics' tables on the broker now), each line
    prefixed with its table. A broker that cannot list the topics fails it as it fails a table's check."""
    from tailfill.run.routed import resolve_routes

    try:
        routes = resolve_routes(cfg).routes
    except SOURCE_PROBLEMS as exc:
        raise PreflightError(str(exc)) from exc
    passed = []
    for route in routes:
        with open_pipeline(route.cfg) as pipeline:
            passed += [f"table {route.table}: {line}" for line in preflight(pipeline, mode)]
    return passed


def preflight(pipeline: Pipeline, mode: str) -> list[str]:
    """Run every check for a ``mode`` ("backfill" or "tail") run; returns what passed. Nothing is created.

    Lines that start with ``WARNING:`` do not fail the run (the tail's last measured keep-up problem).
    """
    cfg = pipeline.cfg
    passed = check_writable(pipeline)  # every place a run writes its own files, first, as each run's start does
    try:
        tables = pipeline.open_tables()  # the catalog answers; the tables are read as they are
    except LakeError as exc:
        raise PreflightError(f"catalog: {exc}") from exc
    try:
        state = source_state(pipeline, tables)  # broker, topic, partition count, the ledger
    except SOURCE_PROBLEMS as exc:
        raise PreflightError(str(exc)) from exc
    except LakeError as exc:
        raise PreflightError(f"catalog: {exc}") from exc
    per_topic = Counter(tp.topic for tp in state.marks.high)
    passed.append(f"broker reachable, {cfg.source.described}: "
                  + ", ".join(f"{topic} has {count} partitions" for topic, count in sorted(per_topic.items()))
                  if cfg.source.several else
                  f"broker reachable, topic {cfg.source.topic!r} has {len(state.marks.high.offsets)} partitions")
    names = f"{cfg.target.namespace}.{cfg.target.table}"
    passed.append(f"catalog {catalog_label(cfg.target)} reachable, tables {names} "
                  + ("ready" if tables is not None else "not made yet (the first run's planner makes them)"))
    if cfg.target.catalog.type != "rest":  # a REST catalog places the table's files itself
        passed.append(check_warehouse_writable(pipeline))
    if cfg.format.schema_registry is not None:
        passed.append(check_registry(pipeline))
    passed.append(check_retention(state, mode))
    if mode == "tail":  # what the last tail measured: can it keep up with the incoming rate?
        health, unknown = read_tail(pipeline.state)
        passed += describe(cfg, health, unknown=unknown)
    return passed
