"""The ids of the topics a table was fed from, kept in its properties beside the cutover.

Recorded by the planner the first time it sees each topic (a table made before ids were kept gets them at its
next plan), never replaced: a topic whose id changes was deleted and created again, and every plan refuses it
(:func:`tailfill.source.topic_ids.check_same_topics`).
"""

from __future__ import annotations

import json
from collections.abc import Callable

from pyiceberg.table import Table

from tailfill.lake.ledger import record_properties

TOPIC_IDS_PROP = "tailfill.topic-ids"


def read_topic_ids(table: Table) -> dict[str, str]:
    """``{topic: id}`` as recorded on ``table`` (empty: none recorded yet)."""
    text = table.properties.get(TOPIC_IDS_PROP)
    return json.loads(text) if text else {}


def with_topic_ids(ids: dict[str, str]) -> Callable[[dict[str, str]], dict[str, str]]:
    """The properties that add ``ids`` of topics a table's ``properties`` have none for (none: nothing to add)."""

    def added(props: dict[str, str]) -> dict[str, str]:
        recorded = json.loads(props.get(TOPIC_IDS_PROP) or "{}")
        merged = {**ids, **recorded}
        return {TOPIC_IDS_PROP: json.dumps(merged, sort_keys=True)} if merged != recorded else {}

    return added


def record_topic_ids(table: Table, ids: dict[str, str]) -> None:
    """Add the ids of topics ``table`` has none for (a recorded id is never replaced)."""
    added = with_topic_ids(ids)
    record_properties(table, f"the topic ids {json.dumps(ids, sort_keys=True)}", lambda props: (added(props), None))
