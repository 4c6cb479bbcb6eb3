"""A pipeline resolved once on the driver: :func:`open_pipeline` gives its :class:`Pipeline` handle.

The handle holds what every stage of a run asks of a pipeline, each made once, when first asked,
and handed down: the config (and, for what travels to Spark, the config with its ``embedded``
addresses resolved), the warehouse's filesystem, the shared run state, the Kafka consumer settings,
the Schema Registry client, the catalog and the tables. Nothing is asked that the caller does not
need: reading a table reaches neither the broker nor the registry. Reading the tables
never creates them (:meth:`Pipeline.open_tables`); the planner makes and evolves them
(:meth:`Pipeline.provision_tables`). Close the handle (or use it as a context manager) to let go of
the catalog's connections.
"""

from __future__ import annotations

from functools import cached_property

import pyarrow.fs as pafs
from pyiceberg.catalog import Catalog

from tailfill.config import PipelineConfig, SourceConfig
from tailfill.formats.base import Format
from tailfill.formats.registry import format_of
from tailfill.formats.schema_registry import RegistryClient
from tailfill.lake.commit import Committer
from tailfill.lake.tables import Tables, close_catalog, load_catalog, open_tables, provision_tables
from tailfill.pipeline.load import resolve_pipeline
from tailfill.plumbing.warehouse import filesystem
from tailfill.source.embedded import resolve_bootstrap, resolve_registry, resolved
from tailfill.source.kafka import consumer_config
from tailfill.state.store import StateStore


class Pipeline:
    """One pipeline's resolved config and the handles a run needs, each made on first use, once."""

    def __init__(self, cfg: PipelineConfig):
        self.cfg = cfg
        self.name = cfg.name

    @cached_property
    def resolved(self) -> PipelineConfig:
        """The config with an ``embedded`` broker and Schema Registry replaced by their addresses: what travels to
        the data source and to executors."""
        return resolved(self.cfg)

    @cached_property
    def shipped(self) -> str:
        """What executors build their context from (:mod:`tailfill.pipeline.executor`): the resolved config."""
        return self.resolved.to_json()

    @cached_property
    def source(self) -> SourceConfig:
        """The source block, its broker's address resolved."""
        return self.cfg.source.model_copy(update={"bootstrap_servers": resolve_bootstrap(
            self.cfg.source.bootstrap_servers)})

    @cached_property
    def fs(self) -> pafs.FileSystem:
        """The warehouse's filesystem (local or S3, with the pipeline's endpoint and credentials)."""
        return filesystem(self.cfg.target)

    @cached_property
    def state(self) -> StateStore:
        """The pipeline's shared run state (tail health, stop requests, batch reports, lanes, failures)."""
        return StateStore.of(self.cfg, self.fs)

    @cached_property
    def kafka(self) -> dict:
        """librdkafka settings of an assign-only consumer of the pipeline's topic (secrets from the environment)."""
        return consumer_config(self.source)

    @cached_property
    def registry(self) -> RegistryClient | None:
        """The Schema Registry's client (None for a format without one); it asks for each schema once."""
        registry = self.cfg.format.schema_registry
        if registry is None:
            return None
        return RegistryClient(registry.model_copy(update={"url": resolve_registry(registry.url)}))

    @cached_property
    def format(self) -> Format:
        """The pipeline's format (:mod:`tailfill.formats.registry`), with the registry's client if it reads one."""
        return format_of(self.cfg.format, self.cfg.source.topic, self.registry)

    @cached_property
    def catalog(self) -> Catalog:
        return load_catalog(self.cfg.target)

    def open_tables(self) -> Tables | None:
        """The data and quarantine tables as they are now; None when they were never made. Changes nothing."""
        return open_tables(self.catalog, self.cfg.target)

    def provision_tables(self) -> Tables:
        """The tables, made if missing and evolved to the pipeline's settings (the planner's, before a run)."""
        return provision_tables(self.catalog, self.cfg.target, self.format)

    def committer(self, tables: Tables) -> Committer:
        """What commits a run's batches to ``tables``."""
        return Committer(self.name, tables, self.fs, self.state, self.format.follows_writer_schema)

    def close(self) -> None:
        """Let go of the catalog's connections (the handle can be used again: it reopens what it needs)."""
        if "catalog" in self.__dict__:
            close_catalog(self.__dict__.pop("catalog"))

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def open_pipeline(pipeline: str | PipelineConfig) -> Pipeline:
    """The handle of ``pipeline``: a name (``pipelines/NAME.yaml``), a path to its YAML, or its loaded config."""
    return Pipeline(resolve_pipeline(pipeline) if isinstance(pipeline, str) else pipeline)
