"""A backfill's inputs checked before any work: what *From* and *To* accept, a start after its end, unknown keys.

*From* is ``earliest`` or offsets as JSON, *To* is ``cutover`` or offsets as JSON
(``{"<topic>": {"<partition>": <offset>}}``). :func:`bound_pattern` says the same as a JSON-schema
``pattern``, which Airflow checks when a run is triggered (the form and the REST API refuse a value
that does not match before a run exists). What a field-by-field schema cannot say — a start after its
end, a key the form does not have — :func:`check_backfill_conf` refuses in one line, before the broker is
asked anything. Pure: no broker, no table, no Airflow.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

from tailfill.errors import ConfigError
from tailfill.offsets import PartitionOffsets

FROM_KEYWORD, TO_KEYWORD = "earliest", "cutover"
BOUNDS = {"from_offsets": ("From", FROM_KEYWORD), "to_offsets": ("To", TO_KEYWORD)}  # field → title, keyword
OFFSETS_EXAMPLE = '{"<topic>": {"0": 1000, "1": 1000}}'

_TOPIC = r'"[A-Za-z0-9._-]+"'  # Kafka's topic names
_PARTITION = r'"[0-9]+"\s*:\s*[0-9]+'
_PARTITIONS = rf"\{{\s*{_PARTITION}\s*(?:,\s*{_PARTITION}\s*)*\}}"
_OFFSETS = rf"\s*\{{\s*{_TOPIC}\s*:\s*{_PARTITIONS}\s*(?:,\s*{_TOPIC}\s*:\s*{_PARTITIONS}\s*)*\}}\s*"


def bound_pattern(keyword: str) -> str:
    """A JSON-schema ``pattern`` for a bound: ``keyword``, or offsets JSON (whole offsets, partitions as strings)."""
    return rf"^(?:{keyword}|{_OFFSETS})$"


def bound_offsets(param: str, text: Any) -> PartitionOffsets | None:
    """A bound field's value (``from_offsets`` or ``to_offsets``): None for its keyword (or empty), else its
    offsets; a value that is neither is refused in one line naming the field and what it accepts."""
    title, keyword = BOUNDS[param]
    if text in (None, "", keyword):
        return None
    try:
        return PartitionOffsets.from_json(str(text))
    except (ValueError, TypeError, AttributeError) as exc:
        raise ConfigError(f"{title} ({param}): {exc} (fix: `{keyword}`, or offsets as a JSON object like "
                          f"{OFFSETS_EXAMPLE})") from None


def refuse_start_after_end(start: PartitionOffsets | None, end: PartitionOffsets | None) -> None:
    """Refuse bounds where a partition of both starts after its end, naming each (``t[0] from 900 to 100``)."""
    if start is None or end is None:
        return
    backwards = [f"{tp} from {start[tp]:,} to {end[tp]:,}" for tp in sorted(end) if tp in start and start[tp] > end[tp]]
    if backwards:
        raise ConfigError(f"backfill bounds: a start after its end: {'; '.join(backwards)} (fix: swap From and To)")


def unknown_keys(conf: Mapping[str, Any], known: Iterable[str]) -> str | None:
    """The keys of ``conf`` that are not among ``known``, each with the known key it is closest to; None if none."""
    known = sorted(known)
    unknown = sorted(k for k in conf if k not in known)
    if not unknown:
        return None
    named = []
    for key in unknown:
        close = difflib.get_close_matches(key, known, n=1)
        named.append(repr(key) + (f" (did you mean {close[0]!r}?)" if close else ""))
    return f"unknown key{'s' if len(unknown) > 1 else ''} {', '.join(named)}; the known keys are {', '.join(known)}"


def check_backfill_conf(conf: Mapping[str, Any] | None, known: Iterable[str]) -> None:
    """Refuse a backfill's run conf (what was sent when it was triggered) with a key the form does not have, a
    bound that is neither its keyword nor offsets JSON, or a start after its end — one line each, with the fix."""
    conf = conf or {}
    if problem := unknown_keys(conf, known):
        raise ConfigError(f"backfill conf: {problem} (fix: trigger the run again with the known keys only)")
    refuse_start_after_end(*(bound_offsets(param, conf.get(param)) for param in BOUNDS))
