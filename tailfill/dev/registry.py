"""A development Schema Registry on loopback: the part of Confluent's REST API that clients use.

For the demo and the tests only (no Schema Registry server installs on these machines): subjects
and versions are registered and looked up, schemas are served by id, and a new Avro version is
checked against the subject's compatibility level (``BACKWARD`` by default; ``NONE`` accepts
anything): Avro by the specification's resolution rules, Protobuf and JSON Schema by a small subset of
Confluent's (:mod:`tailfill.dev.protobuf_compat`, :mod:`tailfill.dev.json_schema_compat`). State
is in memory. ``tailfill registry up`` starts it detached and records its address in
``$TAILFILL_HOME/registry.json``, which ``schema_registry.url: embedded`` resolves to; tests use
:class:`DevRegistry`, which stops it when the block ends.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tailfill.dev.avro_compat import backward_problems as avro_backward
from tailfill.dev.json_schema_compat import backward_problems as json_backward
from tailfill.dev.protobuf_compat import backward_problems as protobuf_backward
from tailfill.dev.protobuf_compat import parse_file
from tailfill.errors import RegistryError
from tailfill.plumbing.detached import free_port, stop_detached
from tailfill.settings import settings
from tailfill.source.embedded import registry_state, registry_state_file

LEVELS = {"NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE"}


@dataclass
class _Store:
    """Schemas by id, and each subject's versions (schema ids in order)."""

    schemas: dict[int, dict] = field(default_factory=dict)  # id -> {"schema", "schemaType", "references"}
    subjects: dict[str, list[int]] = field(default_factory=dict)
    levels: dict[str, str] = field(default_factory=dict)  # subject ("" for global) -> compatibility
    lock: threading.Lock = field(default_factory=threading.Lock)

    def find(self, body: dict) -> int | None:
        key = _key(body)
        return next((i for i, s in self.schemas.items() if _key(s) == key), None)

    def level(self, subject: str) -> str:
        return self.levels.get(subject) or self.levels.get("", "BACKWARD")


def _key(body: dict) -> tuple:
    kind = body.get("schemaType") or "AVRO"
    text = body["schema"]
    if kind in ("AVRO", "JSON"):
        with contextlib.suppress(ValueError):
            text = json.dumps(json.loads(text), sort_keys=True)
    return kind, text, json.dumps(body.get("references") or [], sort_keys=True)


class _Error(Exception):
    def __init__(self, status: int, code: int, message: str):
        super().__init__(message)
        self.status, self.code = status, code


def _version_doc(store: _Store, subject: str, version: int) -> dict:
    sid = store.subjects[subject][version - 1]
    s = store.schemas[sid]
    return {"subject": subject, "version": version, "id": sid, "schema": s["schema"],
            "schemaType": s["schemaType"], "references": s["references"]}


def _pick_version(store: _Store, subject: str, version: str) -> int:
    versions = store.subjects.get(subject)
    if not versions:
        raise _Error(404, 40401, f"Subject '{subject}' not found.")
    n = len(versions) if version in ("latest", "-1") else int(version)
    if not 1 <= n <= len(versions):
        raise _Error(404, 40402, f"Version {version} not found.")
    return n


_CHECKS: dict[str, tuple[Callable[[str], Any], Callable[[Any, Any], list[str]]]] = {
    "AVRO": (json.loads, avro_backward), "JSON": (json.loads, json_backward),
    "PROTOBUF": (parse_file, protobuf_backward)}  # schema type -> (parse the text, why reader cannot read writer)


def _compatible(store: _Store, subject: str, body: dict, against: list[int]) -> list[str]:
    """Why ``body`` is not compatible with ``against`` (schema ids) under the subject's level, or []."""
    level = store.level(subject)
    if level == "NONE" or not against:
        return []
    kind = body.get("schemaType") or "AVRO"
    parse, problems_of = _CHECKS[kind]
    try:
        new = parse(body["schema"])
    except ValueError:
        return []  # e.g. Protobuf as .proto text: stored unchecked
    targets = against if level.endswith("TRANSITIVE") else against[-1:]
    problems = []
    for sid in targets:
        if store.schemas[sid]["schemaType"] != kind:
            problems.append(f"schema type {kind} differs from version of id {sid} ({store.schemas[sid]['schemaType']})")
            continue
        try:
            old = parse(store.schemas[sid]["schema"])
            if level.startswith(("BACKWARD", "FULL")):
                problems += problems_of(new, old)
            if level.startswith(("FORWARD", "FULL")):
                problems += problems_of(old, new)
        except (ValueError, KeyError):
            continue  # a schema this registry cannot compare (e.g. an external $ref): not checked
    return problems


def _route(store: _Store, method: str, parts: list[str], query: dict, body: dict | None) -> object:
    """The response document of one request (``parts``: the path split on '/')."""
    with store.lock:
        match (method, parts):
            case ("GET", ["subjects"]):
                return sorted(store.subjects)
            case ("GET", ["schemas", "types"]):
                return ["AVRO", "PROTOBUF", "JSON"]
            case ("GET", ["schemas", "ids", sid]):
                s = store.schemas.get(int(sid))
                if s is None:
                    raise _Error(404, 40403, f"Schema {sid} not found")
                return {"id": int(sid), **s}
            case ("GET", ["schemas", "ids", sid, "versions"]):
                return [{"subject": sub, "version": i + 1} for sub, ids in store.subjects.items()
                        for i, x in enumerate(ids) if x == int(sid)]
            case ("GET", ["subjects", subject, "versions"]):
                _pick_version(store, subject, "latest")
                return list(range(1, len(store.subjects[subject]) + 1))
            case ("GET", ["subjects", subject, "versions", version]):
                return _version_doc(store, subject, _pick_version(store, subject, version))
            case ("POST", ["subjects", subject, "versions"]):
                return _register(store, subject, body or {})
            case ("POST", ["subjects", subject]):
                sid = store.find(body or {})
                ids = store.subjects.get(subject, [])
                if sid is None or sid not in ids:
                    raise _Error(404, 40403, "Schema not found")
                return _version_doc(store, subject, ids.index(sid) + 1)
            case ("DELETE", ["subjects", subject]):
                _pick_version(store, subject, "latest")
                return list(range(1, len(store.subjects.pop(subject)) + 1))
            case ("POST", ["compatibility", "subjects", subject, "versions", *version]):
                ids = store.subjects.get(subject, [])
                against = ids if not version else ids[_pick_version(store, subject, version[0]) - 1:][:1]
                problems = _compatible(store, subject, body or {}, against)
                return {"is_compatible": not problems, **({"messages": problems} if problems else {})}
            case ("GET", ["config"]) | ("GET", ["config", _]):
                return {"compatibilityLevel": store.level(parts[1] if len(parts) > 1 else "")}
            case ("PUT", ["config"]) | ("PUT", ["config", _]):
                level = str((body or {}).get("compatibility", "")).upper()
                if level not in LEVELS:
                    raise _Error(422, 42203, f"Invalid compatibility level {level!r}")
                store.levels[parts[1] if len(parts) > 1 else ""] = level
                return {"compatibility": level}
            case ("GET", ["mode"]) | ("GET", ["mode", _]):
                return {"mode": "READWRITE"}
        raise _Error(404, 404, f"{method} /{'/'.join(parts)} is not served by the development registry")


def _register(store: _Store, subject: str, body: dict) -> dict:
    if not isinstance(body.get("schema"), str):
        raise _Error(422, 42201, "Invalid schema: 'schema' must be a string")
    doc = {"schema": body["schema"], "schemaType": body.get("schemaType") or "AVRO",
           "references": body.get("references") or []}
    if doc["schemaType"] in ("AVRO", "JSON"):
        try:
            json.loads(doc["schema"])
        except ValueError as exc:
            raise _Error(422, 42201, f"Invalid schema: {exc}") from None
    for ref in doc["references"]:
        versions = store.subjects.get(ref.get("subject"), [])
        if not 1 <= int(ref.get("version", 0)) <= len(versions):
            raise _Error(422, 42201, f"Invalid schema: reference {ref.get('name')!r} names subject "
                                     f"{ref.get('subject')!r} version {ref.get('version')}, which is not registered")
    ids = store.subjects.setdefault(subject, [])
    sid = store.find(doc)
    if sid is not None and sid in ids:
        return {"id": sid, "subject": subject, "version": ids.index(sid) + 1}
    problems = _compatible(store, subject, doc, ids)
    if problems:
        raise _Error(409, 409, f"Schema being registered is incompatible with an earlier schema for subject "
                               f"\"{subject}\": {'; '.join(problems)}")
    if sid is None:
        sid = max(store.schemas, default=0) + 1
        store.schemas[sid] = doc
    ids.append(sid)
    return {"id": sid, "subject": subject, "version": len(ids)}


def _handler(store: _Store) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self, method: str) -> None:
            url = urllib.parse.urlsplit(self.path)
            parts = [urllib.parse.unquote(p) for p in url.path.strip("/").split("/") if p]
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
                status, doc = 200, _route(store, method, parts, dict(urllib.parse.parse_qsl(url.query)), body)
            except _Error as exc:
                status, doc = exc.status, {"error_code": exc.code, "message": str(exc)}
            except (ValueError, KeyError) as exc:
                status, doc = 422, {"error_code": 422, "message": f"bad request: {exc}"}
            data = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def do_PUT(self) -> None:
            self._serve("PUT")

        def do_DELETE(self) -> None:
            self._serve("DELETE")

        def log_message(self, *args: object) -> None:  # quiet: tests and the demo read their own output
            pass

    return Handler


class DevRegistry:
    """The development registry in this process (a thread) for the lifetime of a ``with`` block."""

    def __init__(self, port: int = 0):
        self.port = port or free_port()
        self.server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> DevRegistry:
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), _handler(_Store()))
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, name="dev-registry", daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def __enter__(self) -> DevRegistry:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve(port: int) -> None:
    """Serve on 127.0.0.1:``port`` until terminated (the detached process of ``registry up``)."""
    registry = DevRegistry(port).start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    registry.stop()


def registry_up(home: Path | None = None, port: int | None = None) -> dict:
    """Start the detached development registry (or return the running one)."""
    home = home or settings().home
    home.mkdir(parents=True, exist_ok=True)
    running = registry_state(home)
    if running:
        return running
    port = port or settings().registry_port or free_port()
    with open(home / "registry.log", "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "tailfill.dev.registry", str(port)], stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    _wait_until_serving(port, proc)
    state = {"pid": proc.pid, "port": port, "url": f"http://127.0.0.1:{port}"}
    registry_state_file(home).write_text(json.dumps(state))
    return state


def _wait_until_serving(port: int, proc: subprocess.Popen, timeout: float = 15.0) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RegistryError(f"the development registry exited with code {proc.returncode} before serving")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/subjects", timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RegistryError(f"the development registry did not serve on 127.0.0.1:{port} within {timeout:.0f}s")


def registry_down(home: Path | None = None) -> bool:
    """Stop the detached development registry; True if one was running. Its schemas are gone."""
    home = home or settings().home
    return stop_detached(registry_state(home), registry_state_file(home))


if __name__ == "__main__":
    serve(int(sys.argv[1]))
