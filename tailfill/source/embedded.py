"""Where the embedded development broker listens: ``bootstrap_servers: embedded`` resolved once.

``tailfill broker up`` (:mod:`tailfill.dev.broker`) starts a broker and records its address in
``$TAILFILL_HOME/broker.json`` (``tailfill registry up``: the development Schema Registry, in
``registry.json``); the planner reads it here, so that production code never imports
the development tools. Executors get the resolved address, never ``embedded``.
"""

from __future__ import annotations

from pathlib import Path

from tailfill.config import EMBEDDED, PipelineConfig
from tailfill.errors import BrokerError, RegistryError
from tailfill.plumbing.detached import running
from tailfill.settings import settings


def state_file(home: Path) -> Path:
    """The embedded broker's address file under ``home``."""
    return home / "broker.json"


def broker_state(home: Path | None = None) -> dict | None:
    """The running embedded broker's ``{pid, port, bootstrap_servers}``, or None."""
    return running(state_file(home or settings().home))


def resolve_bootstrap(value: str) -> str:
    """Turn ``embedded`` into the running embedded broker's address; other values pass through."""
    return _resolve(value, broker_state, "bootstrap_servers", BrokerError, "the embedded broker", "broker")


def resolved(cfg: PipelineConfig) -> PipelineConfig:
    """``cfg`` with an ``embedded`` broker (and Schema Registry) replaced by its address: done once, on the driver."""
    registry = cfg.format.schema_registry
    if registry is not None and registry.url == EMBEDDED:
        fmt = cfg.format.model_copy(update={"schema_registry": registry.model_copy(
            update={"url": resolve_registry(EMBEDDED)})})
        cfg = cfg.model_copy(update={"format": fmt})
    if cfg.source.bootstrap_servers != EMBEDDED:
        return cfg
    source = cfg.source.model_copy(update={"bootstrap_servers": resolve_bootstrap(EMBEDDED)})
    return cfg.model_copy(update={"source": source})


def registry_state_file(home: Path) -> Path:
    """The development Schema Registry's address file under ``home``."""
    return home / "registry.json"


def registry_state(home: Path | None = None) -> dict | None:
    """The running development registry's ``{pid, port, url}``, or None."""
    return running(registry_state_file(home or settings().home))


def resolve_registry(value: str) -> str:
    """Turn ``embedded`` into the running development registry's URL; other values pass through."""
    return _resolve(value, registry_state, "url", RegistryError, "the development Schema Registry", "registry")


def _resolve(value: str, state_of, key: str, error: type[Exception], what: str, command: str) -> str:
    """``value``, or for ``embedded`` the ``key`` of the running development service ``state_of`` reads."""
    if value != EMBEDDED:
        return value
    state = state_of()
    if not state:
        raise error(f"the pipeline uses {what}, but none is running for TAILFILL_HOME={settings().home} "
                    f"(fix: run `tailfill {command} up`)")
    return state[key]
