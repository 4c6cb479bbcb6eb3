"""OpenLineage events of Tailfill's tasks, through Airflow's OpenLineage provider.

With ``apache-airflow-providers-openlineage`` installed and a transport configured (``[openlineage]
transport``), the provider emits a START and a COMPLETE event for every task; each ingest and validate
task adds the data it moved: the Kafka topic as its input (namespace ``kafka://<bootstrap servers>``,
name the topic) and the Iceberg table as its output (namespace ``iceberg://<catalog>``, name
``<namespace>.<table>``) with the table's schema and the rows the task wrote or checked. Without the
provider, or with OpenLineage disabled, nothing is emitted and nothing fails.
"""

from __future__ import annotations

import logging

from tailfill.config import PipelineConfig

log = logging.getLogger(__name__)


def kafka_dataset_names(cfg: PipelineConfig) -> tuple[str, list[str]]:
    """OpenLineage's namespace and names of the pipeline's topics (the first bootstrap server names the cluster;
    a pattern's dataset is named by the pattern)."""
    first = cfg.source.bootstrap_servers.split(",")[0].strip()
    names = cfg.source.topics or [cfg.source.topic or cfg.source.subscription]
    return f"kafka://{first}", names


def iceberg_dataset_name(cfg: PipelineConfig) -> tuple[str, str]:
    """OpenLineage's namespace and name of the pipeline's table."""
    return f"iceberg://{cfg.target.catalog.name}", f"{cfg.target.namespace}.{cfg.target.table}"


def emit_lineage(cfg: PipelineConfig, rows: int, quarantined: int) -> bool:
    """Attribute the topic (input) and the table (output, with its schema and the ``rows`` this task wrote or
    checked) to the running task. False when OpenLineage is not installed or not active."""
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
    emit_dataset_lineage(inputs=[InputDataset(namespace=source_ns, name=topic) for topic in topics],
                         outputs=[OutputDataset(namespace=table_ns, name=table, facets={"schema": schema},
                                                outputFacets={"outputStatistics": stats})])
    log.info("lineage: %s %s -> %s %s (%s rows, %s quarantined)", source_ns, ", ".join(topics), table_ns, table,
             f"{rows:,}", f"{quarantined:,}")
    return True


def table_columns(cfg: PipelineConfig) -> list[tuple[str, str]]:
    """The data table's columns and their Iceberg types, as the table is now (none while it was never made)."""
    from tailfill.pipeline.handle import open_pipeline

    with open_pipeline(cfg) as pipeline:
        tables = pipeline.open_tables()
        return [] if tables is None else [(f.name, str(f.field_type)) for f in tables.data.schema().fields]
