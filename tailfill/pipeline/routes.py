"""One pipeline, a table per topic: the routes of a pipeline whose ``target.table`` is a template.

Each table the template gives is a **route**: a pipeline of its own, made from the routed one's settings with
its name (``<pipeline>__<table>``), its topics and its table. So each table has its own ledger, cutover, schema
(and key), run state and proof, and everything that runs one pipeline runs a route. Routes are made at the edge,
from the topics the broker has now (:func:`resolve_routes`), and travel as their ref
(``<file>#<table>:<topic>,<topic>``), which :func:`route_config` turns back into the same route anywhere,
without the broker.

The tables a pipeline has routed to are remembered in its run state (``routes.json``): a table whose topics
are all gone stays known (its rows are kept, :attr:`RouteSet.gone`), and a table that appears after the
pipeline's first run is new (:attr:`RouteSet.new`): its tail reads its topics from their earliest offsets.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field

from pydantic import ValidationError

from tailfill.config import PipelineConfig
from tailfill.errors import ConfigError
from tailfill.pipeline.checks import format_problems
from tailfill.values.table_template import TABLE_NAME, route_suffix, table_for

ROUTES_KEY = "routes.json"  # in the routed pipeline's own state folder: every table it has routed to


@dataclass(frozen=True)
class Route:
    """One table of a routed pipeline: its name, its topics, and the pipeline that runs it."""

    table: str
    topics: tuple[str, ...]
    cfg: PipelineConfig


@dataclass(frozen=True)
class RouteSet:
    """A routed pipeline's tables now: those with topics on the broker (``routes``), the tables among them that
    came after its first run (``new``), and known tables whose topics are all gone (``gone``, topics as last
    seen)."""

    routes: list[Route]
    new: frozenset[str] = frozenset()
    gone: dict[str, tuple[str, ...]] = field(default_factory=dict)
    known: dict[str, tuple[str, ...]] = field(default_factory=dict)  # the tables routed to before, as read

    def notes(self, bootstrap: str) -> list[str]:
        """One line per new table and per table whose topics are gone."""
        out = [f"new table {r.table} for topic{'s' * (len(r.topics) > 1)} {', '.join(r.topics)}: the tail reads "
               f"{'them' if len(r.topics) > 1 else 'it'} from the earliest offset" for r in self.routes
               if r.table in self.new]
        out += [f"table {table}: its topic{'s' * (len(topics) > 1)} {', '.join(topics)} "
                f"{'are' if len(topics) > 1 else 'is'} gone from {bootstrap}; the table and its rows stay"
                for table, topics in sorted(self.gone.items())]
        return out


def route_name(pipeline: str, table: str) -> str:
    """The name of the route of ``pipeline`` into ``table`` (its run state's and validation's folder)."""
    return f"{pipeline}__{route_suffix(table)}"


def route_config(cfg: PipelineConfig, table: str, topics: Iterable[str]) -> PipelineConfig:
    """The pipeline that runs ``cfg``'s table ``table`` from ``topics``: checked as any pipeline is, a problem
    reported naming the table."""
    topics = tuple(topics)
    if not cfg.target.routed or cfg.route is not None:
        raise ConfigError(f"pipeline {cfg.name} does not route topics to tables (target.table {cfg.target.table!r})")
    if not topics:
        raise ConfigError(f"pipeline {cfg.name}: table {table} has no topic")
    key = route_key(cfg, table, topics)
    where = f"{cfg.path or cfg.name}: table {table} (topics {', '.join(topics)})" + (
        f", by routes.{key}" if key is not None else "")
    data = cfg.model_dump()
    data["name"] = route_name(cfg.name, table)
    data["target"]["table"] = table
    data["routes"] = {}
    data["source"].update(topic=topics[0] if len(topics) == 1 else None,
                          topics=list(topics) if len(topics) > 1 else None, topic_pattern=None)
    try:
        route = PipelineConfig.model_validate(cfg.routes[key].applied(data) if key is not None else data)
    except ValueError as exc:  # a ValidationError, or a route's setting that has nothing to apply to
        raise ConfigError(f"{where}: {_why(exc)}") from None
    problems = format_problems(route)
    if problems:
        fix = "" if key is not None or not cfg.routes else " (fix: give the table an entry under routes)"
        raise ConfigError(f"{where}: {'; '.join(problems)}{fix}")
    return route.model_copy(update={"path": cfg.path, "route": f"{table}:{','.join(topics)}"})


def route_key(cfg: PipelineConfig, table: str, topics: tuple[str, ...]) -> str | None:
    """The key of ``cfg.routes``' entry for ``table`` (by its name, or one of its ``topics``): None without one;
    :class:`ConfigError` when several apply."""
    keys = [key for key in cfg.routes if key == table or key in topics]
    if len(keys) > 1:
        raise ConfigError(f"{cfg.path or cfg.name}: table {table} (topics {', '.join(topics)}): routes "
                          f"{' and '.join(keys)} both apply to it (fix: keep one entry per table)")
    return keys[0] if keys else None


def _why(exc: ValueError) -> str:
    if isinstance(exc, ValidationError):
        return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg'].removeprefix('Value error, ')}"
                         for e in exc.errors())
    return str(exc)


def route_problems(cfg: PipelineConfig) -> list[str]:
    """What is wrong with each of a routed pipeline's ``routes`` (``routes.<key>: field: problem`` lines), each
    checked as the pipeline of a table of one topic would be. A table without an entry is checked as its topics are
    routed (:func:`tailfill.pipeline.routes.route_config`)."""
    out = []
    for key in cfg.routes:
        try:
            table = key if TABLE_NAME.match(key) else table_for(cfg.target.table, key)
        except ValueError as exc:
            out.append(f"routes.{key}: {exc}")
            continue
        try:
            route_config(cfg, table, (key,) if key != table else (f"{key}-topic",))
        except ConfigError as exc:
            text = str(exc).removeprefix(f"{cfg.path or cfg.name}: ")
            out.append(f"routes.{key}: {text.split(f', by routes.{key}: ', 1)[-1]}")
    return out


def unused_routes(cfg: PipelineConfig, routes: RouteSet) -> list[str]:
    """One line per entry of ``cfg.routes`` that applies to no table the pipeline routes to now."""
    tables = {**{r.table: r.topics for r in routes.routes}, **routes.gone}
    used = {key for key in cfg.routes for table, topics in tables.items() if key == table or key in topics}
    return [f"routes.{key} applies to no table of {cfg.name} now (tables: {', '.join(sorted(tables)) or 'none'}); "
            "it applies once a topic it names appears" for key in cfg.routes if key not in used]


def parse_route(text: str) -> tuple[str, tuple[str, ...]]:
    """A ref's route part (``<table>:<topic>,<topic>``) as its table and topics."""
    table, sep, topics = text.partition(":")
    names = tuple(t for t in topics.split(",") if t)
    if not sep or not table or not names:
        raise ConfigError(f"route {text!r}: expected <table>:<topic>[,<topic>…]")
    return table, names


def group_topics(cfg: PipelineConfig, topics: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """``topics`` of ``cfg``'s source by the table its template routes each to, tables and topics sorted."""
    out: dict[str, list[str]] = {}
    for topic in sorted(set(topics)):
        if not cfg.source.matches(topic):
            continue
        try:
            out.setdefault(table_for(cfg.target.table, topic), []).append(topic)
        except ValueError as exc:
            raise ConfigError(f"{cfg.path or cfg.name}: target.table: {exc}") from None
    return {table: tuple(names) for table, names in sorted(out.items())}


def routes_of(cfg: PipelineConfig, topics: Iterable[str], known: dict[str, tuple[str, ...]] | None = None,
              ) -> RouteSet:
    """The route set of ``cfg`` over the broker's ``topics``, given the tables it routed to before (``known``:
    ``None`` or empty when it never ran)."""
    grouped = group_topics(cfg, topics)
    known = known or {}
    routes = [Route(table, names, route_config(cfg, table, names)) for table, names in grouped.items()]
    new = frozenset(grouped) - frozenset(known) if known else frozenset()
    gone = {table: names for table, names in known.items() if table not in grouped}
    return RouteSet(routes, new, gone, known)


def read_known(raw: str | None) -> dict[str, tuple[str, ...]]:
    """The tables a pipeline routed to before, from its ``routes.json`` text (None: none yet)."""
    if not raw:
        return {}
    return {table: tuple(topics) for table, topics in json.loads(raw).items()}


def known_text(routes: RouteSet) -> str:
    """``routes.json`` after ``routes``: every table known, each with the topics last seen routing to it."""
    merged = {**{t: list(n) for t, n in routes.known.items()}, **{r.table: list(r.topics) for r in routes.routes}}
    return json.dumps(dict(sorted(merged.items())), indent=1)


def routes_asked(routes: list[Route], asked: Iterable[str]) -> list[tuple[Route, tuple[str, ...]]]:
    """The routes a run limited to the topics ``asked`` covers, each with its topics among them (every route,
    with no limit, when ``asked`` is empty); a topic that no route reads is refused, naming those they read."""
    asked = tuple(asked)
    if not asked:
        return [(route, ()) for route in routes]
    have = sorted(t for route in routes for t in route.topics)
    unknown = [t for t in asked if t not in have]
    if unknown:
        raise ConfigError(f"topics {', '.join(map(repr, unknown))}: no table of the pipeline reads "
                          f"{'it' if len(unknown) == 1 else 'them'} (fix: name some of: {', '.join(have)})")
    out = [(route, tuple(t for t in route.topics if t in asked)) for route in routes]
    return [(route, mine) for route, mine in out if mine]


def lane_shares(lanes: int, tables: int) -> list[int]:
    """How many of ``lanes`` each of ``tables`` gets: dealt in turn, at least one each."""
    if tables <= 0:
        return []
    return [max(1, lanes // tables + (1 if i < lanes % tables else 0)) for i in range(tables)]
