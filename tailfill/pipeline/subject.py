"""The columns a registry format makes of a subject's latest schema, before any pipeline exists (``tailfill init``).

The edge knows the formats by name (:mod:`tailfill.formats.registry`); what lies above it asks here.
"""

from __future__ import annotations

import pyarrow as pa

from tailfill.config import FormatConfig, SchemaRegistryConfig
from tailfill.formats.registry import format_of
from tailfill.formats.schema_registry import RegistryClient


def subject_columns(fmt: str, topic: str, registry_url: str, subject: str | None = None) -> pa.Schema:
    """The data table's columns that format ``fmt`` makes of ``subject``'s latest version (default
    ``<topic>-value``) in the registry at ``registry_url``; RegistryError if it cannot be read."""
    registry = SchemaRegistryConfig(url=registry_url, subject=subject)
    made = format_of(FormatConfig(type=fmt, schema_registry=registry), topic, RegistryClient(registry))
    return made.new_table().columns
