"""A small client of a Confluent-compatible Schema Registry: schemas by id (kept), a subject's latest.

A client asks the registry for a schema id once and keeps the answer; its owner (a pipeline's handle,
an executor's context) keeps the client, so executors never ask per record. A request that cannot
reach the registry is retried with backoff; then it fails with one line naming the registry's URL (a
:class:`RegistryError`), and nothing is committed for the batch.
"""

from __future__ import annotations

import base64
import json
import os
import threading
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from tailfill.config import EMBEDDED, SchemaRegistryConfig
from tailfill.errors import RegistryError
from tailfill.plumbing.retry import retrying

BACKOFF_SECONDS = 0.5  # first wait between tries, doubled per try (at most 8 s)


@dataclass(frozen=True)
class Reference:
    """A schema's reference to another subject's version, under the name it imports it by."""

    name: str
    subject: str
    version: int


@dataclass(frozen=True)
class RegisteredSchema:
    """One schema of the registry: its id, type (AVRO, PROTOBUF, JSON), text (Protobuf: serialized) and the
    schemas it references."""

    id: int
    kind: str
    text: str
    version: int | None = None
    references: tuple[Reference, ...] = ()

    @classmethod
    def of(cls, doc: dict, schema_id: int | None = None) -> RegisteredSchema:
        """The schema of a registry response (``schemas/ids/N`` or ``subjects/S/versions/V``)."""
        refs = tuple(Reference(r["name"], r["subject"], int(r["version"])) for r in doc.get("references") or [])
        return cls(schema_id if schema_id is not None else doc["id"], doc.get("schemaType") or "AVRO", doc["schema"],
                   doc.get("version"), refs)


class _Unanswered(Exception):
    """A request the registry did not answer (worth another try)."""


def _url_for_humans(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "")


class RegistryClient:
    """Requests to one registry, with retries and basic auth from the environment."""

    def __init__(self, cfg: SchemaRegistryConfig):
        if cfg.url == EMBEDDED:
            raise RegistryError("schema_registry.url 'embedded' must be resolved on the driver first "
                                "(tailfill.source.embedded.resolved)")
        self.cfg = cfg
        self.where = _url_for_humans(cfg.url)
        self._known: dict[tuple, RegisteredSchema | None] = {}  # id, or (subject, version) -> the schema, or None
        self._lock = threading.Lock()
        self.auth: str | None = None
        if cfg.credential_env:
            user_env, pass_env = cfg.credential_env
            user, password = os.environ.get(user_env), os.environ.get(pass_env)
            if user is None or password is None:
                raise RegistryError(f"the Schema Registry at {self.where} needs the login in ${user_env} and "
                                    f"${pass_env}, which are not set")
            self.auth = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()

    def _get(self, path: str) -> Any | None:
        """The JSON document at ``path``; None on 404; RegistryError once the tries are used up."""
        request = urllib.request.Request(f"{self.cfg.url}/{path}",
                                         headers={"Accept": "application/vnd.schemaregistry.v1+json"})
        if self.auth:
            request.add_header("Authorization", self.auth)
        try:
            for attempt in retrying(self.cfg.attempts, on=_Unanswered, first_wait=BACKOFF_SECONDS, max_wait=8.0):
                with attempt:
                    return self._get_once(request)
        except _Unanswered as exc:
            raise RegistryError(f"cannot reach the Schema Registry at {self.where} after {self.cfg.attempts} tries "
                                f"({exc})") from None
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _get_once(self, request: urllib.request.Request) -> Any | None:
        try:
            with urllib.request.urlopen(request, timeout=self.cfg.timeout_seconds) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            if exc.code in (401, 403):
                raise RegistryError(f"the Schema Registry at {self.where} refused the login "
                                    f"(HTTP {exc.code})") from None
            if exc.code < 500 and exc.code != 429:  # a request the registry will never answer
                raise RegistryError(f"the Schema Registry at {self.where} refused the request (HTTP {exc.code})"
                                    ) from None
            raise _Unanswered(f"HTTP {exc.code}") from None
        except (OSError, ValueError) as exc:  # refused, reset, timed out, not JSON
            raise _Unanswered(str(getattr(exc, "reason", exc))) from None

    def schema(self, schema_id: int) -> RegisteredSchema | None:
        """The schema with ``schema_id`` (None if the registry has none), asked once by this client."""
        return self._cached((schema_id,), f"schemas/ids/{schema_id}?format=serialized", schema_id)

    def version(self, subject: str, version: int) -> RegisteredSchema | None:
        """Version ``version`` of ``subject`` (None if the registry has none), asked once by this client."""
        path = f"subjects/{urllib.parse.quote(subject, safe='')}/versions/{version}?format=serialized"
        return self._cached((subject, version), path)

    def _cached(self, key: tuple, path: str, schema_id: int | None = None) -> RegisteredSchema | None:
        with self._lock:
            if key in self._known:
                return self._known[key]
        doc = self._get(path)
        found = None if doc is None else RegisteredSchema.of(doc, schema_id)
        with self._lock:
            self._known[key] = found
        return found

    def imports(self, schema: RegisteredSchema) -> dict[str, str]:
        """The text of every schema ``schema`` references, directly or not, by the name it is imported by;
        ValueError naming a reference the registry does not have."""
        out: dict[str, str] = {}
        pending = list(schema.references)
        while pending:
            ref = pending.pop()
            if ref.name in out:
                continue
            found = self.version(ref.subject, ref.version)
            if found is None:
                raise ValueError(f"its reference {ref.name!r} (subject {ref.subject!r} version {ref.version}) is "
                                 "not in the registry")
            out[ref.name] = found.text
            pending += found.references
        return out

    def latest(self, subject: str) -> RegisteredSchema:
        """The latest version of ``subject``; RegistryError if the subject has none."""
        doc = self._get(f"subjects/{urllib.parse.quote(subject, safe='')}/versions/latest?format=serialized")
        if doc is None:
            raise RegistryError(f"the Schema Registry at {self.where} has no subject {subject!r} (register the "
                                "producers' schema first, or set format.schema_registry.subject)")
        return RegisteredSchema.of(doc)
