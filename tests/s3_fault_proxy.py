"""A loopback HTTP proxy in front of an S3 endpoint that fails chosen requests on purpose.

Clients are pointed at the proxy instead of the S3 server (a pipeline's ``target.s3.endpoint``);
every request is forwarded as it is, except those that match an armed :class:`Fault`, which get
an HTTP 500 or 503 with an S3 error body, a connection held open until the client gives up (a
timeout), or a TCP reset. A fault can also strike *after* forwarding: the write happened, but the
client hears that it failed. Every injected fault is recorded, so a test can say what it did.
"""

from __future__ import annotations

import http.client
import re
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Literal
from urllib.parse import urlparse

FaultKind = Literal["500", "503", "timeout", "reset"]
# Headers that belong to one connection, not to the request: never forwarded.
_HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
               "transfer-encoding", "upgrade"}
_ERRORS = {"500": ("InternalError", "We encountered an internal error. Please try again."),
           "503": ("SlowDown", "Please reduce your request rate.")}


@dataclass
class Fault:
    """Fail the next ``times`` requests whose method is ``method`` and whose path matches ``path``."""

    kind: FaultKind
    method: str
    path: str  # a regular expression, searched in the request's path (query string included)
    times: int = 1
    after: bool = False  # forward first (the request takes effect), then fail the reply
    hits: int = 0

    def matches(self, method: str, path: str) -> bool:
        return self.hits < self.times and method == self.method and re.search(self.path, path) is not None


@dataclass
class Injected:
    """One fault as it happened."""

    kind: FaultKind
    method: str
    path: str
    after: bool


@dataclass
class S3FaultProxy:
    """The proxy, on a free loopback port for the lifetime of a ``with`` block."""

    upstream: str  # the real endpoint, e.g. http://127.0.0.1:PORT
    hold_seconds: float = 20.0  # how long a "timeout" keeps the connection silent before dropping it
    faults: list[Fault] = field(default_factory=list)
    injected: list[Injected] = field(default_factory=list)
    forwarded: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    @property
    def endpoint(self) -> str:
        assert self._server is not None, "the proxy is not running"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def arm(self, *faults: Fault) -> None:
        with self._lock:
            self.faults.extend(faults)

    def disarm(self) -> None:
        with self._lock:
            self.faults.clear()

    def take(self, method: str, path: str) -> Fault | None:
        """The armed fault for this request, counted as used, or None."""
        with self._lock:
            fault = next((f for f in self.faults if f.matches(method, path)), None)
            if fault is not None:
                fault.hits += 1
                self.injected.append(Injected(fault.kind, method, path, fault.after))
            return fault

    def __enter__(self) -> S3FaultProxy:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="s3-fault-proxy", daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def _handler(proxy: S3FaultProxy) -> type[BaseHTTPRequestHandler]:
    target = urlparse(proxy.upstream)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as S3 clients expect

        def log_message(self, format: str, *args: object) -> None:  # quiet
            pass

        def _body(self) -> tuple[bytes, dict[str, str]]:
            """The request body, with any chunked transfer decoded (and its trailers as headers)."""
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                parts, trailers = [], {}
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        break
                    parts.append(self.rfile.read(size))
                    self.rfile.readline()
                while (line := self.rfile.readline().strip()):
                    name, _, value = line.decode().partition(":")
                    trailers[name.strip()] = value.strip()
                return b"".join(parts), trailers
            return self.rfile.read(int(self.headers.get("Content-Length", 0) or 0)), {}

        def _fail(self, fault: Fault) -> None:
            if fault.kind == "timeout":
                time.sleep(proxy.hold_seconds)  # silent until the client has given up
                self.close_connection = True
                return
            if fault.kind == "reset":
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.close_connection = True
                self.connection.close()
                return
            code, message = _ERRORS[fault.kind]
            body = (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code><Message>{message}'
                    f"</Message><Resource>{self.path}</Resource></Error>").encode()
            self.send_response(int(fault.kind))
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _handle(self) -> None:
            body, trailers = self._body()
            fault = proxy.take(self.command, self.path)
            if fault is not None and not fault.after:
                self._fail(fault)
                return
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP} | trailers
            if body or self.command in ("PUT", "POST"):
                headers["Content-Length"] = str(len(body))
            upstream = http.client.HTTPConnection(target.hostname, target.port, timeout=120)
            try:
                upstream.request(self.command, self.path, body=body, headers=headers)
                reply = upstream.getresponse()
                data = reply.read()
                with proxy._lock:
                    proxy.forwarded += 1
                if fault is not None:  # it happened upstream; the client hears otherwise
                    self._fail(fault)
                    return
                self.send_response(reply.status, reply.reason)
                for name, value in reply.getheaders():
                    if name.lower() not in _HOP_BY_HOP and name.lower() != "content-length":
                        self.send_header(name, value)
                length = reply.getheader("Content-Length") if self.command == "HEAD" else str(len(data))
                self.send_header("Content-Length", length or "0")
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
            finally:
                upstream.close()

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

    return Handler
