"""No secret ever printed: the one place that turns text Tailfill shows into text without secrets.

Three kinds of secret are replaced with ``***`` (user names stay):

- the password of a URI: ``postgresql+psycopg2://user:***@host/db``;
- the value of a secret-looking key: ``password=``, ``token=``, ``secret=``, ``credential=`` (query
  strings, ``key=value`` text, ``'key': 'value'`` dict and JSON text);
- values known to be secret, wherever they appear: registered with :func:`register_secret` — by
  :func:`register_model_secrets` when a pipeline is loaded (the environment variables its
  ``*_env`` settings name, the passwords inside its URIs) and by the Airflow hook for the values
  of connections. Listeners (:func:`add_listener`: Airflow's secrets masker) get every one too.

Errors, progress lines, reports, XComs, failure records and the Spark job's output go through
:func:`redact_text` or :func:`redact_data` before anyone sees them.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote, unquote

from pydantic import BaseModel

MASK = "***"
# Shorter values are not masked wherever they appear (as Airflow's masker): they would mask ordinary
# words. A URI's password and a secret key's value are masked whatever their length.
MIN_SECRET_LENGTH = 5
# The software's own names, used as development passwords (compose's catalog is `tailfill:tailfill@`):
# masked inside URIs, never wherever they appear, or every path and name would go (Airflow skips "airflow").
NOT_MASKED_ALONE = frozenset({"tailfill", "airflow"})
SECRET_WORDS = ("password", "passwd", "pwd", "secret", "token", "credential")
_WORD = "|".join(SECRET_WORDS)

# scheme://user:password@ — the password runs to the last '@' before any whitespace or quote.
_URI_PASSWORD = re.compile(
    r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://(?P<user>[^\s:/?#@\"'<>]*):)(?P<pw>[^\s\"'<>]*)(?=@)")
# key=value (query strings, command lines, log text); a setting naming a variable (*_env) is no secret.
_KEY_VALUE = re.compile(rf"(?P<key>\b[\w.\-]*(?:{_WORD})[\w.\-]*)(?<!_env)=(?P<value>[^\s&;,\"'<>]+)", re.I)
# 'key': 'value' and "key": "value" (a dict's repr, JSON).
_QUOTED = re.compile(
    rf"(?P<key>([\"'])[\w.\-]*(?:{_WORD})[\w.\-]*(?<!_env)\2\s*[:=]\s*)(?P<q>[\"'])(?P<value>.*?)(?P=q)", re.I)

_lock = threading.Lock()
_known: set[str] = set()
_pattern: re.Pattern | None = None
_listeners: list[Callable[[str], Any]] = []


def register_secret(value: str | None) -> None:
    """Mask ``value`` (and its URL-encoded form) in everything redacted from now on, in this process."""
    global _pattern
    if not value or len(value) < MIN_SECRET_LENGTH or value.lower() in NOT_MASKED_ALONE:
        return
    forms = {value, quote(value, safe="")} - _known
    if not forms:
        return
    with _lock:
        _known.update(forms)
        _pattern = re.compile("|".join(re.escape(v) for v in sorted(_known, key=len, reverse=True)))
        listeners = list(_listeners)
    for listener in listeners:
        listener(value)


def add_listener(listener: Callable[[str], Any]) -> None:
    """Hand every secret registered (before and after this call) to ``listener`` too (Airflow's masker)."""
    with _lock:
        _listeners.append(listener)
        known = sorted(_known)
    for value in known:
        listener(value)


def uri_password(uri: str) -> str | None:
    """The password inside ``scheme://user:password@host``, decoded, or None (also when it is the user name,
    which may stay: such a password is masked only inside its URI)."""
    m = _URI_PASSWORD.search(uri)
    if not m or not m.group("pw") or m.group("pw") == m.group("user"):
        return None
    return unquote(m.group("pw"))


def _is_secret_env_field(name: str) -> bool:
    return name.endswith("_env") and any(w in name.lower() for w in SECRET_WORDS)


def secret_env_names(model: BaseModel) -> list[str]:
    """The environment variables a settings model names for secrets: every ``*_env`` field whose name
    says password, secret, token or credential (``password_env``, ``secret_key_env``, …), at any depth."""
    names: list[str] = []
    for field, value in model:
        if isinstance(value, BaseModel):
            names += secret_env_names(value)
        elif isinstance(value, str) and _is_secret_env_field(field):
            names.append(value)
    return names


def _strings(value: Any) -> list[str]:
    if isinstance(value, BaseModel):
        return [s for _, v in value for s in _strings(v)]
    if isinstance(value, Mapping):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list | tuple):
        return [s for v in value for s in _strings(v)]
    return [value] if isinstance(value, str) else []


def register_model_secrets(model: BaseModel, env: Mapping[str, str] | None = None) -> None:
    """Register a pipeline's secrets: the values of its secret ``*_env`` variables in ``env``
    (default: this process's environment) and the password of every URI among its settings."""
    env = os.environ if env is None else env
    for name in secret_env_names(model):
        register_secret(env.get(name))
    for text in _strings(model):
        if "://" in text:
            register_secret(uri_password(text))


def redact_uri(uri: str) -> str:
    """``uri`` with its password and secret query parameters masked (the user name stays)."""
    return redact_text(uri)


def redact_text(text: str) -> str:
    """``text`` with URI passwords, secret ``key=value`` pairs and every registered secret masked."""
    if not text:
        return text
    pattern = _pattern
    if pattern is not None:
        text = pattern.sub(MASK, text)
    text = _URI_PASSWORD.sub(lambda m: m.group("head") + MASK, text)
    text = _QUOTED.sub(lambda m: m.group("key") + m.group("q") + MASK + m.group("q"), text)
    return _KEY_VALUE.sub(lambda m: f"{m.group('key')}={MASK}", text)


def redact_data(value: Any) -> Any:
    """A JSON-like value (dicts, lists, strings) with every string redacted; other values as they are."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, Mapping):
        return {k: redact_data(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_data(v) for v in value]
    return value
