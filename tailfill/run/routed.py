"""A routed pipeline's tables as a run sees them: resolved from the broker once per command, remembered.

:func:`resolve_routes` lists the topics the source has now and routes them (:mod:`tailfill.pipeline.routes`);
:func:`remember_routes` records the tables in the pipeline's run state, so that a table whose topics went away
is still reported and proven, and a table that came later is known as new. :func:`start_new_tables` records a
new table's cutover at its topics' earliest offsets: the tail, not a backfill, reads its history.
"""

from __future__ import annotations

from tailfill.config import PipelineConfig
from tailfill.lake.ledger import record_cutover
from tailfill.lake.topic_ids import with_topic_ids
from tailfill.pipeline.handle import open_pipeline
from tailfill.pipeline.routes import (
    ROUTES_KEY,
    Route,
    RouteSet,
    known_text,
    read_known,
    route_config,
    routes_of,
    unused_routes,
)
from tailfill.run.plan import source_state
from tailfill.run.write_test import ensure_writable
from tailfill.source.embedded import resolve_bootstrap
from tailfill.source.kafka import subscribed_partitions


def resolve_routes(cfg: PipelineConfig) -> RouteSet:
    """``cfg``'s tables now: its topics on the broker routed by its template, beside the tables it knew."""
    with open_pipeline(cfg) as base:
        topics = {tp.topic for tp in subscribed_partitions(base.kafka, base.resolved.source)}
        known = read_known(base.state.get(ROUTES_KEY))
    return routes_of(cfg, topics, known)


def remember_routes(cfg: PipelineConfig, routes: RouteSet) -> None:
    """Record ``routes``' tables (with the ones known before) in ``cfg``'s run state."""
    with open_pipeline(cfg) as base:
        base.state.put(ROUTES_KEY, known_text(routes))


def start_new_tables(routes: RouteSet) -> None:
    """Record each new table's cutover at its topics' earliest offsets (one that has a cutover keeps it)."""
    for route in routes.routes:
        if route.table in routes.new:
            with open_pipeline(route.cfg) as pipeline:
                ensure_writable(pipeline)  # as the table's own run would, before its tables are made
                state = source_state(pipeline, pipeline.provision_tables())
                if state.cutover is None:
                    record_cutover(state.data, state.marks.low, with_topic_ids(state.topic_ids))


def routes_for(cfg: PipelineConfig, run: str | None = None) -> tuple[list[Route], list[str]]:
    """The tables a command works on, and the lines to say about them: for a run (``run``: ``backfill`` or
    ``tail``) the tables of the topics on the broker now, remembered, a tail starting the new ones at their
    earliest offsets; for a command that only reads (``run`` None), the known tables whose topics are gone too."""
    if run is not None:  # a run writes the routes it found, in the pipeline's own state: tested first
        with open_pipeline(cfg) as base:
            ensure_writable(base)
    routes = resolve_routes(cfg)
    notes = routes.notes(resolve_bootstrap(cfg.source.bootstrap_servers)) + unused_routes(cfg, routes)
    if run == "tail":
        start_new_tables(routes)
    if run is not None:
        remember_routes(cfg, routes)
    found = routes.routes + (gone_routes(cfg, routes) if run is None else [])
    notes.append(f"{cfg.name} routes {cfg.source.described} to {len(found)} table(s) by {cfg.target.table!r}: "
                 + ", ".join(r.table for r in found))
    return found, notes


def gone_routes(cfg: PipelineConfig, routes: RouteSet) -> list[Route]:
    """The known tables whose topics are gone, as routes over their topics as last seen (to report and prove)."""
    return _as_routes(cfg, routes.gone)


def known_routes(cfg: PipelineConfig) -> list[Route]:
    """Every table ``cfg`` has routed to, over its topics as last seen (from its run state; no broker asked)."""
    with open_pipeline(cfg) as base:
        return _as_routes(cfg, read_known(base.state.get(ROUTES_KEY)))


def _as_routes(cfg: PipelineConfig, tables: dict[str, tuple[str, ...]]) -> list[Route]:
    return [Route(table, topics, route_config(cfg, table, topics)) for table, topics in sorted(tables.items())]
