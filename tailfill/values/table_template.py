"""``target.table`` as a template over the topic's name: which table a topic's records land in.

``{topic}`` is the whole topic name, ``{topic.N}`` its N-th dot-separated part (from 0); the rest of the
template is taken as written. In what a placeholder gives, dots and dashes become ``_`` (a topic may hold
both, a table name neither). So ``shop.public.orders`` goes to ``orders`` by ``{topic.2}``, to
``shop_public_orders`` by ``{topic}``, and to ``raw_orders`` by ``raw_{topic.2}``. Pure: no broker, no catalog.
"""

from __future__ import annotations

import re

PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
TABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PART = re.compile(r"^topic(?:\.(\d+))?$")


def is_template(table: str) -> bool:
    """Whether ``table`` routes by topic (it holds a placeholder) rather than naming one table."""
    return "{" in table or "}" in table


def template_problems(template: str) -> list[str]:
    """What is wrong with ``template`` (empty when nothing): unknown placeholders, stray braces."""
    problems = [f"placeholder {{{inner}}} is not {{topic}} or {{topic.N}} (N: a part's index from 0)"
                for inner in PLACEHOLDER.findall(template) if not _PART.match(inner)]
    if "{" in PLACEHOLDER.sub("", template) or "}" in PLACEHOLDER.sub("", template):
        problems.append("a brace without its pair")
    return problems


def table_for(template: str, topic: str) -> str:
    """The table ``topic`` lands in by ``template``; ValueError naming the topic when the template cannot place it
    (a part it lacks, a name no table can have)."""

    def part(m: re.Match[str]) -> str:
        index = _PART.match(m.group(1))
        if index is None:
            raise ValueError(f"placeholder {m.group(0)} is not {{topic}} or {{topic.N}}")
        if index.group(1) is None:
            value = topic
        else:
            parts = topic.split(".")
            n = int(index.group(1))
            if n >= len(parts):
                raise ValueError(f"topic {topic!r} has {len(parts)} dot-separated part(s), so no {m.group(0)}")
            value = parts[n]
        return value.replace(".", "_").replace("-", "_")

    table = PLACEHOLDER.sub(part, template)
    if not TABLE_NAME.match(table):
        raise ValueError(f"topic {topic!r} gives table name {table!r} by {template!r}: a table's name is letters, "
                         "digits and _, not starting with a digit")
    return table


def route_suffix(table: str) -> str:
    """A table's name as it goes into its route's pipeline name (lower case: a pipeline's names are)."""
    return table.lower()
