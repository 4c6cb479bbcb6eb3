"""The Kafka topic as the DAGs' input asset, and OpenLineage events of Tailfill's tasks through Airflow's OpenLineage
provider.

The ingest tasks declare the pipeline's topics as their inlets (:func:`topic_assets`, ``kafka://<broker>/<topic>``)
beside the table the validations update. With ``apache-airflow-providers-openlineage`` installed and a transport
configured (``[openlineage] transport``), the provider emits a START and a COMPLETE event for every task; each
ingest and validate task adds the data it moved, on a RUNNING event as soon as it is known and on its COMPLETE
event: the Kafka topic as its input (namespace ``kafka://<first bootstrap server>``, name the topic) and the Iceberg
table as its output (namespace ``iceberg://<catalog>``, name ``<namespace>.<table>``) with the table's schema and the
rows the task wrote or checked. The embedded development broker is named by its address, as any broker. Without the
provider, or with OpenLineage disabled, nothing is emitted and nothing fails.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import quote

from airflow.sdk import Asset

from tailfill.config import EMBEDDED, PipelineConfig
from tailfill.source.embedded import broker_state

log = logging.getLogger(__name__)


def broker_address(cfg: PipelineConfig) -> str:
    """The first bootstrap server of the pipeline's broker; of the embedded broker its address while it runs
    (``embedded`` while none does)."""
    servers = cfg.source.bootstrap_servers
    if servers == EMBEDDED:
        state = broker_state()
        servers = state["bootstrap_servers"] if state else EMBEDDED
    return servers.split(",")[0].strip()


def kafka_dataset_names(cfg: PipelineConfig) -> tuple[str, list[str]]:
    """OpenLineage's namespace and names of the pipeline's topics (a pattern's dataset is named by the pattern)."""
    return f"kafka://{broker_address(cfg)}", cfg.source.topics or [cfg.source.topic or cfg.source.subscription]


def topic_assets(cfg: PipelineConfig) -> list[Asset]:
    """The pipeline's topics as Airflow assets, ``kafka://<broker>/<topic>``: what its ingest tasks read."""
    namespace, topics = kafka_dataset_names(cfg)
    return [Asset(name=f"{namespace}/{topic}", uri=f"{namespace}/{quote(topic, safe='.-_')}", group="kafka")
            for topic in topics]


def iceberg_dataset_name(cfg: PipelineConfig) -> tuple[str, str]:
    """OpenLineage's namespace and name of the pipeline's table."""
    return f"iceberg://{cfg.target.catalog.name}", f"{cfg.target.namespace}.{cfg.target.table}"


def emit_lineage(cfg: PipelineConfig, rows: int, quarantined: int, task: Any = None) -> bool:
    """Attribute the topic (input) and the table (output, with its schema and the ``rows`` this task wrote or
    checked) to the running ``task``: at once (a RUNNING event) and on its COMPLETE event. False when OpenLineage
    is not installed or not active."""
    try:
        from airflow.providers.openlineage.api import emit_dataset_lineage
        from airflow.providers.openlineage.api.core import is_openlineage_active
        from openlineage.client.event_v2 import InputDataset, OutputDataset
        from openlineage.client.facet_v2 import output_statistics_output_dataset, schema_dataset
    except ImportError:
        return False
    if not is_openlineage_active():
        return False
    source_ns, topics = kafka_dataset_names(cfg)
    table_ns, table = iceberg_dataset_name(cfg)
    schema = schema_dataset.SchemaDatasetFacet(
        fields=[schema_dataset.SchemaDatasetFacetFields(name=name, type=kind) for name, kind in table_columns(cfg)])
    stats = output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(rowCount=rows)
    inputs = [InputDataset(namespace=source_ns, name=topic) for topic in topics]
    outputs = [OutputDataset(namespace=table_ns, name=table, facets={"schema": schema},
                             outputFacets={"outputStatistics": stats})]
    emit_dataset_lineage(inputs=inputs, outputs=outputs)
    if task is not None:
        on_complete(task, inputs, outputs)
    log.info("lineage: %s %s -> %s %s (%s rows, %s quarantined)", source_ns, ", ".join(topics), table_ns, table,
             f"{rows:,}", f"{quarantined:,}")
    return True


def on_complete(task: Any, inputs: list, outputs: list) -> None:
    """Have the provider's COMPLETE event of the running ``task`` carry ``inputs`` and ``outputs``: it asks a task
    for ``get_openlineage_facets_on_complete`` when the task ends (its default extractor)."""
    from airflow.providers.openlineage.extractors import OperatorLineage

    task.get_openlineage_facets_on_complete = lambda _ti: OperatorLineage(inputs=inputs, outputs=outputs)


def table_columns(cfg: PipelineConfig) -> list[tuple[str, str]]:
    """The data table's columns and their Iceberg types, as the table is now (none while it was never made)."""
    from tailfill.pipeline.handle import open_pipeline

    with open_pipeline(cfg) as pipeline:
        tables = pipeline.open_tables()
        return [] if tables is None else [(f.name, str(f.field_type)) for f in tables.data.schema().fields]
