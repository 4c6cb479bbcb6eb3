"""The formats Tailfill knows, by the name a pipeline's ``format.type`` gives.

Adding a format (or an envelope around one, such as Debezium's) is one new module holding a
:class:`~tailfill.formats.base.Format` and its decoder, and one line here. Nothing else names a
format: the YAML is checked by the format's own rules, and the lake knows formats only by their
interface.
"""

from __future__ import annotations

from tailfill.config import FormatConfig, PipelineConfig
from tailfill.errors import ConfigError
from tailfill.formats.avro import AvroFormat
from tailfill.formats.base import Format
from tailfill.formats.changes import ChangeFormat
from tailfill.formats.json_fields import JsonFormat
from tailfill.formats.json_schema import JsonSchemaFormat
from tailfill.formats.protobuf import ProtobufFormat
from tailfill.formats.raw import RawFormat
from tailfill.formats.schema_registry import RegistryClient

FORMATS: dict[str, type[Format]] = {
    "json": JsonFormat,
    "raw": RawFormat,
    "avro": AvroFormat,
    "protobuf": ProtobufFormat,
    "json_schema": JsonSchemaFormat,
}


def format_class(name: str) -> type[Format]:
    """The format called ``name``; ConfigError naming the ones there are."""
    try:
        return FORMATS[name]
    except KeyError:
        raise ConfigError(f"format.type {name!r} is not a format Tailfill knows (formats: "
                          f"{', '.join(FORMATS)})") from None


def format_of(fmt: FormatConfig, topic: str, registry: RegistryClient | None = None) -> Format:
    """The format of a pipeline's ``format`` block (its topic names the default subjects), with the registry's
    client when it reads one."""
    return format_class(fmt.type)(fmt, topic, registry)


def pipeline_format(cfg: PipelineConfig, registry: RegistryClient | None = None) -> Format:
    """The format a pipeline's records are read with: its ``format`` block's, read as changes of keys when the
    target is keyed (``target.mode: upsert``)."""
    fmt = format_of(cfg.format, cfg.source.subscription, registry)
    if cfg.target.keyed:
        return ChangeFormat(fmt, cfg.target.key, cfg.format.envelope)
    return fmt
