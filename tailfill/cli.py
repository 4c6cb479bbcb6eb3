"""``tailfill``: the command line for the embedded broker, sample data, ingest runs and status."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from tailfill.config import PipelineConfig
from tailfill.dev.broker import broker_down, broker_up, describe_storage
from tailfill.dev.registry import registry_down, registry_up
from tailfill.errors import ConfigError, ErrorInfo, TailfillError
from tailfill.offsets import PartitionOffsets
from tailfill.pipeline.handle import Pipeline, open_pipeline
from tailfill.pipeline.load import env_names, resolve_pipeline
from tailfill.pipeline.routes import Route, routes_asked
from tailfill.redact import redact_text
from tailfill.run.connect_server import connect_server_down, connect_server_up
from tailfill.run.connect_server import server_state as connect_state
from tailfill.run.contract import IngestResult, JobSpec, new_run_id, read_event
from tailfill.run.owner import JobOwner, Signalled
from tailfill.run.planner import (
    BackfillPlan,
    BackfillRequest,
    TailRequest,
    plan_backfill_lanes,
    plan_tail,
    topic_names,
)
from tailfill.run.runners import Outcome, choose_runner, run_side_by_side
from tailfill.run.submit import parse_conf
from tailfill.run.terminal import CommandLog, JobOutput, failure_line
from tailfill.run.verdict import backfill_verdict
from tailfill.settings import REMOVED_SPARK_MODES, SPARK_MODES, settings, spark_mode_problem
from tailfill.source.embedded import broker_state, registry_state, resolve_bootstrap, resolve_registry
from tailfill.source.times import parse_time
from tailfill.state.records import format_stages
from tailfill.values.drift import describe
from tailfill.values.freshness import Freshness


def _say(line: str) -> None:
    print(redact_text(line), flush=True)


# `tailfill <service> up|down|status`: start, stop, read state; the state's address; a note on `up`.
_DEV_SERVICES = {"broker": (broker_up, broker_down, broker_state, "bootstrap_servers", ""),
                 "registry": (registry_up, registry_down, registry_state, "url", "for demos and tests only; "),
                 "connect-server": (connect_server_up, connect_server_down, connect_state, "url",
                                    "jobs run there with --spark connect, or auto while it runs; ")}


def cmd_dev_service(args: argparse.Namespace) -> int:
    up, down, current, address, note = _DEV_SERVICES[args.command]
    if args.action == "up":
        state = up()
        if args.command == "broker":
            note = describe_storage(state) + "; "
        _say(f"{args.command} up: {state[address]} (pid {state['pid']}, {note}state in {settings().home})")
    elif args.action == "down":
        _say(f"{args.command} stopped" if down() else f"no {args.command} was running")
    else:
        state, name = current(), args.command
        _say(f"{name} running: {state[address]} (pid {state['pid']})" if state else f"no {name} running")
    return 0


def cmd_broker(args: argparse.Namespace) -> int:
    """``tailfill broker up|down|status``, and ``broker topics [create NAME --partitions N]``."""
    if args.action != "topics":
        if args.topic_action or args.topic:
            raise ConfigError(f"`tailfill broker {args.action}` takes no more arguments "
                              "(topics: `tailfill broker topics create NAME`)")
        return cmd_dev_service(args)
    from tailfill.source.topics import ensure_topic, list_topics

    bootstrap = args.bootstrap_servers or resolve_bootstrap("embedded")
    if args.topic_action == "create":
        if not args.topic:
            raise ConfigError("`tailfill broker topics create` needs the topic's name")
        made = ensure_topic(bootstrap, args.topic, args.partitions)
        what = f"created with {args.partitions} partitions" if made else "exists already"
        _say(f"topic {args.topic} {what} on {bootstrap}")
        return 0
    topics = list_topics(bootstrap)
    _say(f"{len(topics)} topic{'s' if len(topics) != 1 else ''} on {bootstrap}")
    for t in topics:
        _say(f"  {t.name:<40} {t.partitions:>3} partitions {t.records:>12,} records")
    return 0


def cmd_pipelines(args: argparse.Namespace) -> int:
    from tailfill.pipeline.load import pipeline_files
    from tailfill.run.overview import PIPELINES_HEADER, pipeline_line

    files = pipeline_files()
    if not files:
        _say(f"no pipelines in {settings().pipelines} (fix: `tailfill init NAME --topic T`, or set TAILFILL_PIPELINES)")
        return 0
    _say(PIPELINES_HEADER)
    code = 0
    for path in files:
        try:
            cfg = resolve_pipeline(str(path))
            refs = [cfg.ref]
            if cfg.target.routed:
                from tailfill.run.routed import routes_for

                refs = [r.cfg.ref for r in routes_for(cfg)[0]]
            for ref in refs:
                with open_pipeline(ref) as pipeline:
                    _say(pipeline_line(pipeline))
        except TailfillError as exc:
            _say(f"{path.stem:<20} cannot be read: {exc}")
            code = 1
    return code


def cmd_show(args: argparse.Namespace) -> int:
    """``tailfill show`` of the pipeline, or of each table of a routed one."""
    return _each_table(args, "show", _show_one)


def _show_one(args: argparse.Namespace) -> int:
    from tailfill.run.overview import show_lines

    with open_pipeline(args.pipeline) as pipeline:
        for line in show_lines(pipeline):
            _say(line)
    return 0


def cmd_preview(args: argparse.Namespace) -> int:
    """``tailfill preview`` of the pipeline, or of each table of a routed one."""
    return _each_table(args, "preview", _preview_one)


def _preview_one(args: argparse.Namespace) -> int:
    from tailfill.run.overview import format_rows, preview_rows

    with open_pipeline(args.pipeline) as pipeline:
        rows = preview_rows(pipeline, args.quarantine, args.limit, args.where)
    if args.columns:
        missing = [c for c in args.columns.split(",") if c not in rows.column_names]
        if missing:
            raise ConfigError(f"--columns: no column {', '.join(missing)} (columns: {', '.join(rows.column_names)})")
        rows = rows.select(args.columns.split(","))
    _say(format_rows(rows))
    return 0


def cmd_sql(args: argparse.Namespace) -> int:
    """``tailfill sql``: one statement (``-e``), or a Spark SQL shell on stdin, against the pipeline's catalog."""
    from pyspark.errors import PySparkException

    from tailfill.run.spark_sql import first_line, run_statement, shell, sql_session

    with open_pipeline(args.pipeline) as pipeline:
        target = pipeline.cfg.target
    with args.command_log.children_stderr():  # the JVM's own output (its warnings, Spark's log) to the log
        spark = sql_session(target)
    try:
        if args.execute is None:
            interactive = sys.stdin.isatty()
            failed = shell(spark, sys.stdin, _say, (lambda p: print(p, end="", flush=True)) if interactive
                           else (lambda p: None))
            return 2 if failed else 0
        try:
            _say(run_statement(spark, args.execute))
        except PySparkException as exc:
            _err(f"error: {first_line(exc)}")
            return 2
        return 0
    finally:
        spark.stop()


def cmd_init(args: argparse.Namespace) -> int:
    from tailfill.pipeline.load import load_pipeline, pipeline_file
    from tailfill.run.scaffold import Request, propose

    path = pipeline_file(args.name)
    if path.exists() and not args.force:
        raise ConfigError(f"{path} exists already (fix: another name, or --force to replace it)")
    text = propose(Request(args.name, args.topic, args.format, args.bootstrap_servers, args.registry_url,
                           args.subject, args.sample, args.topic_pattern, args.table))
    path.parent.mkdir(parents=True, exist_ok=True)
    draft = path.with_name(f".{path.name}.draft")
    draft.write_text(text)
    try:
        load_pipeline(draft)  # what init writes loads as it is
    except ConfigError:
        draft.unlink()
        raise
    draft.replace(path)
    _say(text.rstrip())
    _say(f"\nwrote {path}; next: `tailfill backfill {args.name}`, then `tailfill validate {args.name} --all` and "
         f"`tailfill preview {args.name}`")
    return 0


SAMPLE_FORMATS = ("json", "avro", "protobuf", "json_schema", "debezium")


def sample_pipeline(fmt: str) -> str:
    """The shipped pipeline ``produce-sample --format fmt`` writes to unless given ``--pipeline``: ``demo`` for
    JSON, ``orders_cdc`` for Debezium change events, ``orders_<fmt>`` for a registry format."""
    return {"json": "demo", "debezium": "orders_cdc"}.get(fmt, f"orders_{fmt}")


def sample_topic(cfg: PipelineConfig, asked: str | None) -> str:
    """The topic ``produce-sample`` writes to: ``--topic`` (one of the pipeline's), else the pipeline's one topic."""
    if asked is None:
        if cfg.source.topic is None:
            raise ConfigError(f"pipeline {cfg.name} reads {cfg.source.described}: name the one to write to "
                              "(fix: --topic NAME)")
        return cfg.source.topic
    if not cfg.source.matches(asked):
        raise ConfigError(f"--topic {asked!r} is not one of pipeline {cfg.name}'s ({cfg.source.described})")
    return asked


def cmd_produce_sample(args: argparse.Namespace) -> int:
    from tailfill.dev.sample import produce_sample

    fmt = getattr(args, "format", None) or "json"
    cfg = resolve_pipeline(args.pipeline or sample_pipeline(fmt))
    topic = sample_topic(cfg, getattr(args, "topic", None))
    if fmt == "debezium":
        return _produce_changes(cfg, topic, args.count)
    if cfg.format.type != fmt:
        raise ConfigError(f"pipeline {cfg.name} reads {cfg.format.type}, not {fmt} (fix: --pipeline "
                          f"{sample_pipeline(fmt)})")
    bootstrap = resolve_bootstrap(cfg.source.bootstrap_servers)
    started = time.monotonic()
    if fmt != "json":
        from tailfill.dev.format_samples import produce_format_sample

        url = resolve_registry(cfg.format.schema_registry.url)
        counts = produce_format_sample(bootstrap, topic, url, fmt, args.count, cfg.source.partitions or 4,
                                       not_wire_every=args.bad_every)
        _say(f"produced {args.count:,} {fmt} records to {topic} on {bootstrap} in "
             f"{time.monotonic() - started:.1f}s (schema {cfg.subject} in {url}; {counts['bad']:,} deliberately "
             "not in the wire format)")
        return 0

    def progress(i: int) -> None:
        if i and i % 50_000 == 0:
            _say(f"  produced {i:,}/{args.count:,} ({i / (time.monotonic() - started):,.0f} msg/s)")

    counts = produce_sample(bootstrap, topic, args.count, cfg.source.partitions or 4,
                            args.bad_every, progress)
    secs = time.monotonic() - started
    _say(f"produced {args.count:,} records to {topic} on {bootstrap} in {secs:.1f}s "
         f"({counts['good']:,} valid, {counts['bad']:,} deliberately bad)")
    return 0


def _produce_changes(cfg: PipelineConfig, topic: str, count: int) -> int:
    """``produce-sample --format debezium``: Debezium change events of orders (10 changes per order on average)."""
    from tailfill.dev.change_stream import avro_changes, change_stream, produce_changes

    if cfg.format.envelope != "debezium" or cfg.format.type not in ("json", "avro"):
        raise ConfigError(f"pipeline {cfg.name} does not read Debezium change events in JSON or Avro (fix: "
                          "--pipeline orders_cdc or orders_cdc_avro)")
    bootstrap = resolve_bootstrap(cfg.source.bootstrap_servers)
    partitions = cfg.source.partitions or 4
    started = time.monotonic()
    changes = change_stream(count, max(1, count // 10), partitions=partitions, snapshot=min(count // 10, 10_000))
    if cfg.format.type == "avro":  # as Debezium's Avro converter writes them, the schemas registered
        assert cfg.format.schema_registry is not None, "an avro format has a schema_registry (checked when loaded)"
        changes = avro_changes(changes, resolve_registry(cfg.format.schema_registry.url), topic)
    produce_changes(bootstrap, topic, changes, partitions)
    ops = {op: sum(1 for c in changes if c.op == op) for op in ("r", "c", "u", "d", "tombstone")}
    _say(f"produced {len(changes):,} change records to {topic} on {bootstrap} in "
         f"{time.monotonic() - started:.1f}s ({', '.join(f'{n:,} {op}' for op, n in ops.items())})")
    return 0


def _summarise(pipeline: Pipeline, what: str, outcomes: list[Outcome], nothing: str = "all offsets already committed",
               output: JobOutput | None = None, replayed: int = 0) -> int:
    """The summary of a command's jobs, or the one line that says why they failed (cause, fix, full output);
    without a job, the backfill's verdict after it ``replayed`` committed offsets (0: none)."""
    cfg, results = pipeline.cfg, _results(outcomes)
    failed = next((o for o in outcomes if o.code != 0), None)
    if failed is not None:
        error = failed.result.error if failed.result is not None else None
        _err(failure_line(f"{what} of {cfg.name}", error, failed.code, output.log if output else None))
        return failed.code
    if not results and replayed:
        _say(f"{what} of {cfg.name}: {backfill_verdict(0, 0, replayed).headline}")
        return 0
    if not results:
        _say(f"{what} of {cfg.name}: nothing to do ({nothing})")
        return 0
    _say(f"{what} of {cfg.name}: summary")
    _say(f"  {'part':<28} {'batches':>7} {'offsets':>10} {'rows':>10} {'quarantined':>11} {'rows/s':>9} "
         f"{'restarts':>8}")
    for r in results:
        part = r.label.removeprefix(f"{cfg.name} ").removeprefix(f"{what} ")
        _say(f"  {part[:28]:<28} {r.batches:>7} {r.offsets:>10,} {r.rows:>10,} "
             f"{r.quarantined:>11,} {r.rows_per_second:>9,.0f} {r.restarts:>8}")
        if r.stages:
            _say("    time by stage: " + format_stages(r.stages)
                 + " (read, parse, write: summed over parallel tasks)")
        if r.freshness and what == "tail":
            _say(f"    freshness (produce to commit): {Freshness.from_dict(r.freshness)} "
                 f"(objective p95 ≤ {cfg.tail.freshness_seconds:g}s)")
        if r.unknown_fields:
            _say(f"    fields not declared (format.unknown_fields: {cfg.format.unknown_fields}): "
                 f"{describe(r.unknown_fields)}")
        for warning in r.warnings:
            _say(f"    WARNING: {warning}")
    _say(f"  run id {results[0].run_id}; per-batch metrics in {pipeline.state.uri('runs/' + results[0].run_id)}")
    return 0


def _offsets(text: str | None) -> PartitionOffsets | None:
    return PartitionOffsets.from_json(text) if text else None


def _time(args: argparse.Namespace, name: str, offsets: str | None) -> datetime | None:
    """``--from-time`` or ``--to-time`` (``name``), parsed; refused beside the offsets flag it replaces."""
    text = getattr(args, name, None)
    if text is None:
        return None
    flag, instead = f"--{name.replace('_', '-')}", "--from" if name == "from_time" else "--to"
    if offsets is not None:
        raise ConfigError(f"backfill: give {instead} or {flag}, not both (fix: drop one of them)")
    return parse_time(text, flag)


def backfill_plan(pipeline: Pipeline, args: argparse.Namespace) -> BackfillPlan:
    """``tailfill backfill``'s flags planned by :mod:`tailfill.run.planner` (the backfill DAG's form is too)."""
    request = BackfillRequest(_offsets(args.start), _offsets(args.end), args.slices,
                              lanes=getattr(args, "lanes", None) or 1,
                              max_offsets_per_second=getattr(args, "max_rate", None),
                              on_committed=getattr(args, "on_committed", None) or "skip",
                              topics=topic_names(getattr(args, "topics", None)),
                              from_time=_time(args, "from_time", args.start), to_time=_time(args, "to_time", args.end))
    run_id = new_run_id("backfill")  # every lane of a command-line backfill is one run
    return plan_backfill_lanes(pipeline, request, lambda _lane: run_id)


def _show(line: str) -> None:
    """A line for people on stderr (the job's events are for machines)."""
    if read_event(line) is None:
        _err(line)


def _err(line: str) -> None:
    print(redact_text(line), file=sys.stderr, flush=True)


def _job_output(name: str, what: str, specs: list[JobSpec]) -> JobOutput:
    """Where a command's jobs' output goes: all of it to ``$TAILFILL_HOME/logs/<pipeline>/<run>/tailfill-<what>.log``,
    the lines for people to the terminal."""
    from tailfill.run.runtime import log_dir

    return JobOutput(log_dir(name, specs[0].run_id) / f"tailfill-{what}.log", _show)


def _owner(args: argparse.Namespace, what: str) -> JobOwner:
    """The command's :class:`JobOwner` (set by :func:`main`; a command called otherwise gets one of its own)."""
    owner = getattr(args, "owner", None) or JobOwner(what, _err)
    owner.what = what
    return owner


def _stopped(args: argparse.Namespace, what: str, name: str, outcomes: list[Outcome]) -> int | None:
    """When a signal stopped the command's jobs: its one line, and the command's exit code; else None."""
    owner: JobOwner | None = getattr(args, "owner", None)
    if owner is None or owner.exit_code is None:
        return None
    done = sum(r.offsets for r in _results(outcomes))
    _err(f"{what} of {name} stopped on {signal.Signals(owner.signum or 0).name} after its batch in flight: "
         f"{done:,} offsets committed by this run; `tailfill {what} {name}` goes on from there")
    return owner.exit_code


def _routes(args: argparse.Namespace, run: str | None = None) -> list[Route] | None:
    """The tables a command on ``args.pipeline`` works on: None for a pipeline of one table. Of a routed
    pipeline, its topics' tables now (its notes said first), and for commands that only read (``run`` None) the
    known tables whose topics are gone. ``run`` (``backfill``, ``tail``): the tables are remembered, and a tail
    starts the new ones at their earliest offsets."""
    cfg = resolve_pipeline(args.pipeline)
    if not cfg.target.routed or cfg.route is not None:
        return None
    from tailfill.run.routed import routes_for

    routes, notes = routes_for(cfg, run)
    for note in notes:
        _say(note)
    return routes


def _tables(args: argparse.Namespace, run: str | None = None) -> list[str] | None:
    """:func:`_routes` as refs (``PipelineConfig.ref``)."""
    routes = _routes(args, run)
    return None if routes is None else [r.cfg.ref for r in routes]


def _route_of(ref: str) -> tuple[str, tuple[str, ...]]:
    """A route's table and topics from its ref (``<file>#<table>:<topics>``)."""
    from tailfill.pipeline.routes import parse_route

    return parse_route(ref.partition("#")[2])


def _for_table(args: argparse.Namespace, ref: str, **changes: object) -> argparse.Namespace:
    return argparse.Namespace(**{**vars(args), "pipeline": ref, **changes})


def _each_table(args: argparse.Namespace, what: str, one: Callable[[argparse.Namespace], int]) -> int:
    """``one`` for each table of a routed pipeline (a failing table does not stop the others), or for the
    pipeline itself; exit code: the worst table's."""
    refs = _tables(args)
    if refs is None:
        return one(args)
    failed = []
    for ref in refs:
        table = _route_of(ref)[0]
        _say(f"\n== table {table}")
        try:
            code = one(_for_table(args, ref))
        except TailfillError as exc:
            _say(f"{what} of table {table} failed: {exc}")
            code = 1
        if code:
            failed.append(table)
    return _tables_verdict(args.pipeline, what, len(refs), failed)


def _tables_verdict(pipeline: str, what: str, tables: int, failed: list[str]) -> int:
    """The one-line summary of a command over a routed pipeline's tables; 1 when one failed."""
    failed = sorted(set(failed))
    _say(f"{what} of {resolve_pipeline(pipeline).name}: {tables - len(failed)} of {tables} table(s) ok"
         + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


def cmd_backfill(args: argparse.Namespace) -> int:
    conf = parse_conf(args.conf)  # before planning: a typo fails at once
    routes = _routes(args, run="backfill")
    if routes is None:
        return _backfill(args, conf)
    asked = topic_names(getattr(args, "topics", None))
    planned: list[tuple[Pipeline, list[JobSpec]]] = []
    failed: list[str] = []
    for route, mine in routes_asked(routes, asked):
        try:
            with open_pipeline(route.cfg) as pipeline:
                planned.append((pipeline, _backfill_specs(pipeline, _for_table(
                    args, route.cfg.ref, topics=",".join(mine) or None))[0]))
        except TailfillError as exc:  # this table cannot start: the others still run
            _say(f"backfill of table {route.table} cannot start: {exc}")
            failed.append(route.table)
    tables = len(planned) + len(failed)
    specs = [spec for _, mine in planned for spec in mine]
    every: list[Outcome] = []
    output = None
    if specs:  # every table's jobs at once, in one Spark application
        name = resolve_pipeline(args.pipeline).name
        output, owner = _job_output(name, "backfill", specs), _owner(args, f"the backfill of {name}")
        runner = choose_runner(args.spark, args.master, conf, secrets=env_names(planned[0][0].cfg), say=_show)
        every = run_side_by_side(runner, specs, output, one_application=True, track=owner.track)
        stopped = _stopped(args, "backfill", name, every)
        if stopped is not None:
            return stopped
    outcomes = iter(every)
    for pipeline, mine in planned:
        done = [next(outcomes) for _ in mine]
        if _summarise(pipeline, "backfill", done, output=output) != 0:
            failed.append(_route_of(pipeline.cfg.ref)[0])
    return _tables_verdict(args.pipeline, "backfill", tables, failed)


def _backfill(args: argparse.Namespace, conf: dict[str, str]) -> int:
    with open_pipeline(args.pipeline) as pipeline:
        specs, nothing, replayed = _backfill_specs(pipeline, args)
    if not specs:
        return _summarise(pipeline, "backfill", [], nothing, replayed=replayed)
    output, owner = _job_output(pipeline.name, "backfill", specs), _owner(args, f"the backfill of {pipeline.name}")
    runner = choose_runner(args.spark, args.master, conf, secrets=env_names(pipeline.cfg), say=_show)
    outcomes = run_side_by_side(runner, specs, output, track=owner.track)  # a signal stops every lane's job
    stopped = _stopped(args, "backfill", pipeline.name, outcomes)
    return stopped if stopped is not None else _summarise(pipeline, "backfill", outcomes, output=output)


def _backfill_specs(pipeline: Pipeline, args: argparse.Namespace) -> tuple[list[JobSpec], str, int]:
    """The backfill's specs, why there are none when there are none, and how many committed offsets it replayed
    first (``--on-committed replay``)."""
    from tailfill.run.replay import replay_committed_first

    plan = backfill_plan(pipeline, args)
    replayed = replay_committed_first(pipeline, getattr(args, "on_committed", None) or "skip", plan, _say)
    return plan.specs, plan.nothing, replayed.offsets if replayed else 0


def _results(outcomes: list[Outcome]) -> list[IngestResult]:
    return [r for o in outcomes if o.result for r in o.result.results]


def cmd_replay(args: argparse.Namespace) -> int:
    """``tailfill replay``: re-read committed offsets with the pipeline as it is now and replace their rows."""
    from tailfill.run.replay import replay
    from tailfill.run.replay_plan import ReplayRequest

    if args.run and (args.start or args.end):
        raise ConfigError("replay: give --run or --from/--to, not both")
    with open_pipeline(args.pipeline) as pipeline:
        replay(pipeline, ReplayRequest(_offsets(args.start), _offsets(args.end), args.run), _say)
    return 0


def cmd_tail(args: argparse.Namespace) -> int:
    conf = parse_conf(args.conf)
    refs = _tables(args, run="tail") or [args.pipeline]
    request = TailRequest(args.once, getattr(args, "stop_after", None))
    planned: list[tuple[Pipeline, JobSpec]] = []
    failed: list[str] = []
    for ref in refs:
        try:
            with open_pipeline(ref) as pipeline:
                plan = plan_tail(pipeline, request, new_run_id("tail"))
        except TailfillError as exc:
            if len(refs) == 1:
                raise
            _say(f"tail of table {_route_of(ref)[0]} cannot start: {exc}")
            failed.append(_route_of(ref)[0])
            continue
        for note in plan.notes:
            _say(note)
        planned.append((pipeline, plan.spec))
    if not planned:
        return _tables_verdict(args.pipeline, "tail", len(failed), failed)
    name = resolve_pipeline(args.pipeline).name
    specs = [spec for _, spec in planned]
    output, owner = _job_output(name, "tail", specs), _owner(args, f"the tail of {name}")
    runner = choose_runner(args.spark, args.master, conf, secrets=env_names(planned[0][0].cfg), say=_show)
    outcomes = run_side_by_side(runner, specs, output, one_application=len(refs) > 1, track=owner.track)
    stopped = _stopped(args, "tail", name, outcomes)
    if stopped is not None:
        return stopped
    cfg = resolve_pipeline(args.pipeline)
    why = request.ends_because(cfg.tail.trigger, cfg.path)
    if len(refs) == 1:
        code = _summarise(planned[0][0], "tail", outcomes, output=output)
        if code == 0 and why:
            _say(f"tail of {name} ended: {why}")
        return code
    for (pipeline, _), outcome in zip(planned, outcomes, strict=True):
        if _summarise(pipeline, "tail", [outcome], output=output) != 0:
            failed.append(_route_of(pipeline.cfg.ref)[0])
    if not failed and why:
        _say(f"tail of {name} ended: {why}")
    return _tables_verdict(args.pipeline, "tail", len(refs), failed)


def cmd_stop_tail(args: argparse.Namespace) -> int:
    """``tailfill stop-tail`` of the pipeline, or of each table of a routed one."""
    return _each_table(args, "stop-tail", _stop_tail)


def _stop_tail(args: argparse.Namespace) -> int:
    from tailfill.state.store import read_health, request_stop

    pipeline = open_pipeline(args.pipeline)
    health = read_health(pipeline.state)
    if health is None or not health.live():
        _say(f"no tail of {pipeline.name} is running")
        return 1
    request_stop(pipeline.state)
    _say(f"asked the tail of {pipeline.name} to stop after its current batch")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    """``tailfill status`` of the pipeline, or of each table of a routed one."""
    return _each_table(args, "status", _status)


def _status(args: argparse.Namespace) -> int:
    from tailfill.lake.schema_change import schema_line
    from tailfill.proof.reports import read_latest
    from tailfill.run.plan import source_state
    from tailfill.run.replay import pending_line
    from tailfill.run.status import format_status, keyed_status, pipeline_status, quarantined_rows, unknown_fields_line
    from tailfill.run.tail_health import describe, read_tail
    from tailfill.state.tail_claim import status_line

    with open_pipeline(args.pipeline) as pipeline:
        cfg = pipeline.cfg
        tables = pipeline.open_tables()  # as they are: status makes nothing
        state = source_state(pipeline, tables)
        rows = pipeline_status(state)
        _say(format_status(cfg.name, rows, quarantined_rows(state)))
        _say(schema_line(tables.data) if tables is not None else
             f"table schema: {cfg.target.namespace}.{cfg.target.table} not made yet (the first run's planner makes it)")
        if cfg.format.type == "json":
            _say(unknown_fields_line(pipeline.state))
        state_table = pipeline.open_state_table()
        if tables is not None and state_table is not None:
            for line in keyed_status(tables.data, state_table, cfg.target.key):
                _say(line)
        _say(status_line(pipeline.state))
        health, unknown = read_tail(pipeline.state)
        for line in describe(cfg, health, unknown=unknown):
            _say(line)
        replay_left = pending_line(pipeline)
        if replay_left:
            _say(replay_left)
        latest = read_latest(pipeline)
    if latest:
        verdict = "complete" if latest.success else f"INCOMPLETE ({len(latest.problems)} problems)"
        _say(f"latest validation: {latest.scope}, {verdict}, at {latest.validated_at}\n  report: {latest.html}")
    else:
        _say(f"latest validation: none yet (run `tailfill validate {cfg.name}`)")
    return 1 if any(r.gaps for r in rows) else 0


def cmd_preflight(args: argparse.Namespace) -> int:
    """``tailfill preflight`` of the pipeline, or of each table of a routed one (a broker that cannot list a
    routed pipeline's topics fails it as it fails a table's check)."""
    from tailfill.run.preflight import SOURCE_PROBLEMS

    try:
        return _each_table(args, "preflight", _preflight)
    except SOURCE_PROBLEMS as exc:
        _say(f"preflight of {resolve_pipeline(args.pipeline).name} ({args.mode}) FAILED: {exc}")
        return 1


def _preflight(args: argparse.Namespace) -> int:
    from tailfill.errors import PreflightError
    from tailfill.run.preflight import preflight

    with open_pipeline(args.pipeline) as pipeline:
        try:
            for line in preflight(pipeline, args.mode):
                _say(f"  warning: {line.removeprefix('WARNING: ')}" if line.startswith("WARNING:")
                     else f"  ok: {line}")
        except PreflightError as exc:
            _say(f"preflight of {pipeline.name} ({args.mode}) FAILED: {exc}")
            return 1
    _say(f"preflight of {pipeline.name} ({args.mode}): ready")
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    """``tailfill validate`` of the pipeline, or of each table of a routed one."""
    return _each_table(args, "validate", _validate)


def _validate(args: argparse.Namespace) -> int:
    from tailfill.proof.validate import validate

    with open_pipeline(args.pipeline) as pipeline:
        result = validate(pipeline, run_id=args.run, all_runs=args.all)
    _say(result.asstr())
    return 0 if result.success else 1


def cmd_maintain(args: argparse.Namespace) -> int:
    """``tailfill maintain`` of the pipeline, or of each table of a routed one."""
    return _each_table(args, "maintain", _maintain)


def _maintain(args: argparse.Namespace) -> int:
    from tailfill.run.maintain import maintain, maintenance_settings

    with open_pipeline(args.pipeline) as pipeline:
        upkeep = maintenance_settings(pipeline.cfg, args.expire_older_than, args.keep_last)
        _say(maintain(pipeline, upkeep).asstr())
    return 0


def cmd_reset(args: argparse.Namespace) -> int:
    """``tailfill reset`` of the pipeline, or of each table of a routed one (and the tables it knew)."""
    code = _each_table(args, "reset", _reset)
    cfg = resolve_pipeline(args.pipeline)
    if code == 0 and cfg.target.routed and cfg.route is None:
        from tailfill.pipeline.routes import ROUTES_KEY

        with open_pipeline(cfg) as base:
            base.state.delete(ROUTES_KEY)
    return code


def _reset(args: argparse.Namespace) -> int:
    from tailfill.run.reset import reset, reset_targets

    with open_pipeline(args.pipeline) as pipeline:
        targets = reset_targets(pipeline)
        if not targets.lines():
            _say(f"{pipeline.name}: nothing to reset (no table, state, validation or checkpoints yet)")
            return 0
        _say(f"reset {pipeline.name} removes (the topic stays as it is):")
        for line in targets.lines():
            _say(f"  {line}")
        if not args.yes:
            if not sys.stdin.isatty():
                _say(f"not resetting {pipeline.name}: no terminal to ask (fix: --yes)")
                return 1
            if input(f"type {pipeline.name} to confirm: ").strip() != pipeline.name:
                _say(f"not resetting {pipeline.name}")
                return 1
        reset(pipeline, targets)
    _say(f"reset {pipeline.name}: done; the next backfill starts from the topic's beginning")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """Broker and this home's Spark Connect server up (both left running: `make demo` stops them), sample history,
    backfill, more events, tail once, validate every run, status."""
    ns, owner = argparse.Namespace, getattr(args, "owner", None)  # the demo's jobs are its own
    steps: list[tuple[str, Callable[[], int]]] = [
        ("start the embedded broker", lambda: cmd_dev_service(ns(command="broker", action="up"))),
        ("start this home's Spark Connect server (the jobs below run there: auto)",
         lambda: cmd_dev_service(ns(command="connect-server", action="up"))),
        (f"produce {args.count:,} historical events",
         lambda: cmd_produce_sample(ns(pipeline=args.pipeline, count=args.count, bad_every=args.bad_every))),
        ("backfill history [earliest, cutover)",
         lambda: cmd_backfill(ns(pipeline=args.pipeline, start=None, end=None, slices=None, master=None,
                                  conf=None, spark=None, owner=owner))),
        (f"produce {args.tail_count:,} live events",
         lambda: cmd_produce_sample(ns(pipeline=args.pipeline, count=args.tail_count, bad_every=args.bad_every))),
        ("tail from the cutover (once)",
         lambda: cmd_tail(ns(pipeline=args.pipeline, once=True, master=None, conf=None, spark=None, owner=owner))),
        ("validate every offset landed exactly once (Great Expectations)",
         lambda: cmd_validate(ns(pipeline=args.pipeline, run=None, all=True))),
        ("status", lambda: cmd_status(ns(pipeline=args.pipeline))),
    ]
    for i, (title, step) in enumerate(steps, 1):
        _say(f"\n== demo step {i}/{len(steps)}: {title}")
        code = step()
        if code != 0:
            _say(f"demo stopped at step {i} ({title}) with exit code {code}")
            return code
    _say(f"\ndemo done. State is in {settings().home}; stop the broker and the Spark Connect server with "
         "`tailfill broker down` and `tailfill connect-server down`.")
    return 0


def _spark_options(parser: argparse.ArgumentParser) -> None:
    """``--master`` and ``--conf``, passed to ``spark-submit`` as it takes them."""
    parser.add_argument("--master", help="Spark master URL, e.g. spark://host:7077 or k8s://https://host:443 "
                                         "(default: $TAILFILL_SPARK_MASTER, else local[2])")
    parser.add_argument("--conf", action="append", metavar="KEY=VALUE",
                        help="a Spark setting for spark-submit (repeatable), e.g. spark.executor.memory=2g")
    parser.add_argument("--spark", choices=SPARK_MODES, type=_spark_mode,
                        help="connect: on Spark Connect ($TAILFILL_SPARK_REMOTE, else this home's local server, "
                             "started if need be); submit: a spark-submit of its own; auto: Connect when a server "
                             "is configured or running, else spark-submit (default: $TAILFILL_SPARK, else auto)")


def _spark_mode(value: str) -> str:
    """``--spark``'s value: a mode that was removed is refused saying so (``choices`` refuses any other)."""
    if value in REMOVED_SPARK_MODES:
        raise argparse.ArgumentTypeError(f"{value!r}: {spark_mode_problem(value)}")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tailfill", description="Kafka history + live tail into Iceberg, exactly once.")
    sub = p.add_subparsers(dest="command", required=True)

    b = sub.add_parser("broker", help="the embedded Apache Kafka broker on loopback (topics kept across down/up); "
                                      "its topics")
    b.add_argument("action", choices=("up", "down", "status", "topics"),
                   help="topics: list the topics (partitions, records); `topics create NAME --partitions N`")
    b.add_argument("topic_action", nargs="?", choices=("create",), help=argparse.SUPPRESS)
    b.add_argument("topic", nargs="?", help=argparse.SUPPRESS)
    b.add_argument("--partitions", type=int, default=4, help="with topics create: the partition count (default 4)")
    b.add_argument("--bootstrap-servers", help="with topics: another broker than the embedded one (host:port)")
    b.set_defaults(func=cmd_broker)

    ini = sub.add_parser("init", help="write a first pipeline YAML for a topic, from a sample of its records "
                                       "(json) or its registry subject; or for a topic pattern, a table per topic")
    ini.add_argument("name", help="the pipeline's name: pipelines/NAME.yaml (in $TAILFILL_PIPELINES)")
    one = ini.add_mutually_exclusive_group(required=True)
    one.add_argument("--topic")
    one.add_argument("--topic-pattern", help="a regular expression over whole topic names: a routed pipeline, each "
                                             "matching topic's table with its own columns")
    ini.add_argument("--table", help="with --topic-pattern: the table template (default: {topic.N} for the topics' "
                                     "last dot-separated part when it tells them apart, else {topic})")
    ini.add_argument("--format", choices=("json", "avro", "protobuf", "json_schema"), default="json")
    ini.add_argument("--bootstrap-servers", default="embedded", help="default: the embedded broker")
    ini.add_argument("--registry-url", default="embedded", help="registry formats (default: the development registry)")
    ini.add_argument("--subject", help="registry formats: the value subject (default: <topic>-value)")
    ini.add_argument("--sample", type=int, default=1000, help="json: records to sample (default 1000)")
    ini.add_argument("--force", action="store_true", help="replace an existing file")
    ini.set_defaults(func=cmd_init)

    pl = sub.add_parser("pipelines", help="every pipeline: topic, table, committed offsets, lag, last run, validation")
    pl.set_defaults(func=cmd_pipelines)

    sh = sub.add_parser("show", help="a pipeline's settings (secrets masked), its table's schema and partition spec")
    sh.add_argument("pipeline")
    sh.set_defaults(func=cmd_show)

    pv = sub.add_parser("preview", help="rows of a pipeline's table (or quarantine) as a text table")
    pv.add_argument("pipeline")
    pv.add_argument("--quarantine", action="store_true", help="the quarantine table's rows")
    pv.add_argument("--limit", type=int, default=20, help="at most N rows (default 20)")
    pv.add_argument("--where", help="a row filter, e.g. \"kind = 'view' and amount > 10\" (pyiceberg's syntax)")
    pv.add_argument("--columns", help="comma-separated columns to show (default: all)")
    pv.set_defaults(func=cmd_preview)

    sq = sub.add_parser("sql", help="Spark SQL against a pipeline's Iceberg catalog: one statement (-e) or a shell "
                                    "reading statements ended by ';'")
    sq.add_argument("pipeline")
    sq.add_argument("-e", "--execute", metavar="STATEMENT", help="run this one statement and print its result")
    sq.set_defaults(func=cmd_sql)

    r = sub.add_parser("registry", help="the development Schema Registry on loopback (demos and tests only)")
    r.add_argument("action", choices=("up", "down", "status"))
    r.set_defaults(func=cmd_dev_service)

    cs = sub.add_parser("connect-server", help="this home's local Spark Connect server (Spark's own, on loopback)")
    cs.add_argument("action", choices=("up", "down", "status"))
    cs.set_defaults(func=cmd_dev_service)

    s = sub.add_parser("produce-sample", help="write sample events to a pipeline's topic (JSON, a registry format, or "
                                                 "Debezium change events)")
    s.add_argument("--pipeline", help="default: demo (json), orders_cdc (debezium), orders_<format> otherwise")
    s.add_argument("--format", choices=SAMPLE_FORMATS, default="json",
                   help="avro/protobuf/json_schema: sample orders by confluent-kafka's serializers via the registry; "
                        "debezium: Debezium change events of orders (snapshot, inserts, updates, deletes), in JSON or "
                        "Avro as the pipeline reads them")
    s.add_argument("--count", type=int, default=100_000)
    s.add_argument("--topic", help="the topic to write to: one of the pipeline's (default: its topic; needed when it "
                                   "reads several)")
    s.add_argument("--bad-every", type=int, default=0, help="make every K-th record bad (quarantine demo)")
    s.set_defaults(func=cmd_produce_sample)

    bf = sub.add_parser("backfill", help="ingest history [from, to) in slices (default [earliest, cutover))")
    bf.add_argument("pipeline")
    bf.add_argument("--from", dest="start", help='offsets JSON, e.g. {"topic": {"0": 0}}')
    bf.add_argument("--to", dest="end", help="offsets JSON (default: the recorded cutover)")
    bf.add_argument("--from-time", metavar="ISO_TIME",
                    help="instead of --from: each partition's first record at or after this time "
                         "(e.g. 2026-01-31T12:00:00Z; no zone: UTC)")
    bf.add_argument("--to-time", metavar="ISO_TIME", help="instead of --to: up to (not including) each partition's "
                                                         "first record at or after this time")
    bf.add_argument("--slices", type=int)
    bf.add_argument("--max-rate", type=int, metavar="OFFSETS_PER_S",
                    help="rate limit for this backfill (default: the pipeline's backfill.max_offsets_per_second)")
    bf.add_argument("--lanes", type=int, default=1, metavar="N",
                    help="parallel spark-submit jobs sharing the slices (as the backfill DAG's lanes; default 1)")
    bf.add_argument("--topics", metavar="A,B", help="of a pipeline of several topics, backfill only these "
                                                   "(default: all)")
    bf.add_argument("--on-committed", choices=("skip", "fail", "replay"), default="skip",
                    help="offsets of the range already committed: skip them (default), fail, or replay them with the "
                         "pipeline as it is now (as `tailfill replay`)")
    _spark_options(bf)
    bf.set_defaults(func=cmd_backfill)

    rp = sub.add_parser("replay", help="re-read committed offsets [from, to) (or a run's) with the pipeline as it is "
                                       "now and replace their rows, one atomic commit per batch")
    rp.add_argument("pipeline")
    rp.add_argument("--from", dest="start", help='offsets JSON, e.g. {"topic": {"0": 0}} (default: 0)')
    rp.add_argument("--to", dest="end", help="offsets JSON (default: the end of the committed offsets)")
    rp.add_argument("--run", help="the run id of a past backfill or tail: replay the offsets it committed")
    rp.set_defaults(func=cmd_replay)

    t = sub.add_parser("tail", help="ingest from the committed position onwards")
    t.add_argument("pipeline")
    t.add_argument("--once", action="store_true", help="ingest what is there now, then stop")
    t.add_argument("--stop-after", type=float, help="with the processing-time trigger: stop after N seconds")
    _spark_options(t)
    t.set_defaults(func=cmd_tail)

    sp = sub.add_parser("stop-tail", help="stop a running tail between batches (as Ctrl-C does)")
    sp.add_argument("pipeline")
    sp.set_defaults(func=cmd_stop_tail)

    st = sub.add_parser("status", help="committed ranges, gaps, cutover, high watermark and lag per partition")
    st.add_argument("pipeline")
    st.set_defaults(func=cmd_status)

    pf = sub.add_parser("preflight", help="broker, topic, partitions, warehouse, catalog and retention checks")
    pf.add_argument("pipeline")
    pf.add_argument("--mode", choices=("backfill", "tail"), default="tail")
    pf.set_defaults(func=cmd_preflight)

    v = sub.add_parser("validate", help="check every committed offset is stored exactly once (exit 1 if not)")
    v.add_argument("pipeline")
    scope = v.add_mutually_exclusive_group()
    scope.add_argument("--run", help="the run id to check (default: the latest run that committed)")
    scope.add_argument("--all", action="store_true", help="every run and the whole table")
    v.set_defaults(func=cmd_validate)

    m = sub.add_parser("maintain", help="compact small files, expire old snapshots (audit kept), remove orphans")
    m.add_argument("pipeline")
    m.add_argument("--expire-older-than", metavar="DURATION", help="e.g. 7d, 12h (default: the YAML's)")
    m.add_argument("--keep-last", type=int, metavar="N", help="snapshots always kept (default: the YAML's)")
    m.set_defaults(func=cmd_maintain)

    rs = sub.add_parser("reset", help="drop a pipeline's tables, run state, validation and checkpoints (asks first)")
    rs.add_argument("pipeline")
    rs.add_argument("--yes", action="store_true", help="do not ask")
    rs.set_defaults(func=cmd_reset)

    d = sub.add_parser("demo", help="broker and this home's Spark Connect server up (left running), sample data, "
                                    "backfill, tail, validate, status")
    d.add_argument("--pipeline", default="demo")
    d.add_argument("--count", type=int, default=100_000)
    d.add_argument("--tail-count", type=int, default=20_000)
    d.add_argument("--bad-every", type=int, default=5_000)
    d.set_defaults(func=cmd_demo)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the command; it owns the jobs it starts (:class:`JobOwner`: SIGINT and SIGTERM stop them between batches).
    Every failure ends in one line on stderr with its cause and fix; a traceback goes to a log file, never the
    terminal."""
    args = build_parser().parse_args(argv)
    command_log = args.command_log = CommandLog(_command_log_path(args.command))
    try:
        with command_log.diverting(), JobOwner(f"the {args.command}", _err) as args.owner:
            return args.func(args)
    except (TailfillError, ValueError) as exc:  # ValueError: malformed offsets JSON
        _err(f"error: {exc}" + (f" (fix: {exc.fix})" if isinstance(exc, TailfillError) and not _fix_said(exc)
                                else ""))
        return 2
    except Signalled as exc:
        _err(f"tailfill {args.command} stopped on {exc}")
        return 128 + exc.signum
    except KeyboardInterrupt:
        _err("interrupted")
        return 130
    except Exception as exc:  # not one of ours: a bug or a failure nobody named; never exit 1 (a verdict)
        info = ErrorInfo.of(exc)
        where = command_log.write(traceback.format_exc())
        _err(f"error: unexpected {info} (fix: {info.fix}; its traceback: {where})")
        return 2


def _fix_said(exc: TailfillError) -> bool:
    """Whether the message already says its fix (most of Tailfill's do, in their own words)."""
    return "fix:" in str(exc) or "(fix" in str(exc) or exc.fix == TailfillError.fix


def _command_log_path(command: str) -> Path:
    """``$TAILFILL_HOME/logs/commands/<command>-<time>-<pid>.log``: the command's own log (:class:`CommandLog`)."""
    from tailfill.run.runtime import log_dir

    return log_dir("commands", f"{command}-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}").with_suffix(".log")


if __name__ == "__main__":
    sys.exit(main())
