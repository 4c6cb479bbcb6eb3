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
from pyiceberg.table import Table

from tailfill.config import PipelineConfig, SourceConfig
from tailfill.errors import ConfigError, LakeError
from tailfill.formats.base import Format
from tailfill.formats.registry import pipeline_format
from tailfill.formats.schema_registry import RegistryClient
from tailfill.lake.batch_files import DEFAULT_TARGET_FILE_BYTES
from tailfill.lake.commit import Committer
from tailfill.lake.keyed import KeyedCommitter, StateMerger
from tailfill.lake.tables import (
    Tables,
    close_catalog,
    load_catalog,
    open_state_table,
    open_tables,
    provision_state_table,
    provision_tables,
)
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
        return pipeline_format(self.cfg, self.registry)

    @cached_property
    def catalog(self) -> Catalog:
        return load_catalog(self.cfg.target)

    def open_tables(self) -> Tables | None:
        """The data and quarantine tables as they are now; None when they were never made. Changes nothing."""
        self._one_table()
        return open_tables(self.catalog, self.cfg.target)

    def _one_table(self) -> None:
        if self.cfg.target.routed:
            raise ConfigError(f"pipeline {self.name} routes its topics to tables by {self.cfg.target.table!r}: a "
                              "table's work is its route's (tailfill.pipeline.routes), not the routed pipeline's")

    def provision_tables(self) -> Tables:
        """The tables, made if missing and evolved to the pipeline's settings (the planner's, before a run); a
        keyed pipeline's state table too."""
        self._one_table()
        tables = provision_tables(self.catalog, self.cfg.target, self.format)
        if self.keyed:
            provision_state_table(self.catalog, self.cfg.target, tables.data)
        return tables

    @property
    def keyed(self) -> bool:
        """Whether the target is keyed (``target.mode: upsert``): a state table beside the change log."""
        return self.cfg.target.keyed

    def open_state_table(self) -> Table | None:
        """A keyed pipeline's state table as it is now (None: never made, or not keyed). Changes nothing."""
        return open_state_table(self.catalog, self.cfg.target) if self.keyed else None

    def committer(self, tables: Tables) -> Committer:
        """What commits a run's batches to ``tables`` (and, keyed, merges them into the state table)."""
        file_bytes = self.cfg.maintenance.target_file_bytes if self.cfg.maintenance else DEFAULT_TARGET_FILE_BYTES
        if not self.keyed:
            return Committer(self.name, tables, self.fs, self.state, self.format.follows_writer_schema,
                             file_bytes)
        state = self.open_state_table()
        target = self.cfg.target
        if state is None:
            raise LakeError(f"the state table {target.namespace}.{target.state_name} was never made: run the planner "
                            "(tailfill backfill or tail) first")
        return KeyedCommitter(self.name, tables, self.fs, self.state, self.format.follows_writer_schema, file_bytes,
                              merger=StateMerger(state, self.fs, target.key, target.version_by, self.name,
                                                 target.on_truncate))

    def release_connections(self) -> None:
        """Close the catalog's idle connections and keep everything else: the catalog opens one again when next used
        (a job that waits its turn holds none meanwhile)."""
        if "catalog" in self.__dict__:
            close_catalog(self.__dict__["catalog"])

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
